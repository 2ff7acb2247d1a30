"""The steps of a depthwise convolution, or a max pool, on the window unit (DWCONV; see
:mod:`compiler.passes.schedule` and :mod:`compiler.passes.window_pool`)."""

from __future__ import annotations

import itertools

from arch import isa
from arch.reference import zero_point
from compiler.passes.step_ops import Halves, accum_tile, load_params, load_tile, store_tile
from compiler.passes.steps import Step, groups, weight_symbol
from compiler.plan import DescSpec, Layer, Op, Plan


def dw_steps(plan: Plan, layer: Layer, halves: Halves) -> list[Step]:
    """A depthwise layer on the window unit: per step, ``rows_per_tile`` output rows x
    ``n_blocks`` channel blocks. Each block's input rows (padding included, filled by the DMA)
    sit in ACT as an image of ``pitch`` = its columns; one DWCONV per block and pass (the
    first adds the bias, or an ACCUM adds bias and residual first). A max pool is the same walk
    in max mode: padding -128, no weights (the DWCONVs read WGT lines they do not use)."""
    shape, tiling = layer.gemm, layer.tiling
    assert shape is not None and tiling is not None
    dim = plan.dim
    taps = shape.chunks(dim)
    residual = layer.inputs[1] if len(layer.inputs) > 1 else None
    pooling = layer.kind == "pool"  # a max pool (compiler.passes.window_pool)
    n_groups = groups(shape.out_channels // dim, tiling.n_blocks)
    if not pooling:
        layer.weight_blocks = [(nb0, nbc, 0, taps, nb0 * taps * dim) for nb0, nbc in n_groups]
    steps: list[Step] = []
    for tile, ((nb0, nbc), (oy0, rows)) in enumerate(
        itertools.product(n_groups, groups(shape.out_h, tiling.rows_per_tile))
    ):
        mt = rows * shape.out_w
        in_rows, pitch = shape.dw_input(rows)
        block = in_rows * pitch  # ACT lines of one channel block's input tile
        half = len(steps) % 2
        act_base, wgt_base = half * halves.act, half * halves.wgt
        acc_base = (tile % 2) * halves.acc
        slot = halves.slot(tile)
        step = Step(tile=tile, first_of_tile=True)
        step.loads.append(load_params(plan, layer, slot, nb0, nbc))
        step.loads.append(_input_rows(plan, layer, act_base, oy0, rows, (nb0, nbc)))
        res_base = act_base + nbc * block
        if residual is not None:
            step.loads.append(load_tile(plan, residual, res_base, oy0, mt, nb0, nbc))
        if not pooling:
            wdesc = DescSpec(
                isa.Mem.WGT,
                wgt_base,
                weight_symbol(layer),
                nb0 * taps * dim,
                [(nbc * taps, dim, 1)],
            )
            step.loads.append(Op(isa.Opcode.LOAD, desc=wdesc))
        if residual is not None:
            step.compute.append(accum_tile(acc_base, res_base, slot, mt, nbc, 1, 0))
        bases = (act_base, wgt_base, acc_base, slot)
        step.compute += _dwconvs(layer, bases, rows, nbc, residual is None)
        step.store.append(store_tile(plan, layer, acc_base, slot, oy0, mt, nb0, nbc))
        steps.append(step)
    return steps


def _input_rows(
    plan: Plan, layer: Layer, act_base: int, oy0: int, rows: int, blocks: tuple[int, int]
) -> Op:
    """Load the input rows ``rows`` output rows from ``oy0`` read, of channel blocks ``blocks``
    = (nb0, nbc): per block an image of ``pitch`` columns, padding included (a max pool pads
    with -128, a conv with the input's zero point: real 0)."""
    shape, src = layer.gemm, plan.tensor(layer.inputs[0])
    assert shape is not None
    dim, (nb0, nbc) = plan.dim, blocks
    pt, pl = shape.pads[0], shape.pads[1]
    in_rows, pitch = shape.dw_input(rows)
    y0 = oy0 * shape.stride[0] - pt
    desc = DescSpec(
        isa.Mem.ACT,
        act_base,
        src.name,
        src.offset + (y0 * src.w - pl) * src.pixel_stride + nb0 * dim,
        [
            (nbc, dim, in_rows * pitch, 0, 0),
            (in_rows, src.w * src.pixel_stride, pitch, 1, 0),
            (pitch, src.pixel_stride, 1, 0, 1),
        ],
        y0=y0,
        x0=-pl,
        height=src.h,
        width=src.w,
        pad_value=-128 if layer.kind == "pool" else zero_point(plan.graph, layer.inputs[0]),
    )
    return Op(isa.Opcode.LOAD, desc=desc)


def _dwconvs(
    layer: Layer, bases: tuple[int, int, int, int], rows: int, nbc: int, bias: bool
) -> list[Op]:
    """One DWCONV per channel block and pass over the tile's input rows; the first of a block
    adds the bias if ``bias`` (else an ACCUM put bias and residual in ACC first)."""
    shape = layer.gemm
    assert shape is not None
    (act_base, wgt_base, acc_base, slot), (dy, dx) = bases, shape.dilation
    pooling = layer.kind == "pool"
    taps, mt = shape.kernel[0] * shape.kernel[1], rows * shape.out_w
    in_rows, pitch = shape.dw_input(rows)
    block = in_rows * pitch  # ACT lines of one channel block's input tile
    ops = []
    for j in range(nbc):
        first_tap = 0
        for p, (i0, kh, j0, kw) in enumerate(shape.dw_passes()):
            first = p == 0 and bias
            fields = {
                "wgt_addr": wgt_base + j * taps + first_tap,
                "act_addr": act_base + j * block + i0 * dy * pitch + j0 * dx,
                "acc_addr": acc_base + j * mt,
                "param_addr": slot + j,
                "out_w": shape.out_w,
                "out_h": rows,
                "pitch": pitch,
                "kh": kh,
                "kw": kw,
                "stride": shape.stride[0],
                "use_bias": int(first and not pooling),
                "accumulate": int(not first),
                "max": int(pooling),
            }
            ops.append(Op(isa.Opcode.DWCONV, fields=fields))
            first_tap += kh * kw
    return ops

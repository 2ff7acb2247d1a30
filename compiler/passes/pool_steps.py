"""The steps of a pooling layer on POOL (see :mod:`compiler.passes.schedule`)."""

from __future__ import annotations

import itertools

from arch import isa
from arch.reference import zero_point
from compiler.constants import zero_point_bias
from compiler.passes.step_ops import Halves, accum_tile, load_params, store_tile
from compiler.passes.steps import Step, groups
from compiler.passes.tile import MAX_WINDOW
from compiler.plan import DescSpec, Layer, Op, Plan


def pool_steps(plan: Plan, layer: Layer, halves: Halves) -> list[Step]:
    tiling = layer.tiling
    assert tiling is not None
    src, out = plan.tensor(layer.inputs[0]), plan.tensors[layer.output]
    kh, kw = layer.node.attrs.get("kernel", (src.h, src.w))
    zp_bias = zero_point_bias(plan, layer)  # an average pool of an input with a zero point
    steps: list[Step] = []
    for tile, ((nb0, nbc), (oy0, rows)) in enumerate(
        itertools.product(
            groups(out.channels // plan.dim, tiling.n_blocks), groups(out.h, tiling.rows_per_tile)
        )
    ):
        mt = rows * out.w
        acc_base = (tile % 2) * halves.acc
        slot = halves.slot(tile)
        # A global pool whose window does not fit an ACT half is reduced a part of its kernel
        # rows per step, each part accumulating into ACC; other pools take the whole window.
        part_rows = kh if mt * kh * kw * nbc <= halves.act else halves.act // (kw * nbc)
        parts = groups(kh, max(part_rows, 1))
        for part, kernel_rows in enumerate(parts):
            step = Step(tile=tile, first_of_tile=part == 0)
            if part == 0:
                step.loads.append(load_params(plan, layer, slot, nb0, nbc))
            act_base = (len(steps) % 2) * halves.act
            if part == 0 and zp_bias is not None:  # ACC starts at -window * z_in
                step.compute.append(accum_tile(acc_base, act_base, slot, mt, nbc, 0, 0))
            _pool_part(
                plan, layer, step, (act_base, acc_base), (oy0, rows), (nb0, nbc), kernel_rows
            )
            if part == len(parts) - 1:
                step.store.append(store_tile(plan, layer, acc_base, slot, oy0, mt, nb0, nbc))
            steps.append(step)
    return steps


def _pool_part(
    plan: Plan,
    layer: Layer,
    step: Step,
    bases: tuple[int, int],
    out_rows: tuple[int, int],
    blocks: tuple[int, int],
    kernel_rows: tuple[int, int],
) -> None:
    """The loads and POOLs of kernel rows ``ky0 .. ky0 + kh - 1`` of the windows of output rows
    ``oy0 ..`` and channel blocks ``nb0 ..``; a part after the first accumulates into ACC."""
    node, dim = layer.node, plan.dim
    src, out = plan.tensor(layer.inputs[0]), plan.tensors[layer.output]
    (act_base, acc_base), (oy0, rows), (nb0, nbc), (ky0, kh) = bases, out_rows, blocks, kernel_rows
    kw = node.attrs.get("kernel", (src.h, src.w))[1]
    sh, sw = node.attrs.get("stride", (1, 1))
    pt, pl = node.attrs.get("pads", (0, 0, 0, 0))[:2]
    mt, window = rows * out.w, kh * kw
    mode = isa.PoolMode.MAX if node.op == "maxpool" else isa.PoolMode.SUM
    z_in = zero_point(plan.graph, layer.inputs[0])  # a sum pads with real 0: the zero point
    after_init = mode is isa.PoolMode.SUM and z_in != 0  # an ACCUM put -window * z_in in ACC first
    y0 = oy0 * sh - pt + ky0
    for j in range(nbc):
        desc = DescSpec(
            isa.Mem.ACT,
            act_base + j * mt * window,
            src.name,
            src.offset + (y0 * src.w - pl) * src.pixel_stride + (nb0 + j) * dim,
            [
                (rows, sh * src.w * src.pixel_stride, out.w * window, sh, 0),
                (out.w, sw * src.pixel_stride, window, 0, sw),
                (kh, src.w * src.pixel_stride, kw, 1, 0),
                (kw, src.pixel_stride, 1, 0, 1),
            ],
            y0=y0,
            x0=-pl,
            height=src.h,
            width=src.w,
            pad_value=-128 if mode is isa.PoolMode.MAX else z_in,
        )
        step.loads.append(Op(isa.Opcode.LOAD, desc=desc))
    # One POOL per output row tile; a window wider than the 8-bit field (a global pool of a
    # large map, so mt == 1) is reduced in chunks that accumulate into ACC.
    chunks = [(0, window)] if mt > 1 else groups(window, MAX_WINDOW)
    for first, size in chunks:
        fields = {
            "act_addr": act_base + first,
            "acc_addr": acc_base,
            "m": mt,
            "window": size,
            "n_iter": nbc,
            "act_n_stride": mt * window,
            "acc_n_stride": mt,
            "mode": mode,
            "accumulate": int(ky0 > 0 or first > 0 or after_init),
        }
        step.compute.append(Op(isa.Opcode.POOL, fields=fields))

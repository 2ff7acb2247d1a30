"""The steps of a convolution or GEMM layer, and of batch_matmul (see
:mod:`compiler.passes.schedule`): k groups of im2col lines (or input tiles loaded once,
:mod:`compiler.passes.input_reuse`) per m tile and n group."""

from __future__ import annotations

import itertools

from arch import isa
from arch.reference import zero_point
from compiler.passes import ramp
from compiler.passes.input_reuse import InputReuse
from compiler.passes.step_ops import (
    Halves,
    load_activation_weights,
    load_params,
    load_tile,
    store_tile,
    store_transposed,
)
from compiler.passes.steps import Step, groups, weight_symbol
from compiler.passes.tile import PARAM_SLOTS, RESIDUAL_SLOTS
from compiler.plan import DescSpec, Layer, Op, Plan


def gemm_steps(plan: Plan, layer: Layer, halves: Halves) -> list[Step]:
    """conv / gemm, and batch_matmul: the same walk once per head, its weights read from the
    second input's lines (:func:`load_activation_weights`) instead of the layer's weight tiles.
    A tile's first GEMM overwrites ACC and its STORE adds the bias, and the requantized residual
    (loaded into a residual slot of ACT with the tile's first step) if the layer has one."""
    shape, tiling = layer.gemm, layer.tiling
    assert shape is not None and tiling is not None
    dim = plan.dim
    src = plan.tensor(layer.inputs[0])
    kh, kw = shape.kernel
    sh, sw = shape.stride
    pt, pl = shape.pads[0], shape.pads[1]
    cb_total = shape.in_channels // dim
    chunks, blocks = shape.chunks(dim), shape.out_channels // dim
    matmul = layer.kind == "matmul"
    heads = plan.graph.tensors[layer.inputs[0]].shape[1] if matmul else 1
    residual = layer.inputs[1] if len(layer.inputs) > 1 and not matmul else None
    n_groups = groups(blocks, tiling.n_blocks)
    k_groups = groups(chunks, tiling.k_group)
    m_tiles = groups(shape.out_h, tiling.rows_per_tile)
    reuse = InputReuse(plan, layer) if tiling.input_reuse else None
    if reuse is not None:
        k_groups = reuse.k_groups
    # A residual tile stays in ACT until its tile's STORE adds it: RESIDUAL_SLOTS slots above
    # the two step halves, which shrink by two slots each.
    res_slot = tiling.n_blocks * tiling.rows_per_tile * shape.out_w if residual else 0
    act_half = halves.act_step = halves.act - RESIDUAL_SLOTS // 2 * res_slot

    def tap_of(k: int) -> int:
        return k // cb_total

    # Weight blocks in DRAM, in the order the steps load them: (n group, k group).
    offset, blocks_at = 0, {}
    for (nb0, nbc), (k0, kc) in itertools.product(n_groups, k_groups):
        blocks_at[(nb0, k0)] = offset
        offset += kc * nbc * dim * dim
    layer.weight_blocks = [
        (nb0, nbc, k0, kc, blocks_at[(nb0, k0)])
        for (nb0, nbc), (k0, kc) in itertools.product(n_groups, k_groups)
        if not matmul
    ]
    if reuse is not None:  # the first step's weights again, in ramp-part order
        (nb0, nbc), kc = n_groups[0], k_groups[0][1]
        blocks_at[(nb0, reuse.ramp_chunk)] = offset
        layer.weight_blocks.append((nb0, nbc, reuse.ramp_chunk, kc, offset))

    steps: list[Step] = []
    in_half: dict[int, tuple[int, int, int]] = {}  # the weights each WGT half holds
    in_act_half: dict[int, tuple[int, int, int]] = {}  # the activations each ACT half holds
    for tile, (head, (nb0, nbc), (oy0, rows)) in enumerate(
        itertools.product(range(heads), n_groups, m_tiles)
    ):
        out_nb0 = head * blocks + nb0  # the output block of this head's columns
        mt = rows * shape.out_w
        acc_base = (tile % 2) * halves.acc
        slot = (tile % PARAM_SLOTS) * halves.param
        for gi, (k0, kc) in enumerate(k_groups):
            half = (len(steps) + halves.first) % 2
            act_base, wgt_base = half * act_half, half * halves.wgt
            res_base = 2 * act_half + (tile % RESIDUAL_SLOTS) * res_slot
            step = Step(tile=tile, first_of_tile=gi == 0)
            # Weights this half already holds (two steps back, same n and k group) stay. The
            # layer's first step on input tiles has its own copy of its weights (ramp order).
            ramped = reuse is not None and not steps
            weights = (head, nb0, reuse.ramp_chunk if reuse is not None and ramped else k0)
            keep = in_half.get(half) == weights
            in_half[half] = weights
            # Activations this half already holds (two steps back, same m tile and k group: an
            # m tile of one k group over n groups) stay too.
            acts = (head, oy0, k0)
            keep_act = in_act_half.get(half) == acts
            in_act_half[half] = acts
            if gi == 0:
                step.loads.append(load_params(plan, layer, slot, out_nb0, nbc))
            if reuse is not None:
                reuse.step(
                    step,
                    gi,
                    (keep_act, keep),
                    (act_base, wgt_base, acc_base),
                    oy0,
                    rows,
                    nbc,
                    blocks_at[weights[1:]],
                    ramped,
                )
            else:
                # The layer's first step in ramp parts (each its own LOAD -> COMPUTE token).
                sizes = ramp.parts(kc, plan.config) if not steps and not matmul else [kc]
                for part, pk0 in enumerate(itertools.accumulate([0, *sizes[:-1]])):
                    pkc = sizes[part]
                    before = step.loads[-1] if part else None
                    # Activations: one descriptor per run of chunks sharing a kernel tap (ky, kx),
                    # unless the half still holds them.
                    chunks_of_part = range(k0 + pk0, k0 + pk0 + pkc)
                    tap_runs = () if keep_act else itertools.groupby(chunks_of_part, key=tap_of)
                    for tap, run in tap_runs:
                        chunk_list = list(run)
                        first, count = chunk_list[0], len(chunk_list)
                        ky, kx = tap // kw, tap % kw
                        cb = first % cb_total
                        dy, dx = shape.dilation
                        y0, x0 = oy0 * sh + ky * dy - pt, kx * dx - pl
                        desc = DescSpec(
                            isa.Mem.ACT,
                            act_base + (first - k0) * mt,
                            src.name,
                            src.offset
                            + (y0 * src.w + x0) * src.pixel_stride
                            + cb * dim
                            + head * shape.in_channels,
                            [
                                (count, dim, mt, 0, 0),
                                (rows, sh * src.w * src.pixel_stride, shape.out_w, sh, 0),
                                (shape.out_w, sw * src.pixel_stride, 1, 0, sw),
                            ],
                            y0=y0,
                            x0=x0,
                            height=src.h,
                            width=src.w,
                            pad_value=zero_point(plan.graph, layer.inputs[0]),  # real 0
                        )
                        step.loads.append(Op(isa.Opcode.LOAD, desc=desc))
                    tile_lines = nbc * dim  # WGT lines of one k chunk's nbc tiles
                    if keep:  # the half still holds these weights
                        pass
                    elif matmul:
                        step.loads.append(
                            load_activation_weights(plan, layer, wgt_base, head, nb0, nbc, k0, kc)
                        )
                    else:
                        wdesc = DescSpec(
                            isa.Mem.WGT,
                            wgt_base + pk0 * tile_lines,
                            weight_symbol(layer),
                            blocks_at[(nb0, k0)] + pk0 * tile_lines * dim,
                            [(pkc * tile_lines, dim, 1)],
                        )
                        step.loads.append(Op(isa.Opcode.LOAD, desc=wdesc))
                    step.compute.append(
                        Op(
                            isa.Opcode.GEMM,
                            fields={
                                "wgt_addr": wgt_base + pk0 * tile_lines,
                                "act_addr": act_base + pk0 * mt,
                                "acc_addr": acc_base,
                                "m": mt,
                                "k_iter": pkc,
                                "n_iter": nbc,
                                "act_k_stride": mt,
                                "acc_n_stride": mt,
                                "accumulate": int(gi > 0 or part > 0),
                            },
                        )
                    )
                    if before is not None:
                        step.parts.append((before, step.compute[-1]))
            if gi == 0 and residual is not None:  # after the step's chunks: read at the STORE
                step.loads.append(load_tile(plan, residual, res_base, oy0, mt, nb0, nbc))
            if gi == len(k_groups) - 1 and plan.tensor(layer.output).layout == "tokens_t":
                step.store += store_transposed(plan, layer, acc_base, slot, oy0, mt, nb0, nbc)
            elif gi == len(k_groups) - 1:
                step.store.append(store_tile(plan, layer, acc_base, slot, oy0, mt, out_nb0, nbc))
            for op in step.store:  # the first GEMM overwrites ACC; the STORE adds the bias
                op.fields["use_bias"] = 1
                if residual is not None:  # and the requantized residual, laid out as ACC is
                    assert op.desc is not None
                    res_addr = res_base + op.desc.local_base - acc_base
                    op.fields |= {"use_res": 1, "res_addr": res_addr}
            steps.append(step)
    return steps

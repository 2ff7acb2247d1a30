"""The steps of a convolution or GEMM layer, and of batch_matmul (see
:mod:`compiler.passes.schedule`): k groups of im2col lines (or input tiles loaded once,
:mod:`compiler.passes.input_reuse`) per m tile and n group."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import NamedTuple

from arch import isa
from arch.reference import zero_point
from compiler.constants import param_lines
from compiler.passes import ramp
from compiler.passes.input_reuse import InputReuse
from compiler.passes.step_ops import (
    Halves,
    load_activation_weights,
    load_params,
    load_tile,
    store_tile,
    store_transposed,
    weights_transposed,
)
from compiler.passes.steps import Step, groups, weight_symbol
from compiler.passes.tile import RESIDUAL_SLOTS
from compiler.plan import DescSpec, GemmShape, Layer, Op, Plan


@dataclass
class _Walk:
    """A GEMM layer's walk: its shape and groups, and where each weight block sits in DRAM."""

    plan: Plan
    layer: Layer
    shape: GemmShape
    matmul: bool  # batch_matmul: weights from the second input, one walk per head
    transpose_w: bool  # its second input is key rows as stored: GEMM reads each tile transposed
    heads: int
    residual: str | None
    n_groups: list[tuple[int, int]]
    k_groups: list[tuple[int, int]]
    m_tiles: list[tuple[int, int]]  # (first output row, rows)
    reuse: InputReuse | None  # input tiles loaded once (CONV), or None: im2col lines (GEMM)
    res_slot: int  # ACT lines of one residual slot (0: no residual)
    #: (first n block, first k chunk) -> byte offset of the weight block in DRAM
    blocks_at: dict[tuple[int, int], int] = field(default_factory=dict)


class _Tile(NamedTuple):
    """One m tile of one n group (of one head): its output rows and blocks, ACC half and slot."""

    number: int  # the tile's place in the layer
    head: int
    group: int  # batch_matmul's block of rows (and of the second input's positions)
    nb0: int
    nbc: int
    oy0: int
    rows: int
    mt: int  # ACC lines per output block: rows * out_w
    out_nb0: int  # the output block of nb0 (this head's columns)
    acc_base: int
    slot: int  # the first PARAM line of the tile's slot


def _walk(plan: Plan, layer: Layer) -> _Walk:
    shape, tiling = layer.gemm, layer.tiling
    assert shape is not None and tiling is not None
    matmul = layer.kind == "matmul"
    residual = layer.inputs[1] if len(layer.inputs) > 1 and not matmul else None
    reuse = InputReuse(plan, layer) if tiling.input_reuse else None
    return _Walk(
        plan,
        layer,
        shape,
        matmul,
        weights_transposed(plan, layer),
        heads=plan.graph.tensors[layer.inputs[0]].shape[1] if matmul else 1,
        residual=residual,
        n_groups=groups(shape.out_channels // plan.dim, tiling.n_blocks),
        k_groups=reuse.k_groups
        if reuse is not None
        else groups(shape.chunks(plan.dim), tiling.k_group),
        m_tiles=groups(shape.out_h, tiling.rows_per_tile),
        reuse=reuse,
        res_slot=tiling.n_blocks * tiling.rows_per_tile * shape.out_w if residual else 0,
    )


def _place_weights(walk: _Walk) -> None:
    """Weight blocks in DRAM, in the order the steps load them: (n group, k group); with input
    reuse, the first step's weights again, in ramp-part order. Sets ``layer.weight_blocks``."""
    dim, layer, reuse = walk.plan.dim, walk.layer, walk.reuse
    offset = 0
    for (nb0, nbc), (k0, kc) in itertools.product(walk.n_groups, walk.k_groups):
        walk.blocks_at[(nb0, k0)] = offset
        offset += kc * nbc * dim * dim
    layer.weight_blocks = [
        (nb0, nbc, k0, kc, walk.blocks_at[(nb0, k0)])
        for (nb0, nbc), (k0, kc) in itertools.product(walk.n_groups, walk.k_groups)
        if not walk.matmul
    ]
    if reuse is not None:
        (nb0, nbc), kc = walk.n_groups[0], walk.k_groups[0][1]
        walk.blocks_at[(nb0, reuse.ramp_chunk)] = offset
        layer.weight_blocks.append((nb0, nbc, reuse.ramp_chunk, kc, offset))


def _heads_share_params(walk: _Walk) -> bool:
    """Whether a batch_matmul's tiles (of each head, and each m tile) have the same PARAM
    entries - one n group, and one rescale for every head's columns (:mod:`compiler.constants`):
    then the first tile's slot serves them all, loaded once."""
    if not walk.matmul or walk.heads * len(walk.m_tiles) < 2 or len(walk.n_groups) > 1:
        return False
    lines = param_lines(walk.plan, walk.layer)
    per_head = walk.shape.out_channels // walk.plan.dim * walk.plan.dim * isa.PARAM_ENTRY_BYTES
    heads = lines[: walk.heads * per_head].reshape(walk.heads, per_head)
    return bool((heads == heads[0]).all())


def gemm_steps(plan: Plan, layer: Layer, halves: Halves) -> list[Step]:
    """conv / gemm, and batch_matmul: the same walk once per head, its weights read from the
    second input's lines (:func:`load_activation_weights`) instead of the layer's weight tiles.
    A tile's first GEMM overwrites ACC and its STORE adds the bias, and the requantized residual
    (loaded into a residual slot of ACT with the tile's first step) if the layer has one."""
    walk = _walk(plan, layer)
    _place_weights(walk)
    shape, reuse = walk.shape, walk.reuse
    blocks = shape.out_channels // plan.dim
    # A residual tile stays in ACT until its tile's STORE adds it: RESIDUAL_SLOTS slots above
    # the two step halves, which shrink by two slots each.
    act_half = halves.act_step = halves.act - RESIDUAL_SLOTS // 2 * walk.res_slot
    shared = _heads_share_params(walk)
    steps: list[Step] = []
    in_half: dict[int, tuple[int, int, int, int]] = {}  # the weights each WGT half holds
    in_act_half: dict[int, tuple[int, int, int]] = {}  # the activations each ACT half holds
    for index, (head, (nb0, nbc), (oy0, rows)) in enumerate(
        itertools.product(range(walk.heads), walk.n_groups, walk.m_tiles)
    ):
        acc_base, slot = (index % 2) * halves.acc, halves.slot(0 if shared else index)
        mt = rows * shape.out_w
        group = oy0 // (shape.out_h // shape.groups)
        tile = _Tile(
            index, head, group, nb0, nbc, oy0, rows, mt, head * blocks + nb0, acc_base, slot
        )
        for gi, (k0, kc) in enumerate(walk.k_groups):
            half = (len(steps) + halves.first) % 2
            bases = (half * act_half, half * halves.wgt, acc_base)
            step = Step(tile=index, first_of_tile=gi == 0)
            # Weights this half already holds (two steps back, same n and k group) stay. The
            # layer's first step on input tiles has its own copy of its weights (ramp order).
            ramped = reuse is not None and not steps
            chunk = reuse.ramp_chunk if reuse is not None and ramped else k0
            weights = (head, group, nb0, chunk)  # (a group's own block of the second input)
            keep = in_half.get(half) == weights
            in_half[half] = weights
            # Activations this half already holds (two steps back, same m tile and k group: an
            # m tile of one k group over n groups) stay too.
            acts = (head, oy0, k0)
            keep_act = in_act_half.get(half) == acts
            in_act_half[half] = acts
            if gi == 0 and not (shared and index):  # (every head's the first's: loaded once)
                step.loads.append(load_params(plan, layer, slot, tile.out_nb0, nbc))
            if reuse is not None:
                offset = walk.blocks_at[weights[2:]]
                reuse.step(step, gi, (keep_act, keep), bases, oy0, rows, nbc, offset, ramped)
            else:
                _im2col_step(walk, step, tile, bases, (gi, k0, kc), (keep_act, keep), not steps)
            res_base = 2 * act_half + (index % RESIDUAL_SLOTS) * walk.res_slot
            _residual_and_stores(walk, step, tile, gi, res_base)
            steps.append(step)
    return steps


def _im2col_step(
    walk: _Walk,
    step: Step,
    tile: _Tile,
    bases: tuple[int, int, int],
    group: tuple[int, int, int],
    keeps: tuple[bool, bool],
    first_step: bool,
) -> None:
    """The loads and GEMMs of k group ``group`` = (gi, k0, kc) on im2col lines; the layer's
    first step in ramp parts (each its own LOAD -> COMPUTE token). ``keeps``: the halves still
    hold the activations, the weights."""
    plan, layer = walk.plan, walk.layer
    dim, (act_base, wgt_base, acc_base), (gi, k0, kc) = plan.dim, bases, group
    nb0, nbc, mt = tile.nb0, tile.nbc, tile.mt
    sizes = ramp.parts(kc, plan.config) if first_step and not walk.matmul else [kc]
    # Activations that take the bus less time than a descriptor read come whole with the
    # first part (a decode step's one token row): a LOAD a part would cost a descriptor each.
    whole = walk.shape.groups == 1 and mt * kc * _line_beats(plan) <= isa.descriptor_read_cycles(
        plan.config.dram_latency, plan.config.dram_bytes_per_cycle
    )
    for part, pk0 in enumerate(itertools.accumulate([0, *sizes[:-1]])):
        pkc = sizes[part]
        before = step.loads[-1] if part else None
        chunks = range(k0, k0 + kc) if whole else range(k0 + pk0, k0 + pk0 + pkc)
        if not keeps[0] and not (whole and part):  # unless the half still holds them
            step.loads += _activation_loads(walk, tile, act_base, k0, chunks)
        tile_lines = nbc * dim  # WGT lines of one k chunk's nbc tiles
        if keeps[1]:  # the half still holds these weights
            pass
        elif walk.matmul:
            step.loads.append(
                load_activation_weights(
                    plan, layer, wgt_base, (tile.head, tile.group), nb0, nbc, k0, kc
                )
            )
        else:
            wdesc = DescSpec(
                isa.Mem.WGT,
                wgt_base + pk0 * tile_lines,
                weight_symbol(layer),
                walk.blocks_at[(nb0, k0)] + pk0 * tile_lines * dim,
                [(pkc * tile_lines, dim, 1)],
            )
            step.loads.append(Op(isa.Opcode.LOAD, desc=wdesc))
        fields = {
            "wgt_addr": wgt_base + pk0 * tile_lines,
            "act_addr": act_base + pk0 * mt,
            "acc_addr": acc_base,
            "m": mt,
            "k_iter": pkc,
            "n_iter": nbc,
            "act_k_stride": mt,
            "acc_n_stride": mt,
            "accumulate": int(gi > 0 or part > 0),
        }
        if walk.transpose_w:
            fields["transpose_w"] = 1
        step.compute.append(Op(isa.Opcode.GEMM, fields=fields))
        if before is not None:
            step.parts.append((before, step.compute[-1]))


def _line_beats(plan: Plan) -> int:
    """Bus beats of an ACT line."""
    return -(-plan.config.act_line_bytes // plan.config.dram_bytes_per_cycle)


def _activation_loads(walk: _Walk, tile: _Tile, act_base: int, k0: int, chunks: range) -> list[Op]:
    """The im2col lines of k chunks ``chunks`` of a k group starting at ``k0``: one descriptor
    per run of chunks sharing a kernel tap (ky, kx)."""
    plan, shape = walk.plan, walk.shape
    dim, src = plan.dim, plan.tensor(walk.layer.inputs[0])
    kw, (sh, sw), (dy, dx) = shape.kernel[1], shape.stride, shape.dilation
    pt, pl = shape.pads[0], shape.pads[1]
    cb_total = shape.in_channels // dim
    loads = []
    for tap, run in itertools.groupby(chunks, key=lambda k: k // cb_total):
        chunk_list = list(run)
        first, count = chunk_list[0], len(chunk_list)
        ky, kx = tap // kw, tap % kw
        cb = first % cb_total
        y0, x0 = tile.oy0 * sh + ky * dy - pt, kx * dx - pl
        desc = DescSpec(
            isa.Mem.ACT,
            act_base + (first - k0) * tile.mt,
            src.name,
            src.offset
            + (y0 * src.w + x0) * src.pixel_stride
            + cb * dim
            + tile.head * shape.in_channels,
            [
                (count, dim, tile.mt, 0, 0),
                (tile.rows, sh * src.w * src.pixel_stride, shape.out_w, sh, 0),
                (shape.out_w, sw * src.pixel_stride, 1, 0, sw),
            ],
            y0=y0,
            x0=x0,
            height=src.h,
            width=src.w,
            pad_value=zero_point(plan.graph, walk.layer.inputs[0]),  # real 0
        )
        loads.append(Op(isa.Opcode.LOAD, desc=desc))
    return loads


def _residual_and_stores(walk: _Walk, step: Step, tile: _Tile, gi: int, res_base: int) -> None:
    """After a step's chunks: the tile's residual (in its first step, read at the STORE) and,
    in its last step, its STOREs, which add the bias and the requantized residual."""
    plan, layer, residual = walk.plan, walk.layer, walk.residual
    nb0, nbc, oy0, mt, acc_base, slot = (
        tile.nb0,
        tile.nbc,
        tile.oy0,
        tile.mt,
        tile.acc_base,
        tile.slot,
    )
    last = gi == len(walk.k_groups) - 1
    if gi == 0 and residual is not None:
        step.loads.append(load_tile(plan, residual, res_base, oy0, mt, nb0, nbc))
    if last and plan.tensor(layer.output).layout == "tokens_t":
        step.store += store_transposed(plan, layer, acc_base, slot, oy0, mt, nb0, nbc)
    elif last:
        step.store.append(store_tile(plan, layer, acc_base, slot, oy0, mt, tile.out_nb0, nbc))
    for op in step.store:  # the first GEMM overwrites ACC; the STORE adds the bias
        op.fields["use_bias"] = 1
        if residual is not None:  # and the requantized residual, laid out as ACC is
            assert op.desc is not None
            res_addr = res_base + op.desc.local_base - acc_base
            op.fields |= {"use_res": 1, "res_addr": res_addr}

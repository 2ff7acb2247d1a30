"""schedule: order each layer's loads, computes and stores, with dependency tokens.

A layer is a list of *steps*; a step is the loads one compute phase needs plus that phase's
compute instructions, and the last step of an m tile is followed by its store. Buffers:

- ACT, WGT: two halves, by step parity. The load of step s waits (pop_next) for the compute of
  step s-2 to release its half (push_prev).
- ACC: two halves, by tile parity. A tile's first compute waits (pop_next) for the store of tile
  t-2 to release its half (push_prev); the tile's last compute hands it to the store (push_next).
- PARAM: four slots, by tile. A tile's parameters are loaded in its first step; the load for
  tile t+4 can only start once tile t's store has finished (via the ACC tokens of tile t+2),
  so a slot is never overwritten while a store still reads it.
- A GEMM layer's residual: four slots of ACT above the two halves, by tile, for the same
  reason: the tile's STORE adds it (``use_res``), so it must outlive the tile's GEMMs.

A layer's first GEMM step is loaded and computed in parts of 1, 2, 4, ... k chunks, each part's
loads pushing its own token to its GEMM (:mod:`compiler.passes.ramp`), so the layer's first GEMM
starts after one chunk's loads rather than the whole step's.

Token pushes and pops balance within a layer; a barrier (store -> compute -> load) and a PERF
record end each layer, so the next layer reads what this one stored.

A GEMM layer's first loads need not all wait for that barrier. Its step halves start in the
half the layer before does not use in its last step (``_Halves.first``), which that layer's
last step but one releases; the layer before then issues, at its end, the first ramp part's
weights (constants) and, where no store it may still run writes them, its activations
(:mod:`compiler.passes.prefetch`, ``Layer.prefetched``) - while its last step computes and
stores. Its PERF record waits for them, so each layer's counters still cover exactly its own
instructions (these loads among them) and the machine is as drained at every barrier as
before: a shard started at any layer runs it cycle for cycle as the whole network does.
"""

from __future__ import annotations

import itertools

from arch import isa
from arch.reference import store_zero_point, zero_point
from compiler.constants import table_offset, zero_point_bias
from compiler.errors import CompileError, Unplaceable
from compiler.passes import prefetch, ramp
from compiler.passes.input_reuse import InputReuse
from compiler.passes.steps import Step, groups, param_symbol, weight_symbol
from compiler.passes.tile import (
    MAX_WINDOW,
    PARAM_SLOTS,
    RESIDUAL_SLOTS,
    param_slot_lines,
    table_line,
    uses_table,
)
from compiler.plan import DescSpec, Layer, Op, Plan


class _Halves:
    def __init__(self, plan: Plan, layer: Layer, first: int = 0) -> None:
        c = plan.config
        self.act, self.wgt, self.acc = c.act_lines // 2, c.wgt_lines // 2, c.acc_lines // 2
        self.first = first  # the ACT/WGT half of the layer's first step
        self.act_step = self.act  # the ACT lines a step half uses (a GEMM's residual slots aside)
        self.param = param_slot_lines(c, layer)
        self.param_line_bytes = c.cols * isa.PARAM_ENTRY_BYTES


def _clamp(layer: Layer) -> tuple[int, int]:
    clamp = layer.node.params.get("clamp")
    return (int(clamp[0]), int(clamp[1])) if clamp is not None else (-128, 127)


def _store_fields(plan: Plan, layer: Layer, slot: int) -> dict[str, int]:
    lo, hi = _clamp(layer)
    fields = {"param_addr": slot, "param_loop": isa.DESC_LOOPS - 2, "clamp_lo": lo, "clamp_hi": hi}
    if layer.node.op != "maxpool" and store_zero_point(plan.graph, layer.node):
        fields["out_zp"] = store_zero_point(plan.graph, layer.node)
    if uses_table(layer):
        fields |= {"use_table": 1, "table_addr": table_line(plan.config)}
    return fields


def _store(
    plan: Plan, layer: Layer, acc_base: int, slot: int, oy0: int, mt: int, nb0: int, nbc: int
) -> Op:
    out = plan.tensor(layer.output)
    dim = plan.dim
    desc = DescSpec(
        "ACC",
        acc_base,
        out.name,
        out.offset + oy0 * out.w * out.pixel_stride + nb0 * dim,
        [(nbc, dim, mt), (mt, out.pixel_stride, 1)],
    )
    return Op("store", fields=_store_fields(plan, layer, slot), desc=desc)


def _transposed_stores(
    plan: Plan, layer: Layer, acc_base: int, slot: int, oy0: int, rows: int, nb0: int, nbc: int
) -> list[Op]:
    """Store an m tile of token rows ``oy0..`` (ACC: ``rows`` lines per channel block) into a
    tokens_t tensor - per head, feature d's line holds the head's tokens - with transposing
    STOREs: one per run of the tile's channel blocks inside one head; each innermost run of
    ``dim`` token lines becomes ``dim`` feature lines (tokens past the tile: zeros)."""
    out = plan.tensor(layer.output)
    dim, ps = plan.dim, out.pixel_stride
    heads = plan.graph.tensors[layer.output].shape[3] // out.h
    per_head, t_pad = out.h // dim, out.channels // heads  # blocks of a head, channels of one
    ops = []
    for head, run in itertools.groupby(range(nb0, nb0 + nbc), key=lambda b: b // per_head):
        blocks = list(run)
        first = blocks[0]
        desc = DescSpec(
            "ACC",
            acc_base + (first - nb0) * rows,
            out.name,
            out.offset + (first % per_head) * dim * ps + head * t_pad + oy0,
            [(-(-rows // dim), dim, dim, dim), (len(blocks), dim * ps, rows), (dim, ps, 1, 1)],
            y0=oy0,
            height=oy0 + rows,
        )
        fields = _store_fields(plan, layer, slot + first - nb0) | {"transpose": 1}
        ops.append(Op("store", fields=fields, desc=desc))
    return ops


def _table_load(plan: Plan, layer: Layer) -> Op:
    """Load the layer's table into the last PARAM lines (after its parameter entries in DRAM)."""
    line_bytes = plan.dim * isa.PARAM_ENTRY_BYTES
    lines = isa.table_lines(plan.dim)
    offset = table_offset(plan, layer)
    desc = DescSpec(
        "PARAM", table_line(plan.config), param_symbol(layer), offset, [(lines, line_bytes, 1)]
    )
    return Op("load", desc=desc)


def _param_load(plan: Plan, layer: Layer, slot: int, first_line: int, lines: int) -> Op:
    line_bytes = plan.dim * isa.PARAM_ENTRY_BYTES
    desc = DescSpec(
        "PARAM", slot, param_symbol(layer), first_line * line_bytes, [(lines, line_bytes, 1)]
    )
    return Op("load", desc=desc)


def _tile_lines(plan: Plan, name: str, local: int, oy0: int, mt: int, nb0: int, nbc: int) -> Op:
    """Load an (mt pixels x nbc channel blocks) tile of an activation tensor, block-major."""
    t = plan.tensor(name)
    desc = DescSpec(
        "ACT",
        local,
        t.name,
        t.offset + oy0 * t.w * t.pixel_stride + nb0 * plan.dim,
        [(nbc, plan.dim, mt), (mt, t.pixel_stride, 1)],
    )
    return Op("load", desc=desc)


def _activation_weights(
    plan: Plan, layer: Layer, wgt_base: int, head: int, nb0: int, nbc: int, k0: int, kc: int
) -> Op:
    """batch_matmul: WGT tile (k, j) line r is pixel (k0 + k)*dim + r of the second input, the
    dim channels of output block nb0 + j of this head; pixels past its K rows load as 0."""
    dim = plan.dim
    b = plan.tensor(layer.inputs[1])
    heads = plan.graph.tensors[layer.inputs[1]].shape[1]
    ps = b.pixel_stride
    desc = DescSpec(
        "WGT",
        wgt_base,
        b.name,
        b.offset + k0 * dim * ps + head * (b.channels // heads) + nb0 * dim,
        [(kc, dim * ps, nbc * dim, dim, 0), (nbc, dim, dim, 0, 0), (dim, ps, 1, 1, 0)],
        y0=k0 * dim,
        height=b.h,
        pad_value=0,
    )
    return Op("load", desc=desc)


def _tile_accum(
    acc_base: int,
    act_base: int,
    slot: int,
    mt: int,
    nbc: int,
    use_res: int,
    accumulate: int,
    use_bias: int = 1,
) -> Op:
    """ACCUM over a tile of ``nbc`` blocks of ``mt`` lines: the bias if ``use_bias``, plus the
    requantized ACT lines from ``act_base`` if ``use_res``, into ACC (or onto it)."""
    fields = {
        "acc_addr": acc_base,
        "act_addr": act_base,
        "param_addr": slot,
        "m": mt,
        "n_iter": nbc,
        "acc_n_stride": mt,
        "act_n_stride": mt,
        "use_bias": use_bias,
        "use_res": use_res,
        "accumulate": accumulate,
    }
    return Op("accum", fields=fields)


def _gemm_steps(plan: Plan, layer: Layer, halves: _Halves) -> list[Step]:
    """conv / gemm, and batch_matmul: the same walk once per head, its weights read from the
    second input's lines (:func:`_activation_weights`) instead of the layer's weight tiles.
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
                step.loads.append(_param_load(plan, layer, slot, out_nb0, nbc))
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
                            "ACT",
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
                        step.loads.append(Op("load", desc=desc))
                    tile_lines = nbc * dim  # WGT lines of one k chunk's nbc tiles
                    if keep:  # the half still holds these weights
                        pass
                    elif matmul:
                        step.loads.append(
                            _activation_weights(plan, layer, wgt_base, head, nb0, nbc, k0, kc)
                        )
                    else:
                        wdesc = DescSpec(
                            "WGT",
                            wgt_base + pk0 * tile_lines,
                            weight_symbol(layer),
                            blocks_at[(nb0, k0)] + pk0 * tile_lines * dim,
                            [(pkc * tile_lines, dim, 1)],
                        )
                        step.loads.append(Op("load", desc=wdesc))
                    step.compute.append(
                        Op(
                            "gemm",
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
                step.loads.append(_tile_lines(plan, residual, res_base, oy0, mt, nb0, nbc))
            if gi == len(k_groups) - 1 and plan.tensor(layer.output).layout == "tokens_t":
                step.store += _transposed_stores(plan, layer, acc_base, slot, oy0, mt, nb0, nbc)
            elif gi == len(k_groups) - 1:
                step.store.append(_store(plan, layer, acc_base, slot, oy0, mt, out_nb0, nbc))
            for op in step.store:  # the first GEMM overwrites ACC; the STORE adds the bias
                op.fields["use_bias"] = 1
                if residual is not None:  # and the requantized residual, laid out as ACC is
                    assert op.desc is not None
                    res_addr = res_base + op.desc.local_base - acc_base
                    op.fields |= {"use_res": 1, "res_addr": res_addr}
            steps.append(step)
    return steps


def _dw_steps(plan: Plan, layer: Layer, halves: _Halves) -> list[Step]:
    """A depthwise layer on the window unit: per step, ``rows_per_tile`` output rows x
    ``n_blocks`` channel blocks. Each block's input rows (padding included, filled by the DMA)
    sit in ACT as an image of ``pitch`` = its columns; one DWCONV per block and pass (the
    first adds the bias, or an ACCUM adds bias and residual first). A max pool is the same walk
    in max mode: padding -128, no weights (the DWCONVs read WGT lines they do not use)."""
    shape, tiling = layer.gemm, layer.tiling
    assert shape is not None and tiling is not None
    dim = plan.dim
    src = plan.tensor(layer.inputs[0])
    s, (dy, dx) = shape.stride[0], shape.dilation
    pt, pl = shape.pads[0], shape.pads[1]
    taps = shape.chunks(dim)
    passes = shape.dw_passes()
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
        slot = (tile % PARAM_SLOTS) * halves.param
        step = Step(tile=tile, first_of_tile=True)
        step.loads.append(_param_load(plan, layer, slot, nb0, nbc))
        y0 = oy0 * s - pt
        step.loads.append(
            Op(
                "load",
                desc=DescSpec(
                    "ACT",
                    act_base,
                    src.name,
                    src.offset + (y0 * src.w - pl) * src.pixel_stride + nb0 * dim,
                    [
                        (nbc, dim, block, 0, 0),
                        (in_rows, src.w * src.pixel_stride, pitch, 1, 0),
                        (pitch, src.pixel_stride, 1, 0, 1),
                    ],
                    y0=y0,
                    x0=-pl,
                    height=src.h,
                    width=src.w,
                    pad_value=-128 if pooling else zero_point(plan.graph, layer.inputs[0]),
                ),
            )
        )
        res_base = act_base + nbc * block
        if residual is not None:
            step.loads.append(_tile_lines(plan, residual, res_base, oy0, mt, nb0, nbc))
        if not pooling:
            step.loads.append(
                Op(
                    "load",
                    desc=DescSpec(
                        "WGT",
                        wgt_base,
                        weight_symbol(layer),
                        nb0 * taps * dim,
                        [(nbc * taps, dim, 1)],
                    ),
                )
            )
        if residual is not None:
            step.compute.append(_tile_accum(acc_base, res_base, slot, mt, nbc, 1, 0))
        for j in range(nbc):
            first_tap = 0
            for p, (i0, kh, j0, kw) in enumerate(passes):
                first = p == 0 and residual is None
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
                    "stride": s,
                    "use_bias": int(first and not pooling),
                    "accumulate": int(not first),
                    "max": int(pooling),
                }
                step.compute.append(Op("dwconv", fields=fields))
                first_tap += kh * kw
        step.store.append(_store(plan, layer, acc_base, slot, oy0, mt, nb0, nbc))
        steps.append(step)
    return steps


def _pool_steps(plan: Plan, layer: Layer, halves: _Halves) -> list[Step]:
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
        slot = (tile % PARAM_SLOTS) * halves.param
        # A global pool whose window does not fit an ACT half is reduced a part of its kernel
        # rows per step, each part accumulating into ACC; other pools take the whole window.
        part_rows = kh if mt * kh * kw * nbc <= halves.act else halves.act // (kw * nbc)
        parts = groups(kh, max(part_rows, 1))
        for part, kernel_rows in enumerate(parts):
            step = Step(tile=tile, first_of_tile=part == 0)
            if part == 0:
                step.loads.append(_param_load(plan, layer, slot, nb0, nbc))
            act_base = (len(steps) % 2) * halves.act
            if part == 0 and zp_bias is not None:  # ACC starts at -window * z_in
                step.compute.append(_tile_accum(acc_base, act_base, slot, mt, nbc, 0, 0))
            _pool_part(
                plan, layer, step, (act_base, acc_base), (oy0, rows), (nb0, nbc), kernel_rows
            )
            if part == len(parts) - 1:
                step.store.append(_store(plan, layer, acc_base, slot, oy0, mt, nb0, nbc))
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
    mode = "MAX" if node.op == "maxpool" else "SUM"
    z_in = zero_point(plan.graph, layer.inputs[0])  # a sum pads with real 0: the zero point
    after_init = mode == "SUM" and z_in != 0  # an ACCUM put -window * z_in in ACC first
    y0 = oy0 * sh - pt + ky0
    for j in range(nbc):
        desc = DescSpec(
            "ACT",
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
            pad_value=-128 if mode == "MAX" else z_in,
        )
        step.loads.append(Op("load", desc=desc))
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
        step.compute.append(Op("pool", fields=fields))


def _eltwise_steps(plan: Plan, layer: Layer, halves: _Halves) -> list[Step]:
    """add: two ACCUMs requantize both inputs' tiles into ACC (PARAM sets a and b); scale: one
    ACCUM copies x's tile, times the gate's line of each channel block (use_gate) if it has a
    gate. Then one STORE requantizes (and applies the layer's table)."""
    tiling = layer.tiling
    assert tiling is not None
    out = plan.tensors[layer.output]
    blocks = out.channels // plan.dim
    add = layer.kind == "add"
    streams = layer.inputs if add else layer.inputs[:1]
    gate = layer.inputs[1] if not add and len(layer.inputs) == 2 else None
    zp_bias = zero_point_bias(plan, layer)  # inputs with zero points: a bias in the a-set
    steps: list[Step] = []
    for tile, ((nb0, nbc), (oy0, rows)) in enumerate(
        itertools.product(groups(blocks, tiling.n_blocks), groups(out.h, tiling.rows_per_tile))
    ):
        mt = rows * out.w
        half = len(steps) % 2
        act_base, acc_base = half * halves.act, (tile % 2) * halves.acc
        slot = (tile % PARAM_SLOTS) * halves.param
        step = Step(tile=tile, first_of_tile=True)
        step.loads.append(_param_load(plan, layer, slot, nb0, nbc))  # a-set (and output) params
        if add:
            step.loads.append(_param_load(plan, layer, slot + nbc, blocks + nb0, nbc))  # b-set
        for which, name in enumerate(streams):
            step.loads.append(
                _tile_lines(plan, name, act_base + which * nbc * mt, oy0, mt, nb0, nbc)
            )
        gating: dict[str, int] = {}
        if gate is not None:
            gate_addr = act_base + nbc * mt
            if gate_addr + nbc > 1 << isa.GATE_ADDR_BITS:
                raise Unplaceable(
                    layer.name,
                    layer.node.op,
                    f"gate lines {gate_addr}..{gate_addr + nbc - 1} are past the ACT lines a "
                    f"gate_addr reaches ({1 << isa.GATE_ADDR_BITS})",
                    f"an ACT half of at most {(1 << isa.GATE_ADDR_BITS) // 2} lines",
                )
            step.loads.append(_tile_lines(plan, gate, gate_addr, 0, 1, nb0, nbc))
            gating = {"use_gate": 1, "gate_addr": gate_addr}
        for which in range(len(streams)):
            fields = {
                "acc_addr": acc_base,
                "act_addr": act_base + which * nbc * mt,
                "param_addr": slot + which * nbc,
                "m": mt,
                "n_iter": nbc,
                "acc_n_stride": mt,
                "act_n_stride": mt,
                "use_bias": int(which == 0 and zp_bias is not None),
                "use_res": 1,
                "accumulate": which,
            }
            step.compute.append(Op("accum", fields=fields | gating))
        step.store.append(_store(plan, layer, acc_base, slot, oy0, mt, nb0, nbc))
        steps.append(step)
    return steps


def _upsample_steps(plan: Plan, layer: Layer, halves: _Halves) -> list[Step]:
    """Nearest upsampling by (sh, sw): a tile of input pixels is copied into ACC by ACCUM
    (requant by 1), then stored sh*sw times, once per position (dy, dx) of each input pixel's
    copies in the output. depth_to_space: channel group g = dy*sw + dx of the input tile is
    copied and stored at position (dy, dx) only (each group starts on a line: layout)."""
    tiling = layer.tiling
    assert tiling is not None
    dim = plan.dim
    src, out = plan.tensors[layer.inputs[0]], plan.tensor(layer.output)
    node = layer.node
    shuffle = node.op == "depth_to_space"
    sh, sw = node.attrs["block"] if shuffle else node.attrs["scale"]
    positions = list(itertools.product(range(sh), range(sw)))
    copies = [[p] for p in positions] if shuffle else [positions]
    blocks = out.channels // dim
    steps: list[Step] = []
    for tile, ((nb0, nbc), (iy0, rows), stored) in enumerate(
        itertools.product(
            groups(blocks, tiling.n_blocks), groups(src.h, tiling.rows_per_tile), copies
        )
    ):
        mt = rows * src.w
        act_base = (len(steps) % 2) * halves.act
        acc_base = (tile % 2) * halves.acc
        slot = (tile % PARAM_SLOTS) * halves.param
        first = nb0 + (positions.index(stored[0]) * blocks if shuffle else 0)
        step = Step(tile=tile, first_of_tile=True)
        step.loads.append(_param_load(plan, layer, slot, nb0, nbc))
        step.loads.append(_tile_lines(plan, layer.inputs[0], act_base, iy0, mt, first, nbc))
        step.compute.append(_tile_accum(acc_base, act_base, slot, mt, nbc, 1, 0, use_bias=0))
        pixel = out.pixel_stride
        for dy, dx in stored:
            start = out.offset + ((iy0 * sh + dy) * out.w + dx) * pixel + nb0 * dim
            loops: list[tuple[int, ...]] = [
                (nbc, dim, mt),
                (rows, sh * out.w * pixel, src.w),
                (src.w, sw * pixel, 1),
            ]
            desc = DescSpec("ACC", acc_base, out.name, start, loops)
            store = {
                "param_addr": slot,
                "param_loop": isa.DESC_LOOPS - len(loops),
                "clamp_lo": -128,
                "clamp_hi": 127,
            }
            step.store.append(Op("store", fields=store, desc=desc))
        steps.append(step)
    return steps


def _with_tokens(steps: list[Step], release_last: bool = False) -> list[Op]:
    """Set the dependency flags (see the module docstring) and flatten in program order;
    ``release_last``: the compute of the last step but one also releases its halves, to the
    next layer's first loads (:func:`_layer_end`)."""
    total_steps = len(steps)
    total_tiles = 1 + max(step.tile for step in steps)
    ops: list[Op] = []

    def add(op: Op, *flags: str) -> None:
        op.deps = tuple(dict.fromkeys((*op.deps, *flags)))

    for s, step in enumerate(steps):
        if not step.loads or not step.compute:
            raise CompileError(None, None, f"schedule step {s} has no loads or no compute")
        if s >= 2:
            add(step.loads[0], "pop_next")
        for last_load, first_compute in step.parts:  # each part of a split step: its own token
            add(last_load, "push_next")
            add(first_compute, "pop_prev")
        add(step.loads[-1], "push_next")
        add(step.compute[0], "pop_prev")
        if step.first_of_tile and step.tile >= 2:
            add(step.compute[0], "pop_next")
        if s + 2 < total_steps or (release_last and s + 2 == total_steps):
            add(step.compute[-1], "push_prev")
        if step.store:
            add(step.compute[-1], "push_next")
            add(step.store[0], "pop_prev")
            if step.tile + 2 < total_tiles:
                add(step.store[-1], "push_prev")
        ops += step.loads + step.compute + step.store
    return ops


def _layer_end(number: int, layer: Layer, prefetch: list[Op], pop: bool) -> list[Op]:
    """A layer's end: the next layer's first loads that may run early (``prefetch``, popping
    the release of this layer's last step but one if ``pop``), then a counter snapshot once
    this layer's stores and those loads are done, then a barrier so the next layer sees this
    one's output."""
    ops: list[Op] = []
    perf_deps: tuple[str, ...] = ()
    if prefetch:
        if pop:
            prefetch[0].deps = (*prefetch[0].deps, "pop_next")
        prefetch[-1].deps = (*prefetch[-1].deps, "push_next")
        ops += [*prefetch, Op("sync", ("pop_prev", "push_next"), {"queue": "COMPUTE"})]
        perf_deps = ("pop_prev",)
    return [
        *ops,
        Op(
            "perf",
            perf_deps,
            fields={"tag": layer.index},
            dram=("perf", number * isa.PERF_RECORD.nbytes),
        ),
        Op("sync", ("push_prev",), {"queue": "STORE"}),
        Op("sync", ("pop_next", "push_prev"), {"queue": "COMPUTE"}),
        Op("sync", ("pop_next",), {"queue": "LOAD"}),
    ]


def run(plan: Plan) -> Plan:
    builders = {
        "gemm": _gemm_steps,
        "matmul": _gemm_steps,
        "pool": _pool_steps,
        "add": _eltwise_steps,
        "scale": _eltwise_steps,
        "upsample": _upsample_steps,
    }
    accel = plan.accel_layers()
    built: list[list[Step]] = []
    halves: list[_Halves] = []
    for number, layer in enumerate(accel):
        build = builders[layer.kind]
        if layer.gemm is not None and layer.gemm.depthwise:
            build = _dw_steps
        hoist = number > 0 and prefetch.eligible(layer)
        # the half the layer before does not use in its last step
        first = (halves[-1].first + len(built[-1])) % 2 if hoist else 0
        halves.append(_Halves(plan, layer, first))
        steps = build(plan, layer, halves[-1])
        layer.prefetched = []
        if hoist:
            size = halves[-2].act_step
            released = range(first * size, (first + 1) * size)
            line = max(plan.config.rows, plan.config.cols)  # ACT / ACC line bytes
            layer.prefetched = prefetch.hoist(
                steps[0], accel[number - 1], built[-1], released, line
            )
        if uses_table(layer):  # the previous layer's barrier keeps its stores from this load
            steps[0].loads.insert(0, _table_load(plan, layer))
        built.append(steps)
    for number, (layer, steps) in enumerate(zip(accel, built, strict=True)):
        after = accel[number + 1].prefetched if number + 1 < len(accel) else []
        ops = _with_tokens(steps, release_last=bool(after))
        ops += _layer_end(number, layer, after, pop=len(steps) >= 2)
        layer.perf_index = number
        for op in ops:
            op.layer = layer.index
        layer.ops = ops
    return plan

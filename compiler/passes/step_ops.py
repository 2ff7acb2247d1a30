"""The instructions the step builders of :mod:`compiler.passes.schedule` share - a tile's
STORE, the loads of its parameters, table and activation lines, an ACCUM over a tile - and the
local-memory halves (:class:`Halves`) a layer's steps alternate between."""

from __future__ import annotations

import itertools

from arch import isa
from arch.reference import store_zero_point
from compiler.constants import table_offset
from compiler.passes.steps import param_symbol
from compiler.passes.tile import PARAM_SLOTS, param_slot_lines, table_line, uses_table
from compiler.plan import DescSpec, Layer, Op, Plan


class Halves:
    """The local lines a layer's steps alternate between: ACT and WGT halves by step parity,
    ACC halves by tile parity, and PARAM slots by tile, from ``param_shift``."""

    def __init__(self, plan: Plan, layer: Layer, first: int = 0) -> None:
        c = plan.config
        self.act, self.wgt, self.acc = c.act_lines // 2, c.wgt_lines // 2, c.acc_lines // 2
        self.first = first  # the ACT/WGT half of the layer's first step
        self.act_step = self.act  # the ACT lines a step half uses (a GEMM's residual slots aside)
        self.param = param_slot_lines(c, layer)
        self.param_line_bytes = c.cols * isa.PARAM_ENTRY_BYTES
        self.param_shift = 0  # the slot of the layer's first tile (one the layer before frees)

    def slot(self, tile: int) -> int:
        """The first PARAM line of tile ``tile``'s slot: the slots in turn from the first."""
        return (tile + self.param_shift) % PARAM_SLOTS * self.param


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


def store_tile(
    plan: Plan, layer: Layer, acc_base: int, slot: int, oy0: int, mt: int, nb0: int, nbc: int
) -> Op:
    out = plan.tensor(layer.output)
    dim = plan.dim
    desc = DescSpec(
        isa.Mem.ACC,
        acc_base,
        out.name,
        out.offset + oy0 * out.w * out.pixel_stride + nb0 * dim,
        [(nbc, dim, mt), (mt, out.pixel_stride, 1)],
    )
    return Op(isa.Opcode.STORE, fields=_store_fields(plan, layer, slot), desc=desc)


def store_transposed(
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
            isa.Mem.ACC,
            acc_base + (first - nb0) * rows,
            out.name,
            out.offset + (first % per_head) * dim * ps + head * t_pad + oy0,
            [(-(-rows // dim), dim, dim, dim), (len(blocks), dim * ps, rows), (dim, ps, 1, 1)],
            y0=oy0,
            height=oy0 + rows,
        )
        fields = _store_fields(plan, layer, slot + first - nb0) | {"transpose": 1}
        ops.append(Op(isa.Opcode.STORE, fields=fields, desc=desc))
    return ops


def load_table(plan: Plan, layer: Layer) -> Op:
    """Load the layer's table into the last PARAM lines (after its parameter entries in DRAM)."""
    line_bytes = plan.dim * isa.PARAM_ENTRY_BYTES
    lines = isa.table_lines(plan.dim)
    offset = table_offset(plan, layer)
    desc = DescSpec(
        isa.Mem.PARAM,
        table_line(plan.config),
        param_symbol(layer),
        offset,
        [(lines, line_bytes, 1)],
    )
    return Op(isa.Opcode.LOAD, desc=desc)


def load_params(plan: Plan, layer: Layer, slot: int, first_line: int, lines: int) -> Op:
    line_bytes = plan.dim * isa.PARAM_ENTRY_BYTES
    desc = DescSpec(
        isa.Mem.PARAM, slot, param_symbol(layer), first_line * line_bytes, [(lines, line_bytes, 1)]
    )
    return Op(isa.Opcode.LOAD, desc=desc)


def load_tile(plan: Plan, name: str, local: int, oy0: int, mt: int, nb0: int, nbc: int) -> Op:
    """Load an (mt pixels x nbc channel blocks) tile of an activation tensor, block-major."""
    t = plan.tensor(name)
    desc = DescSpec(
        isa.Mem.ACT,
        local,
        t.name,
        t.offset + oy0 * t.w * t.pixel_stride + nb0 * plan.dim,
        [(nbc, plan.dim, mt), (mt, t.pixel_stride, 1)],
    )
    return Op(isa.Opcode.LOAD, desc=desc)


def weights_transposed(plan: Plan, layer: Layer) -> bool:
    """Whether a batch_matmul reads its second input as key rows (a ``split_heads_t`` left in
    its tokens), with GEMM's ``transpose_w``."""
    return layer.kind == "matmul" and plan.tensors[layer.inputs[1]].layout == "tokens"


def load_activation_weights(
    plan: Plan,
    layer: Layer,
    wgt_base: int,
    head_group: tuple[int, int],
    nb0: int,
    nbc: int,
    k0: int,
    kc: int,
) -> Op:
    """batch_matmul: WGT tile (k, j) line r is pixel (k0 + k)*dim + r of the second input, the
    dim channels of output block nb0 + j of this head; pixels past its K rows load as 0. Key
    rows as stored (:func:`weights_transposed`): line r is key (nb0 + j)*dim + r, the dim
    features of k block k0 + k of this head (its GEMM reads the tile transposed); keys past
    its rows load as 0. ``head_group``: the head, and the group whose block of the second
    input's pixels (keys or values) the pixels count from (``GemmShape.groups``)."""
    dim = plan.dim
    head, group = head_group
    b = plan.tensor(layer.inputs[1])
    heads = plan.graph.tensors[layer.inputs[1]].shape[1]
    ps = b.pixel_stride
    assert layer.gemm is not None
    rows = b.h // layer.gemm.groups  # pixels of one group's block
    first = b.offset + group * rows * ps
    if weights_transposed(plan, layer):
        rows_desc = DescSpec(
            isa.Mem.WGT,
            wgt_base,
            b.name,
            first + nb0 * dim * ps + head * (b.logical_channels // heads) + k0 * dim,
            [(kc, dim, nbc * dim, 0, 0), (nbc, dim * ps, dim, dim, 0), (dim, ps, 1, 1, 0)],
            y0=nb0 * dim,
            height=rows,
            pad_value=0,
        )
        return Op(isa.Opcode.LOAD, desc=rows_desc)
    desc = DescSpec(
        isa.Mem.WGT,
        wgt_base,
        b.name,
        first + k0 * dim * ps + head * (b.channels // heads) + nb0 * dim,
        [(kc, dim * ps, nbc * dim, dim, 0), (nbc, dim, dim, 0, 0), (dim, ps, 1, 1, 0)],
        y0=k0 * dim,
        height=rows,
        pad_value=0,
    )
    return Op(isa.Opcode.LOAD, desc=desc)


def accum_tile(
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
    return Op(isa.Opcode.ACCUM, fields=fields)

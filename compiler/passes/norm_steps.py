"""The steps of a norm layer (layer_norm, rms_norm, row_softmax): NORM, then a STORE.

Each step is one m tile of ``mt`` rows with every channel block of the row (NORM needs the
whole row): the tile's ACT lines ``k*mt + i`` (block k of row i, as :func:`load_tile` lays
them), NORM into ACC lines of the same layout, then a STORE that rounds the Q8 codes to int8
(the PARAM b-set: mult 1, shift 8, the output zero point in NORM's Q8 bias; row_softmax:
shift 9, to its fixed scale 1/128). A row_softmax's tensor is laid out as heads (each head's
N values padded to whole lines): one NORM per head, on that head's blocks of the tile. The two
PARAM sets (a: NORM's per-channel requant and eps_codes, b: the STORE's) are the same for every
tile: the first step loads them once, into 2*blocks PARAM lines from its first slot's (from
line 0 if they do not fit there; tile checks they fit in PARAM).
A row_softmax with a constant ``mask`` loads its mask lines (kept in DRAM after its PARAM
entries) into ACT after the tile's rows: the tile's rows of a mask of M rows (NORM
``mask_per_row``), or the one row of a shared mask (``mask_per_row`` 0) - the same for every
head.
"""

from __future__ import annotations

from arch import isa
from arch.isa import NormMode
from compiler.constants import mask_row_bytes, table_offset
from compiler.passes.step_ops import Halves, load_params, load_tile
from compiler.passes.steps import Step, groups, param_symbol
from compiler.passes.tile import mask_act_lines
from compiler.plan import DescSpec, Layer, Op, Plan

__all__ = ["MODES", "norm_fields", "norm_steps", "row_count"]

#: The NORM mode of each op the norm unit runs.
MODES = {
    "layer_norm": NormMode.LAYERNORM,
    "rms_norm": NormMode.RMSNORM,
    "row_softmax": NormMode.SOFTMAX,
}


def row_count(plan: Plan, layer: Layer) -> int:
    """Rows per pixel of the layer's tensor: its heads (row_softmax), else 1."""
    return plan.graph.tensors[layer.output].shape[1] if layer.node.op == "row_softmax" else 1


def norm_fields(plan: Plan, layer: Layer) -> dict[str, int]:
    """NORM's fields common to every tile of ``layer``: mode, lines per row, last lanes."""
    out = plan.tensors[layer.output]
    fields = {
        "mode": MODES[layer.node.op],
        "k_iter": out.channels // plan.dim // row_count(plan, layer),
        "last_lanes": out.logical_channels % plan.dim,
    }
    if layer.node.op == "rms_norm":
        fields["zp_in"] = int(plan.graph.tensors[layer.inputs[0]].zero_point or 0)
    return fields


def norm_steps(plan: Plan, layer: Layer, halves: Halves) -> list[Step]:
    tiling = layer.tiling
    assert tiling is not None
    out = plan.tensor(layer.output)
    blocks = out.channels // plan.dim
    common = norm_fields(plan, layer)
    base = halves.slot(0)  # the a-set, then the b-set (from line 0 if they do not fit there)
    base = base if base + 2 * blocks <= plan.config.param_lines else 0
    steps: list[Step] = []
    for tile, (oy0, rows) in enumerate(groups(out.h, tiling.rows_per_tile)):
        mt = rows * out.w
        act_base, acc_base = (tile % 2) * halves.act, (tile % 2) * halves.acc
        step = Step(tile=tile, first_of_tile=True)
        if tile == 0:
            step.loads.append(load_params(plan, layer, base, 0, 2 * blocks))
        step.loads.append(load_tile(plan, layer.inputs[0], act_base, oy0, mt, 0, blocks))
        mask = _load_mask(plan, layer, act_base + blocks * mt, oy0, mt)
        if mask is not None:
            step.loads.append(mask[0])
        for head in range(row_count(plan, layer)):
            first = head * common["k_iter"] * mt  # the head's first line in the tile
            fields = {
                "act_addr": act_base + first,
                "acc_addr": acc_base + first,
                "param_addr": base,
                "m": mt,
            }
            if layer.node.attrs.get("causal"):  # query row oy0 + i masks positions past it
                fields |= {"causal": 1, "row0": oy0}
            if mask is not None:
                fields |= mask[1]
            step.compute.append(Op(isa.Opcode.NORM, fields=common | fields))
        desc = DescSpec(
            isa.Mem.ACC,
            acc_base,
            out.name,
            out.offset + oy0 * out.w * out.pixel_stride,
            [(blocks, plan.dim, mt), (mt, out.pixel_stride, 1)],
        )
        store = {
            "param_addr": base + blocks,
            "param_loop": isa.DESC_LOOPS - 2,
            "clamp_lo": -128,
            "clamp_hi": 127,
        }
        step.store.append(Op(isa.Opcode.STORE, fields=store, desc=desc))
        steps.append(step)
    return steps


def _load_mask(
    plan: Plan, layer: Layer, local: int, oy0: int, mt: int
) -> tuple[Op, dict[str, int]] | None:
    """The LOAD of a tile's mask lines into ACT ``local ..`` and NORM's mask fields, or None."""
    per_row, shared = mask_act_lines(plan, layer)
    if not per_row and not shared:
        return None
    fields = {"mask_lines": 1, "mask_addr": local, "mask_per_row": int(per_row > 0)}
    if len(layer.inputs) == 2:  # the mask tensor the host computed at the input
        first, rows = (oy0, mt) if per_row else (0, 1)
        load = load_tile(plan, layer.inputs[1], local, first, rows, 0, per_row or shared)
        return load, fields
    row_bytes, dim = mask_row_bytes(plan, layer), plan.dim
    offset = table_offset(plan, layer)
    loops: list[tuple[int, ...]]
    if per_row:  # line k of row i at local + k*mt + i, as the rows themselves
        loops = [(per_row, dim, mt), (mt, row_bytes, 1)]
        offset += oy0 * row_bytes
    else:
        loops = [(shared, dim, 1)]
    desc = DescSpec(isa.Mem.ACT, local, param_symbol(layer), offset, loops)
    return Op(isa.Opcode.LOAD, desc=desc), fields

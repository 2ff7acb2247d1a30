"""The constant DRAM contents of a layer: weight tiles and PARAM lines, in the order the
schedule loads them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from arch import isa
from arch import reference_ops as ro
from arch.ops.norm import SOFTMAX_STORE_SHIFT
from arch.reference import zero_point
from compiler.errors import Unplaceable
from compiler.ir import Node
from compiler.plan import Layer, Plan


def weight_bytes(layer: Layer, dim: int) -> np.ndarray:
    """Weight tiles of every block in ``layer.weight_blocks``: tile (k, j) of a block is
    ``dim`` lines where line r holds ``W[o = (n0 + j)*dim + c, k = (k0 + k)*dim + r]`` over c."""
    matrix = layer.weights
    assert matrix is not None
    if layer.gemm is not None and layer.gemm.depthwise:
        # (C_pad, taps) -> per channel block, one line of dim channels per tap
        lines = matrix.reshape(-1, dim, matrix.shape[1]).transpose(0, 2, 1)
        return np.ascontiguousarray(lines).reshape(-1).view(np.uint8)
    if layer.chunk_order is not None:  # K chunks in the schedule's order
        rows = matrix.shape[0]
        matrix = matrix.reshape(rows, -1, dim)[:, layer.chunk_order].reshape(rows, -1)
    parts = []
    for n0, nbc, k0, kc, _offset in layer.weight_blocks:
        block = matrix[n0 * dim : (n0 + nbc) * dim, k0 * dim : (k0 + kc) * dim]
        # (nbc*dim o, kc*dim k) -> (kc, nbc, dim r=k, dim c=o)
        tiles = block.reshape(nbc, dim, kc, dim).transpose(2, 0, 3, 1)
        parts.append(np.ascontiguousarray(tiles).reshape(-1))
    return np.concatenate(parts).view(np.uint8) if parts else np.zeros(0, np.uint8)


def weight_size(layer: Layer, dim: int) -> int:
    if layer.gemm is not None and layer.gemm.depthwise:
        assert layer.weights is not None
        return layer.weights.size
    return sum(kc * nbc * dim * dim for _n0, nbc, _k0, kc, _o in layer.weight_blocks)


def _broadcast(value: np.ndarray | None, channels: int, pad_to: int) -> np.ndarray:
    out = np.zeros(pad_to, dtype=np.int64)
    if value is not None:
        out[:channels] = np.broadcast_to(np.asarray(value, dtype=np.int64), (channels,))
    return out


def _wrap32(v: np.ndarray) -> np.ndarray:
    return ((np.asarray(v, np.int64) + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int64)


def _rescaled_zero(z: int, mult: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """``requant(z, mult, shift)`` per channel: a zero point's share of a rescaled input."""
    zs = np.full(np.shape(mult), z, np.int64)
    return np.asarray(ro.requantize(zs, mult, shift, axis=0), np.int64)


def zero_point_bias(plan: Plan, layer: Layer) -> np.ndarray | None:
    """The bias that makes the hardware compute what :mod:`arch.reference` defines for inputs
    with zero points (None: nothing to correct), per output channel:

    - conv/gemm: ``bias - z_in * sum(weight[o])`` (the DMA pads with ``z_in``), minus
      ``requant(z_res, res_mult, res_shift)`` for a residual;
    - add: ``-(requant(z_a, a_mult, a_shift) + requant(z_b, b_mult, b_shift))``;
    - average pools: ``-window * z_in`` (the DMA pads with ``z_in``);
    - a one-input scale: ``-z_in`` (a gated one with zero points is refused: the host).
    """
    node, g = layer.node, plan.graph
    p = node.params
    z_in = zero_point(g, node.inputs[0])
    if layer.kind == "gemm":
        z_res = zero_point(g, node.inputs[1]) if len(node.inputs) > 1 else 0
        if not z_in and not z_res:
            return None
        weight = p["weight"].astype(np.int64)
        bias = p["bias"].astype(np.int64) - z_in * weight.reshape(weight.shape[0], -1).sum(1)
        if z_res:
            bias = bias - _rescaled_zero(z_res, p["res_mult"], p["res_shift"])
        return _wrap32(bias)
    if layer.kind == "add":
        z_b = zero_point(g, node.inputs[1])
        if not z_in and not z_b:
            return None
        corr = _rescaled_zero(z_in, p["a_mult"], p["a_shift"])
        corr = corr + _rescaled_zero(z_b, p["b_mult"], p["b_shift"])
        return _wrap32(-corr)
    if layer.kind == "pool" and node.op != "maxpool" and z_in:
        shape = g.tensors[node.inputs[0]].shape
        kh, kw = node.attrs.get("kernel", shape[2:])
        return _wrap32(np.array([-kh * kw * z_in]))
    if layer.kind == "scale":
        if len(node.inputs) == 2 and (z_in or zero_point(g, node.inputs[1])):
            raise Unplaceable(
                node.name,
                node.op,
                "a channel-wise product of tensors with zero points "
                f"({z_in}, {zero_point(g, node.inputs[1])}) is not supported",
                "zero points 0 (the gate multiplies the raw codes)",
            )
        return _wrap32(np.array([-z_in])) if z_in else None
    return None


#: A layer's PARAM sets: per set, the PARAM entry fields (name -> per-channel values, None:
#: absent) from its node and its zero-point bias (:func:`zero_point_bias`).
ParamSets = Callable[[Node, np.ndarray | None], list[dict[str, Any]]]


def _gemm_sets(node: Node, zp_bias: np.ndarray | None) -> list[dict[str, Any]]:
    p = node.params
    return [
        {
            "bias": p["bias"] if zp_bias is None else zp_bias,
            "mult": p["mult"],
            "shift": p["shift"],
            "res_mult": p.get("res_mult"),
            "res_shift": p.get("res_shift"),
        }
    ]


def _matmul_sets(node: Node, zp_bias: np.ndarray | None) -> list[dict[str, Any]]:
    """One rescale for every head's columns."""
    return [{"mult": node.params["mult"], "shift": node.params["shift"]}]


def _upsample_sets(node: Node, zp_bias: np.ndarray | None) -> list[dict[str, Any]]:
    """ACCUM copies the line in, STORE copies it out."""
    one, zero = np.array([1]), np.array([0])
    return [{"res_mult": one, "res_shift": zero, "mult": one, "shift": zero}]


def _pool_sets(node: Node, zp_bias: np.ndarray | None) -> list[dict[str, Any]]:
    if node.op == "maxpool":
        return [{"mult": np.array([1]), "shift": np.array([0])}]
    return [{"mult": node.params["mult"], "shift": node.params["shift"], "bias": zp_bias}]


def _scale_sets(node: Node, zp_bias: np.ndarray | None) -> list[dict[str, Any]]:
    """ACCUM copies x (times the gate), STORE rescales."""
    one, zero = np.array([1]), np.array([0])
    p = node.params
    return [
        {
            "bias": zp_bias,
            "res_mult": one,
            "res_shift": zero,
            "mult": p["mult"],
            "shift": p["shift"],
        }
    ]


def _add_sets(node: Node, zp_bias: np.ndarray | None) -> list[dict[str, Any]]:
    """The a-set carries the output rescale (and a zero-point bias), the b-set only b's."""
    p = node.params
    return [
        {
            "bias": zp_bias,
            "res_mult": p["a_mult"],
            "res_shift": p["a_shift"],
            "mult": p["mult"],
            "shift": p["shift"],
        },
        {"res_mult": p["b_mult"], "res_shift": p["b_shift"]},
    ]


def _norm_sets(node: Node, zp_bias: np.ndarray | None) -> list[dict[str, Any]]:
    """NORM reads the a-set (per-channel requant, the Q8 bias with the output zero point, and
    eps_codes in entry 0's res_mult; row_softmax: k there); its STORE the b-set: Q8 codes
    rounded to int8 (mult 1, shift 8; row_softmax: shift 9, to its fixed 1/128)."""
    p = node.params
    one = np.ones(1, np.int64)
    if node.op == "row_softmax":
        return [{"res_mult": p["k"]}, {"mult": one, "shift": one * SOFTMAX_STORE_SHIFT}]
    a = {"bias": p["bias"], "mult": p["mult"], "shift": p["shift"], "res_mult": p["eps_codes"]}
    return [a, {"mult": one, "shift": one * 8}]


#: The PARAM sets of each device layer kind (``arch.executable.format.LAYER_KINDS``).
PARAM_SETS: dict[str, ParamSets] = {
    "gemm": _gemm_sets,
    "matmul": _matmul_sets,
    "upsample": _upsample_sets,
    "pool": _pool_sets,
    "scale": _scale_sets,
    "add": _add_sets,
    "norm": _norm_sets,
}


def param_lines(plan: Plan, layer: Layer) -> np.ndarray:
    """PARAM lines of a layer as bytes: one entry per (padded) output channel; ``add`` layers
    have a second set for their b input after the first; a layer with a table ends with it,
    padded to whole PARAM lines (at :func:`table_offset`)."""
    p = layer.node.params
    padded, channels = plan.out_channels(layer)
    heads = 1
    if layer.kind == "matmul" or layer.node.op == "row_softmax":  # the same for every head
        channels = padded
    elif plan.tensors[layer.output].layout == "heads":  # an elementwise op of heads: per head
        heads = plan.graph.tensors[layer.output].shape[1]
    sets = PARAM_SETS[layer.kind](layer.node, zero_point_bias(plan, layer))
    entries = []
    for columns in sets:
        values = {
            name: np.tile(_broadcast(v, channels, padded // heads), heads)
            for name, v in columns.items()
            if v is not None
        }
        entries.append(_entries(values, padded))
    if "table" in p:
        table = np.zeros(isa.table_lines(plan.dim) * plan.dim * isa.PARAM_ENTRY_BYTES, np.uint8)
        table[: isa.TABLE_ENTRIES] = p["table"].view(np.uint8)
        entries.append(table)
    if "mask" in p:
        entries.append(mask_lines(plan, layer))
    return np.concatenate(entries)


def mask_row_bytes(plan: Plan, layer: Layer) -> int:
    """Bytes of one row of a row_softmax's mask lines: one head's N values padded to lines."""
    heads = plan.graph.tensors[layer.output].shape[1]
    return plan.tensors[layer.output].channels // heads


def mask_lines(plan: Plan, layer: Layer) -> np.ndarray:
    """A row_softmax's constant mask codes as NORM's mask lines, at :func:`table_offset`: each
    of its (M or 1) rows padded to whole lines (padding lanes are past the row: never read)."""
    mask = layer.node.params["mask"]
    rows = np.zeros((mask.shape[0], mask_row_bytes(plan, layer)), np.int8)
    rows[:, : mask.shape[1]] = mask
    return rows.reshape(-1).view(np.uint8)


def _entries(values: dict[str, np.ndarray], count: int) -> np.ndarray:
    out = np.zeros((count, isa.PARAM_ENTRY_BYTES), dtype=np.uint8)
    for leaf in isa.PARAM_ENTRY.leaves:
        if leaf.path not in values:
            continue
        nbytes = leaf.width // 8
        dtype = f"<{'i' if leaf.signed else 'u'}{nbytes}"
        column = values[leaf.path].astype(dtype)
        out[:, leaf.offset // 8 : leaf.offset // 8 + nbytes] = column.view(np.uint8).reshape(
            count, nbytes
        )
    return out.reshape(-1)


def table_offset(plan: Plan, layer: Layer) -> int:
    """Byte offset of the layer's table in its PARAM data: after the parameter entries."""
    sets = len(PARAM_SETS[layer.kind](layer.node, None))
    return sets * plan.out_channels(layer)[0] * isa.PARAM_ENTRY_BYTES


def param_size(plan: Plan, layer: Layer) -> int:
    p = layer.node.params
    lines = isa.table_lines(plan.dim) if "table" in p else 0
    mask = p["mask"].shape[0] * mask_row_bytes(plan, layer) if "mask" in p else 0
    return table_offset(plan, layer) + lines * plan.dim * isa.PARAM_ENTRY_BYTES + mask

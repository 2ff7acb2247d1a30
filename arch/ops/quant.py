"""The int8 arithmetic the op evaluators share: quantization of the host's tensors, zero points,
and the STORE's post-processing (requantize, zero point, clamp, table)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from arch import reference_ops as ro
from arch.ops.spec import RefGraph, RefNode

__all__ = [
    "centred",
    "dequantize",
    "quantize_input",
    "rescaled_residual",
    "store",
    "store_zero_point",
    "zero_point",
]


def quantize_input(x: npt.ArrayLike, scale: float, zero_point: int = 0) -> npt.NDArray[np.int8]:
    """Host input quantization:
    ``clip(round_half_away_from_zero(x / scale) + zero_point, -128, 127)``."""
    v = np.asarray(x, np.float64) / float(scale)
    rounded = np.sign(v) * np.floor(np.abs(v) + 0.5) + int(zero_point)
    return np.clip(rounded, -128, 127).astype(np.int8)


def dequantize(q: npt.ArrayLike, scale: float, zero_point: int = 0) -> npt.NDArray[np.float32]:
    """``scale * (q - zero_point)`` as float32."""
    return ((np.asarray(q, np.float64) - int(zero_point)) * float(scale)).astype(np.float32)


def zero_point(graph: RefGraph, name: str) -> int:
    """The zero point of tensor ``name`` (0: symmetric; graphs without them are symmetric)."""
    return int(getattr(graph.tensors[name], "zero_point", 0) or 0)


def store_zero_point(graph: RefGraph, node: RefNode) -> int:
    """The zero point a node's STORE adds: its output's, or for a ``table`` act the table
    input's (param ``table_zp``, 0 when absent)."""
    if node.attrs.get("act") == "table":
        return int(node.params["table_zp"][0]) if "table_zp" in node.params else 0
    return zero_point(graph, node.output)


def centred(graph: RefGraph, name: str, x: np.ndarray) -> np.ndarray:
    """``x - zero_point`` as int64: the value an int8 tensor holds, in units of its scale."""
    return x.astype(np.int64) - zero_point(graph, name)


def rescaled_residual(
    graph: RefGraph, name: str, x: np.ndarray, mult: np.ndarray, shift: np.ndarray, axis: int = 1
) -> np.ndarray:
    """``requant(x) - requant(zero_point)``: a residual or add input with a zero point, as the
    hardware adds it (the zero point's share is a bias the compiler folds; exact when the
    zero point is 0, else within one accumulator unit of ``requant(x - zero_point)``)."""
    out = ro.requantize(x, mult, shift, axis=axis)
    z = zero_point(graph, name)
    if z:
        zs = np.full(np.shape(mult) if np.ndim(mult) else (1,), z, np.int64)
        corr = ro.requantize(zs, mult, shift, axis=0)
        along = [1] * out.ndim
        along[axis] = -1
        out = out - corr.reshape(along)
    return out


def store(graph: RefGraph, node: RefNode, acc: np.ndarray, axis: int) -> np.ndarray:
    """The STORE post-processing: requantize, add the output zero point (a table act's: its
    input's, ``table_zp``), saturate, then the table of a ``table`` act."""
    p = node.params
    lo, hi = (int(v) for v in p["clamp"])
    table = node.attrs["act"] == "table"
    zp = store_zero_point(graph, node)
    scaled = ro.requantize(acc, p["mult"], p["shift"], axis=axis) + zp
    out = ro.to_int8(ro.clamp(scaled, lo, hi))
    return ro.lookup(out, p["table"]) if table else out

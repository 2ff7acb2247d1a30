"""QDQ parameters: scales and zero points of activations, quantized weights and biases, and
the integer accumulators waiting for their scale."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx
from onnx import TensorProto

from ..errors import CompileError
from ..ir import Node
from .read import (
    act,
    attrs_of,
    const,
    has_input,
    opt_const,
)
from .state import ImportState, Pending, QConst


class BadScale(CompileError):
    """A quantization scale of the model no placement can use (not finite, denormal, huge,
    zero, or two for one tensor): refused as it is, not sent to the host (which would read its
    int8 codes, or run a quantization that means nothing)."""


def set_scale(
    st: ImportState, node: onnx.NodeProto, name: str, ir_name: str, scale: np.ndarray, zp: int = 0
) -> None:
    """Record a per-tensor activation scale and (int8) zero point on an IR tensor (must
    agree if already set)."""
    if scale.size != 1:
        raise CompileError(
            name,
            node.op_type,
            f"per-axis activation scale (shape {scale.shape}) is not supported",
            "per-tensor activation scales",
        )
    s = float(scale.reshape(()))
    problem = scale_problem(scale)
    if problem is not None or not math.isfinite(s):
        raise BadScale(name, node.op_type, f"scale of '{ir_name}' {problem}", "finite scales > 0")
    t = st.tensors[ir_name]
    if t.scale is not None and not math.isclose(t.scale, s, rel_tol=1e-6):
        raise BadScale(
            name,
            node.op_type,
            f"tensor '{ir_name}' already has scale {t.scale:.6g}, this gives {s:.6g}",
            "one scale per tensor",
        )
    if t.scale is not None and t.zero_point != zp:
        raise CompileError(
            name,
            node.op_type,
            f"tensor '{ir_name}' already has zero point {t.zero_point} (as int8), this gives {zp}",
            "one zero point per tensor",
        )
    st.tensors[ir_name] = dataclasses.replace(t, scale=s, zero_point=zp)


def act_zero_point(
    st: ImportState, node: onnx.NodeProto, name: str, i: int, what: str, codes: str | None = None
) -> int:
    """The zero point of an activation's codes as the accelerator's int8: an int8 zero
    point as it is, a uint8 one minus 128 (a uint8 code u is the int8 code u - 128). An
    absent zero point is 0 of the codes' type: ``codes`` is the ONNX value holding them
    (a QuantizeLinear's output type comes from its ``output_dtype``, default uint8)."""
    op = node.op_type
    if not has_input(node, i):
        if op == "QuantizeLinear":
            dtype = attrs_of(node).get("output_dtype", 0)
            if dtype not in (0, TensorProto.UINT8, TensorProto.INT8):
                raise CompileError(
                    name,
                    op,
                    f"output_dtype {TensorProto.DataType.Name(dtype)} is not supported",
                    "int8, uint8",
                )
            return 0 if dtype == TensorProto.INT8 else -128
        return -128 if codes is not None and st.qdtype.get(codes) == "uint8" else 0
    zp = const(st, node, name, i, what)
    if zp.dtype not in (np.int8, np.uint8):
        raise CompileError(name, op, f"{what} of type {zp.dtype} is not supported", "int8, uint8")
    if zp.size != 1:
        raise CompileError(
            name,
            op,
            f"per-axis {what} (shape {zp.shape}) is not supported",
            "one zero point per activation tensor",
        )
    value = int(zp.reshape(-1)[0])
    return value - 128 if zp.dtype == np.uint8 else value


def codes_type(st: ImportState, node: onnx.NodeProto, i: int) -> str:
    """'uint8' or 'int8': the type of the codes a QuantizeLinear or QLinear op writes,
    from its zero-point input ``i`` (or, absent, its output_dtype; default uint8)."""
    if has_input(node, i) and node.input[i] in st.consts:
        return "uint8" if st.consts[node.input[i]].dtype == np.uint8 else "int8"
    if node.op_type == "QuantizeLinear":
        dtype = attrs_of(node).get("output_dtype", 0)
        return "int8" if dtype == TensorProto.INT8 else "uint8"
    return "int8"


def check_zero_point(
    st: ImportState, node: onnx.NodeProto, name: str, i: int, what: str, allow_int32: bool = False
) -> None:
    """A zero-point input must be absent-with-int8-output or an int8 (int32) array of 0s."""
    if not has_input(node, i):
        if node.op_type == "QuantizeLinear":
            dtype = attrs_of(node).get("output_dtype", 0)
            if dtype != TensorProto.INT8:
                raise CompileError(
                    name,
                    node.op_type,
                    f"{what} is absent, so the output is uint8; uint8 is not supported",
                    "int8 symmetric (zero point 0 of type int8)",
                )
        return
    zp = const(st, node, name, i, what)
    allowed = (np.int8, np.int32) if allow_int32 else (np.int8,)
    if zp.dtype not in allowed:
        raise CompileError(
            name,
            node.op_type,
            f"{what} of type {zp.dtype} is not supported",
            "int8 symmetric (zero point 0 of type int8)",
        )
    if np.any(zp != 0):
        raise CompileError(
            name,
            node.op_type,
            f"{what} {int(zp.flat[np.flatnonzero(zp)[0]])} is not "
            "supported (asymmetric quantization)",
            "zero point 0",
        )


def centred_weight(
    st: ImportState, node: onnx.NodeProto, name: str, q: np.ndarray, scales: int
) -> np.ndarray:
    """A quantized weight with a zero point (uint8, or int8 with z != 0) as the int8
    weight ``q - z`` of zero point 0 - exact when every ``q - z`` fits int8 (a uint8 weight
    of zero point 128 does); else it is refused (and the node goes to the host)."""
    zp = const(st, node, name, 2, "x_zero_point")
    if zp.dtype != q.dtype:
        raise CompileError(
            name, node.op_type, f"x_zero_point of type {zp.dtype} for a {q.dtype} constant"
        )
    if not np.any(zp) and q.dtype == np.int8:
        return q
    zb = zp.astype(np.int64).reshape(-1)
    if zb.size > 1:
        axis = int(attrs_of(node).get("axis", 1)) % q.ndim
        shape = [1] * q.ndim
        shape[axis] = zb.size
        zb = zb.reshape(shape)
    centred = q.astype(np.int64) - zb
    if centred.min() < -128 or centred.max() > 127:
        raise CompileError(
            name,
            node.op_type,
            f"weight codes minus the zero point span {centred.min()}..{centred.max()}, beyond int8",
            "int8 weights, or weights with a zero point whose codes stay in -128..127",
        )
    return centred.astype(np.int8)


#: Scales quantization can use: normal float32 (a denormal loses its precision and its
#: reciprocal overflows) and small enough that a 16-bit code times it stays finite.
SCALE_MIN = float(np.finfo(np.float32).tiny)
SCALE_MAX = float(np.finfo(np.float32).max) / 65536


def scale_problem(s: np.ndarray) -> str | None:
    """Why the scale values ``s`` cannot be used, or None."""
    flat = np.asarray(s, np.float64).reshape(-1)
    if flat.size == 0:
        return "is empty"
    bad = ~np.isfinite(flat) | (flat < SCALE_MIN) | (flat > SCALE_MAX)
    if not bad.any():
        return None
    first = float(flat[np.flatnonzero(bad)[0]])
    return f"is {first:.6g}, outside the usable {SCALE_MIN:.3g}..{SCALE_MAX:.3g}"


def scale_const(st: ImportState, node: onnx.NodeProto, name: str, i: int, what: str) -> np.ndarray:
    """Input ``i``: a constant scale, each value finite, normal and > 0 (else refused naming
    the scale's tensor and value)."""
    s = const(st, node, name, i, what).astype(np.float32)
    problem = scale_problem(s)
    if problem is not None:
        raise BadScale(
            name,
            node.op_type,
            f"{what} '{node.input[i]}' {problem}",
            "finite scales > 0 of normal float32",
        )
    return s


def float_weight(
    st: ImportState, node: onnx.NodeProto, name: str, i: int, ndim: int
) -> tuple[np.ndarray, QConst | None]:
    w = const(st, node, name, i, "weight")
    if w.ndim != ndim:
        raise CompileError(
            name, node.op_type, f"weight has shape {w.shape}", f"a {ndim}-D constant weight"
        )
    if w.dtype.kind != "f":
        raise CompileError(
            name,
            node.op_type,
            f"weight of type {w.dtype} is not supported here",
            "float weights or DequantizeLinear of int8 weights",
        )
    q = st.qconst.get(node.input[i])
    if q is not None and q.q.dtype != np.int8:
        raise CompileError(
            name, node.op_type, f"quantized weight of type {q.q.dtype} is not supported", "int8"
        )
    return w.astype(np.float32), q


def channel_scale(name: str, op: str, q: QConst, axis: int, channels: int) -> np.ndarray:
    """The scale of a quantized weight as one value per output channel (axis ``axis``)."""
    if q.scale.size == 1:
        return np.full(channels, float(q.scale.reshape(-1)[0]), np.float32)
    if q.axis != axis or q.scale.size != channels:
        raise CompileError(
            name,
            op,
            f"weight scale along axis {q.axis} is not supported",
            "per-tensor or per-output-channel weight scales",
        )
    return q.scale.reshape(channels).astype(np.float32)


def bias_params(
    st: ImportState, node: onnx.NodeProto, name: str, i: int, channels: int
) -> dict[str, np.ndarray]:
    b = opt_const(st, node, name, i, "bias")
    if b is None:
        return {"bias": np.zeros(channels, np.float32)}
    try:
        bias = np.broadcast_to(b.astype(np.float32).reshape(-1), (channels,))
    except ValueError:
        raise CompileError(
            name, node.op_type, f"bias of shape {b.shape} does not fit {channels} channels"
        ) from None
    params = {"bias": np.array(bias, np.float32)}
    q = st.qconst.get(node.input[i])
    if q is not None and q.q.dtype == np.int32 and q.q.size == channels:
        params["bias_q"] = q.q.reshape(channels).astype(np.int32)
    return params


def int_bias(
    st: ImportState, node: onnx.NodeProto, name: str, i: int, channels: int, scale: np.ndarray
) -> dict[str, np.ndarray]:
    """An int32 bias input of a QLinear op (scale x_scale * w_scale) as bias and bias_q."""
    b = opt_const(st, node, name, i, "bias")
    if b is None:
        return {"bias": np.zeros(channels, np.float32)}
    if b.dtype != np.int32 or b.shape != (channels,):
        raise CompileError(
            name,
            node.op_type,
            f"bias of type {b.dtype}, shape {b.shape} is not supported",
            f"int32 ({channels},)",
        )
    real = (b.astype(np.float64) * scale.astype(np.float64)).astype(np.float32)
    return {"bias": real, "bias_q": b.astype(np.int32)}


def same_zero_point(
    st: ImportState, node: onnx.NodeProto, name: str, x: str, i: int, what: str
) -> None:
    """An integer op's input zero point must be the one its codes were quantized with."""
    zp = act_zero_point(st, node, name, i, what, node.input[0])
    if zp != st.tensors[x].zero_point:
        raise CompileError(
            name,
            node.op_type,
            f"{what} {zp} (as int8) differs from the input's {st.tensors[x].zero_point}",
            "the zero point of the QuantizeLinear that made the input",
        )


def integer_op_inputs(
    st: ImportState,
    node: onnx.NodeProto,
    name: str,
    zero_points: tuple[str, str],
    ndim: int,
    supported: str,
) -> tuple[str, np.ndarray]:
    """ConvInteger / MatMulInteger: the int8 activation (input 0, its zero point the one it was
    quantized with) and the int8 weight (input 1, of rank ``ndim``, zero point 0)."""
    x = act(st, node, name, 0, int8=True)
    same_zero_point(st, node, name, x, 2, zero_points[0])
    check_zero_point(st, node, name, 3, zero_points[1])
    return x, int8_weight(st, node, name, 1, ndim, supported)


def int8_weight(
    st: ImportState, node: onnx.NodeProto, name: str, i: int, ndim: int, supported: str
) -> np.ndarray:
    """Input ``i``: a constant int8 weight of rank ``ndim``, else refused naming ``supported``."""
    wq = const(st, node, name, i, "weight")
    if wq.dtype != np.int8 or wq.ndim != ndim:
        raise CompileError(
            name,
            node.op_type,
            f"weight of type {wq.dtype}, shape {wq.shape} is not supported",
            supported,
        )
    return wq


def qlinear_output(
    st: ImportState, node: onnx.NodeProto, name: str, output: str, scale: np.ndarray, zp: int
) -> None:
    """QLinearConv / QLinearMatMul: their IR output holds int8 codes of ``scale`` and ``zp``
    (inputs 6 and 7), typed as the node's output codes."""
    set_scale(st, node, name, output, scale, zp)
    st.qview.add(output)
    st.qdtype[node.output[0]] = codes_type(st, node, 7)


def start_pending(st: ImportState, node: onnx.NodeProto, name: str, ir: Node, x: str) -> None:
    scale = st.tensors[x].scale
    if scale is None:
        raise CompileError(name, node.op_type, f"input '{x}' has no known scale")
    del st.alias[ir.output]
    st.pending[ir.output] = Pending(ir, scale)

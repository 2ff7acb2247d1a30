"""QuantizeLinear, DequantizeLinear, and the Cast and Mul that scale an integer accumulator."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..errors import CompileError
from .qdq_params import (
    act_zero_point,
    centred_weight,
    check_zero_point,
    codes_type,
    scale_const,
    set_scale,
)
from .read import (
    act,
    attrs_of,
    elem_type,
    has_input,
    per_channel_vector,
    take_over,
)
from .registry import handles
from .state import ImportState, QConst


@handles("QuantizeLinear")
def op_quantize_linear(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    attrs = attrs_of(node)
    if attrs.get("block_size", 0):
        raise CompileError(name, node.op_type, "blocked quantization is not supported")
    s = scale_const(st, node, name, 1, "y_scale")
    src, out = node.input[0], node.output[0]
    if src in st.consts:  # a float weight quantized in the graph
        check_zero_point(st, node, name, 2, "y_zero_point")
        x = st.consts[src].astype(np.float64)
        axis = int(attrs.get("axis", 1))
        sb = s.astype(np.float64)
        if s.size > 1:
            if not -x.ndim <= axis < x.ndim:
                raise CompileError(
                    name, node.op_type, f"axis {axis} is out of range for a {x.ndim}-D input"
                )
            axis %= x.ndim
            shape = [1] * x.ndim
            shape[axis] = s.size
            sb = sb.reshape(shape)
        st.consts[out] = np.clip(np.rint(x / sb), -128, 127).astype(np.int8)
        return
    x_ir = act(st, node, name, 0)
    zp = act_zero_point(st, node, name, 2, "y_zero_point")
    set_scale(st, node, name, x_ir, s, zp)
    st.alias[out] = x_ir
    st.qview.add(out)
    st.qdtype[out] = codes_type(st, node, 2)


@handles("DequantizeLinear")
def op_dequantize_linear(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    attrs = attrs_of(node)
    if attrs.get("block_size", 0):
        raise CompileError(name, node.op_type, "blocked quantization is not supported")
    src, out = node.input[0], node.output[0]
    s = scale_const(st, node, name, 1, "x_scale")
    if src in st.consts:
        q = st.consts[src]
        if q.dtype in (np.int8, np.uint8) and has_input(node, 2):
            q = centred_weight(st, node, name, q, s.size)
        if q.dtype not in (np.int8, np.int32):
            raise CompileError(
                name,
                node.op_type,
                f"quantized constant of type {q.dtype} is not supported",
                "int8 (weights), int32 (biases)",
            )
        if q is st.consts[src]:
            check_zero_point(st, node, name, 2, "x_zero_point", allow_int32=True)
        axis: int | None = None
        sb = s.astype(np.float64).reshape(-1)[:1].reshape(())
        if s.size > 1:
            axis = int(attrs.get("axis", 1))
            if not -q.ndim <= axis < q.ndim:
                raise CompileError(
                    name, node.op_type, f"axis {axis} is out of range for a {q.ndim}-D input"
                )
            axis %= q.ndim
            shape = [1] * q.ndim
            shape[axis] = s.size
            sb = s.astype(np.float64).reshape(shape)
        st.consts[out] = (q.astype(np.float64) * sb).astype(np.float32)
        st.qconst[out] = QConst(q, s.reshape(-1), axis)
        return
    if src not in st.qview:
        act(st, node, name, 0, int8=True)  # raises with the reason
    zp = act_zero_point(st, node, name, 2, "x_zero_point", src)
    x = st.alias[src]
    set_scale(st, node, name, x, s, zp)
    st.alias[out] = x


@handles("Cast")
def op_cast(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    to = int(attrs_of(node).get("to", 0))
    src, out = node.input[0], node.output[0]
    if src in st.consts:
        dtype = helper.tensor_dtype_to_np_dtype(to)
        st.consts[out] = st.consts[src].astype(dtype)
        return
    if to != TensorProto.FLOAT:
        raise CompileError(
            name,
            node.op_type,
            f"cast to {TensorProto.DataType.Name(to)} is not supported",
            "Cast(to=FLOAT) after ConvInteger/MatMulInteger, or of a constant",
        )
    if src in st.pending:
        st.pending[out] = dataclasses.replace(st.pending.pop(src), cast=True)
        return
    if elem_type(st, src) != TensorProto.FLOAT:
        kind = TensorProto.DataType.Name(elem_type(st, src))
        raise CompileError(name, node.op_type, f"cast of a {kind} value", "float -> float")
    x = act(st, node, name, 0)
    st.alias[out] = x  # a float -> float cast changes nothing


def scale_accumulator(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    """A Mul of a cast ConvInteger/MatMulInteger accumulator by its (input x weight) scale:
    the weight's scale, so the accumulator's node becomes a scaled conv or matmul."""
    ins = list(node.input)
    idx = next((i for i, v in enumerate(ins[:2]) if v in st.pending), None)
    if idx is None or ins[1 - idx] not in st.consts:
        raise CompileError(
            name,
            node.op_type,
            "Mul is supported as a channel gate or the scale of an integer accumulator",
            "x (1, C, H, W) * gate (1, C, 1, 1), x * Sigmoid(x), x * HardSigmoid(x), or "
            "ConvInteger/MatMulInteger -> Cast(to=FLOAT) -> Mul(scale)",
        )
    p = st.pending.pop(ins[idx])
    if not p.cast:
        raise CompileError(name, node.op_type, "the int32 accumulator needs Cast(to=FLOAT)")
    ir = p.node
    out_shape = st.tensors[ir.output].shape
    o = out_shape[1]
    c = st.consts[ins[1 - idx]].astype(np.float64)
    vec = per_channel_vector(c, out_shape)
    if vec is None or np.any(vec <= 0):
        raise CompileError(
            name,
            node.op_type,
            f"scale of shape {c.shape} is not a positive per-channel scale for output {out_shape}",
            "scalar or per-output-channel scales > 0",
        )
    wscale = (vec / p.x_scale).astype(np.float32)
    wq = ir.params["weight_q"]
    bshape = (o,) + (1,) * (wq.ndim - 1)
    weight = (wq.astype(np.float32) * wscale.reshape(bshape)).astype(np.float32)
    take_over(st, ir, node, name, params={**ir.params, "weight_scale": wscale, "weight": weight})

"""Fully connected layers: Gemm, MatMul by a constant (also per token), QLinearMatMul,
MatMulInteger."""

from __future__ import annotations

import numpy as np
import onnx

from ..errors import CompileError
from ..ir import Node
from .attention import batch_matmul
from .qdq_params import (
    act_zero_point,
    bias_params,
    channel_scale,
    check_zero_point,
    float_weight,
    int8_weight,
    integer_op_inputs,
    qlinear_output,
    scale_const,
    set_scale,
    start_pending,
)
from .read import (
    act,
    attrs_of,
    emit,
    has_input,
    need_2d,
    rank_of,
    shape_of,
)
from .registry import handles
from .state import ImportState, QConst


@handles("Gemm")
def op_gemm(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    attrs = attrs_of(node)
    op = node.op_type
    if attrs.get("transA", 0):
        raise CompileError(name, op, "transA=1 is not supported", "transA=0")
    if attrs.get("alpha", 1.0) != 1.0:
        raise CompileError(name, op, f"alpha {attrs['alpha']} is not supported", "alpha 1")
    if has_input(node, 2) and attrs.get("beta", 1.0) != 1.0:
        raise CompileError(name, op, f"beta {attrs['beta']} is not supported", "beta 1")
    x = act(st, node, name, 0)
    k = need_2d(st, node, name, x)[1]
    b, q = float_weight(st, node, name, 1, 2)
    trans_b = int(attrs.get("transB", 0))
    w = b if trans_b else b.T
    if w.shape[1] != k:
        raise CompileError(name, op, f"weight {b.shape} (transB={trans_b}) does not fit K={k}")
    n = int(w.shape[0])
    params = {"weight": np.ascontiguousarray(w, np.float32), **bias_params(st, node, name, 2, n)}
    if q is not None:
        params["weight_q"] = np.ascontiguousarray(q.q if trans_b else q.q.T).astype(np.int8)
        params["weight_scale"] = channel_scale(name, op, q, 0 if trans_b else 1, n)
    emit(st, node, name, "gemm", [x], (1, n), {"act": None}, params)


def matmul_node(
    st: ImportState,
    node: onnx.NodeProto,
    name: str,
    x: str,
    b: np.ndarray,
    params: dict[str, np.ndarray],
) -> Node:
    """(1, K) @ (K, N), or tokens: (1, T, K) (held as (1, T, 1, K)) @ (K, N) per token."""
    shape = shape_of(st, x)
    if not (len(shape) == 2 or (rank_of(st, node.input[0]) == 3 and shape[0] == 1)):
        raise CompileError(
            name,
            node.op_type,
            f"input '{x}' has shape {shape}",
            "2-D input (1, K) or tokens (1, T, K)",
        )
    k = shape[-1]
    if b.ndim != 2 or b.shape[0] != k:
        raise CompileError(
            name,
            node.op_type,
            f"weight of shape {b.shape} does not fit K={k}",
            "a 2-D constant weight (K, N)",
        )
    out = (*shape[:-1], int(b.shape[1]))
    return emit(st, node, name, "matmul", [x], out, {}, params)


@handles("MatMul")
def op_matmul(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    if len(node.input) > 1 and node.input[1] in st.alias:  # two activations
        batch_matmul(st, node, name)
        return
    x = act(st, node, name, 0)
    b, q = float_weight(st, node, name, 1, 2)
    params = {"weight": np.ascontiguousarray(b.T, np.float32)}
    if q is not None:
        params["weight_q"] = np.ascontiguousarray(q.q.T).astype(np.int8)
        params["weight_scale"] = channel_scale(name, node.op_type, q, 1, b.shape[1])
    matmul_node(st, node, name, x, b, params)


@handles("QLinearMatMul")
def op_qlinear_matmul(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    x = act(st, node, name, 0, int8=True)
    a_zp = act_zero_point(st, node, name, 2, "a_zero_point", node.input[0])
    set_scale(st, node, name, x, scale_const(st, node, name, 1, "a_scale"), a_zp)
    bq = int8_weight(st, node, name, 3, 2, "int8 2-D weight (K, N)")
    bs = scale_const(st, node, name, 4, "b_scale")
    check_zero_point(st, node, name, 5, "b_zero_point")
    ys = scale_const(st, node, name, 6, "y_scale")
    y_zp = act_zero_point(st, node, name, 7, "y_zero_point")
    n = int(bq.shape[1])
    wscale = channel_scale(name, node.op_type, QConst(bq, bs, 1), 1, n)
    params = {
        "weight": (bq.T.astype(np.float32) * wscale[:, None]).astype(np.float32),
        "weight_q": np.ascontiguousarray(bq.T),
        "weight_scale": wscale,
    }
    ir = matmul_node(st, node, name, x, bq, params)
    qlinear_output(st, node, name, ir.output, ys, y_zp)


@handles("MatMulInteger")
def op_matmul_integer(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    zero_points = ("a_zero_point", "b_zero_point")
    x, bq = integer_op_inputs(st, node, name, zero_points, 2, "int8 2-D weight (K, N)")
    n = int(bq.shape[1])
    params = {
        "weight": np.ascontiguousarray(bq.T).astype(np.float32),
        "weight_q": np.ascontiguousarray(bq.T),
        "weight_scale": np.ones(n, np.float32),
    }
    ir = matmul_node(st, node, name, x, bq, params)
    start_pending(st, node, name, ir, x)

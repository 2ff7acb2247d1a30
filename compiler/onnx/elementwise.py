"""Normalization, activations and elementwise ops: BatchNormalization, lookup tables, Relu,
Clip, Add, Sum, Mul, Softmax."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from ..errors import CompileError
from .attention import scaled_product
from .const_tensors import constant_input, full_constant, refuse_in_input_stage
from .norms import causal_mask, row_softmax
from .quantized import scale_accumulator
from .read import (
    act,
    attrs_of,
    channel_axis,
    const,
    emit,
    no_extra_outputs,
    opt_const,
    per_channel_vector,
    shape_of,
    take_over,
)
from .registry import handles
from .state import ImportState

#: Elementwise ONNX ops that become a lookup table: op -> (function, its attrs with defaults).
TABLE_OPS: dict[str, tuple[str, tuple[tuple[str, float], ...]]] = {
    "Sigmoid": ("sigmoid", ()),
    "Tanh": ("tanh", ()),
    "HardSigmoid": ("hardsigmoid", (("alpha", 0.2), ("beta", 0.5))),
    "HardSwish": ("hardswish", ()),
    "LeakyRelu": ("leakyrelu", (("alpha", 0.01),)),
    "Elu": ("elu", (("alpha", 1.0),)),
    "Selu": ("selu", (("alpha", 1.67326319217681884765625), ("gamma", 1.05070102214813232421875))),
    "Celu": ("celu", (("alpha", 1.0),)),
    "Softplus": ("softplus", ()),
    "Softsign": ("softsign", ()),
    "Mish": ("mish", ()),
}
#: ``x * f(x)`` patterns that are one table: f's (function, args) -> the product's function.
_PRODUCT_TABLES: dict[tuple[str, tuple[float, ...]], str] = {
    ("sigmoid", ()): "silu",
    ("hardsigmoid", (1.0 / 6.0, 0.5)): "hardswish",
}
_FLOAT_MAX = float(np.finfo(np.float32).max)
#: Producers a per-channel Mul folds into (canonicalize): a linear layer and its per-channel ops.
_FOLDS_CHANNEL_MUL = ("conv", "matmul", "gemm", "bias_add", "batchnorm", "channel_mul")


@handles("BatchNormalization")
def op_batch_normalization(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    attrs = attrs_of(node)
    if attrs.get("training_mode", 0):
        raise CompileError(name, node.op_type, "training_mode=1 is not supported", "inference")
    no_extra_outputs(st, node, name, "a training (mean/var)")
    x = act(st, node, name, 0)
    shape = shape_of(st, x)
    c = shape[1]
    params = {}
    for i, key in enumerate(("gamma", "beta", "mean", "var"), start=1):
        v = const(st, node, name, i, key)
        if v.size != c:
            raise CompileError(name, node.op_type, f"{key} has {v.size} values for {c} channels")
        params[key] = v.reshape(c).astype(np.float32)
    eps = float(attrs.get("epsilon", 1e-5))
    emit(st, node, name, "batchnorm", [x], shape, {"epsilon": eps}, params)


def product_table(st: ImportState, node: onnx.NodeProto, name: str) -> bool:
    """``x * f(x)`` with f a table of :data:`_PRODUCT_TABLES` (SiLU as Mul(x, Sigmoid(x)),
    HardSwish as Mul(x, HardSigmoid(x))) becomes one table node; False if not that form."""
    for i in (0, 1):
        gate, x = node.input[i], node.input[1 - i]
        ir = next((n for n in st.nodes if n.output == st.alias.get(gate)), None)
        if ir is None or ir.op != "table" or x not in st.alias or x in st.qview:
            continue
        function = _PRODUCT_TABLES.get((ir.attrs["function"], ir.attrs["args"]))
        if function is None or ir.inputs[0] != st.alias[x]:
            continue
        shape = shape_of(st, ir.inputs[0])
        if st.uses[gate] > 1:  # the gate is read elsewhere too: a table of its own
            attrs = {"function": function, "args": ()}
            emit(st, node, name, "table", [ir.inputs[0]], shape, attrs)
            return True
        # The gate is read only here: its node becomes the product (and keeps its name, so
        # that sending it to the host sends the gate's ONNX node).
        take_over(st, ir, node, name, attrs={"function": function, "args": ()})
        return True
    return False


def channel_gate(st: ImportState, node: onnx.NodeProto, name: str) -> bool:
    """``x * g`` with x (1, C, H, W) and g (1, C, 1, 1) both activations (a
    squeeze-excitation gate) becomes a ``scale`` node; False if not that form."""
    ins = node.input[:2]
    if len(ins) != 2 or not all(v in st.alias and v not in st.qview for v in ins):
        return False
    shapes = [shape_of(st, st.alias[v]) for v in ins]
    for i in (0, 1):
        x, g = shapes[i], shapes[1 - i]
        if len(x) == 4 and g == (1, x[1], 1, 1):
            inputs = [act(st, node, name, i), act(st, node, name, 1 - i)]
            emit(st, node, name, "scale", inputs, x, {"act": None})
            return True
    return False


def table_node(
    st: ImportState, node: onnx.NodeProto, name: str, function: str, args: tuple
) -> None:
    x = act(st, node, name, 0)
    attrs = {"function": function, "args": tuple(float(a) for a in args)}
    emit(st, node, name, "table", [x], shape_of(st, x), attrs)


@handles(*TABLE_OPS)
def op_table(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    """An op of :data:`TABLE_OPS`: its function with the node's attrs (or their defaults)."""
    function, defaults = TABLE_OPS[node.op_type]
    attrs = attrs_of(node)
    table_node(st, node, name, function, tuple(float(attrs.get(k, d)) for k, d in defaults))


@handles("Gelu")
def op_gelu(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    approximate = attrs_of(node).get("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise CompileError(name, node.op_type, f"approximate={approximate!r}", "'none' or 'tanh'")
    table_node(st, node, name, "gelu" if approximate == "none" else "gelu_tanh", ())


@handles("FastGelu")
def op_fast_gelu(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    """The tanh-approximated GELU that :func:`fuse_gelu` writes (no bias input)."""
    table_node(st, node, name, "gelu_tanh", ())


@handles("Relu")
def op_relu(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    x = act(st, node, name, 0)
    emit(st, node, name, "relu", [x], shape_of(st, x))


@handles("Clip")
def op_clip(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    x = act(st, node, name, 0)
    if st.opset < 11:
        attrs = attrs_of(node)
        lo, hi = attrs.get("min"), attrs.get("max")
    else:
        lo_a = opt_const(st, node, name, 1, "min")
        hi_a = opt_const(st, node, name, 2, "max")
        lo = None if lo_a is None else float(lo_a.reshape(-1)[0])
        hi = None if hi_a is None else float(hi_a.reshape(-1)[0])
    lo = None if lo is None or lo <= -_FLOAT_MAX else float(lo)
    hi = None if hi is None or hi >= _FLOAT_MAX else float(hi)
    if lo == 0.0 and hi == 6.0:
        op = "relu6"
    elif lo == 0.0 and hi is None:
        op = "relu"
    else:  # any other bounds: a table
        bounds = (-_FLOAT_MAX if lo is None else lo, _FLOAT_MAX if hi is None else hi)
        table_node(st, node, name, "clip", bounds)
        return
    emit(st, node, name, op, [x], shape_of(st, x))


@handles("Add")
def op_add(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    if causal_mask(st, node, name):
        return
    a, b = node.input[0], node.input[1]
    if a in st.consts and b in st.consts:
        raise CompileError(name, node.op_type, "Add of two constants is not supported")
    if a in st.consts or b in st.consts:
        i = 1 if a in st.consts else 0
        x = act(st, node, name, i)
        shape = shape_of(st, x)
        c = st.consts[node.input[1 - i]].astype(np.float32)
        vec = per_channel_vector(c, shape, channel_axis(st, x))
        if vec is not None:
            emit(st, node, name, "bias_add", [x], shape, {}, {"bias": vec.astype(np.float32)})
            return
        # a constant tensor (position embeddings): the second input of an add
        value = node.input[1 - i]
        refuse_in_input_stage(st, node, name, node.input[i])
        y = constant_input(st, node, name, value, full_constant(st, node, name, i))
        emit(st, node, name, "add", [x, y] if i == 0 else [y, x], shape, {"act": None})
        return
    binary(st, node, name, "add", {"act": None})


@handles("Sum")
def op_sum(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    if len(node.input) != 2:
        raise CompileError(
            name, node.op_type, f"Sum of {len(node.input)} inputs is not supported", "2 inputs"
        )
    binary(st, node, name, "sum", {})


def binary(
    st: ImportState, node: onnx.NodeProto, name: str, op: str, attrs: dict[str, Any]
) -> None:
    x, y = act(st, node, name, 0), act(st, node, name, 1)
    if shape_of(st, x) != shape_of(st, y):
        raise CompileError(
            name,
            node.op_type,
            f"broadcasting {shape_of(st, x)} with {shape_of(st, y)} is not supported",
            "two inputs of the same shape",
        )
    emit(st, node, name, op, [x, y], shape_of(st, x), attrs)


@handles("Mul")
def op_mul(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    """x * f(x) as one table, a channel gate, the scale of attention scores, a per-channel
    constant (a layer scale), or the scale of an integer accumulator
    (:func:`compiler.onnx.quantized.scale_accumulator`)."""
    if product_table(st, node, name) or channel_gate(st, node, name):
        return
    if scaled_product(st, node, name) or channel_mul(st, node, name):
        return
    scale_accumulator(st, node, name)


def channel_mul(st: ImportState, node: onnx.NodeProto, name: str) -> bool:
    """``x * c`` with c one constant per channel (a layer scale; channels last on tokens): a
    ``channel_mul``, which canonicalize folds into the conv or gemm before it; False if not
    that form."""
    ins = node.input[:2]
    for i in (0, 1):
        x, c = ins[i], ins[1 - i]
        if c not in st.consts or x not in st.alias or x in st.qview or x in st.pending:
            continue
        ir_x = st.alias[x]
        producer = next((n for n in st.nodes if n.output == ir_x), None)
        if producer is None or producer.op not in _FOLDS_CHANNEL_MUL:
            continue  # nothing to fold into: a Mul of its own (the host's)
        shape = shape_of(st, ir_x)
        vec = per_channel_vector(st.consts[c].astype(np.float32), shape, channel_axis(st, ir_x))
        if vec is None or not np.isfinite(vec).all():
            continue
        x_ir = act(st, node, name, i)
        emit(st, node, name, "channel_mul", [x_ir], shape, {}, {"scale": vec.astype(np.float32)})
        return True
    return False


@handles("Softmax")
def op_softmax(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    if row_softmax(st, node, name):
        return
    x = act(st, node, name, 0)
    shape = shape_of(st, x)
    if any(node.output[0] in n.input for n in st.proto.graph.node):
        raise CompileError(name, node.op_type, "its output is read by other nodes", "last")
    axis = int(attrs_of(node).get("axis", 1 if st.opset < 13 else -1))
    if len(shape) != 2 or axis not in (1, -1):
        raise CompileError(
            name,
            node.op_type,
            f"Softmax over axis {axis} of {shape} is not supported",
            "the last axis of a (1, N) tensor",
        )
    emit(st, node, name, "softmax", [x], shape)

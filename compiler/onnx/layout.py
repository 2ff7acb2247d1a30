"""Constants and data layout: Constant, ConstantOfShape, Identity, Dropout, Concat, Flatten,
Reshape."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import CompileError
from .attention import heads_reshape
from .const_tensors import constant_input
from .map_tokens import map_tokens_reshape
from .read import (
    act,
    attrs_of,
    const,
    emit,
    has_input,
    is_read,
    need_4d,
    rank_of,
    shape_of,
)
from .registry import handles
from .state import ImportState


@handles("Concat")
def op_concat(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    """Along channels (tokens: along the tokens), of activations of the same height and width;
    a constant input (a class token) is a ``constant`` node."""
    if len(node.input) < 2:
        raise CompileError(name, node.op_type, "has fewer than 2 inputs", "2 or more")
    if all(v in st.consts for v in node.input):  # folded at compile time
        raise CompileError(name, node.op_type, "all its inputs are constants")
    xs = [
        constant_input(st, node, name, v, st.consts[v])
        if v in st.consts
        else act(st, node, name, i)
        for i, v in enumerate(node.input)
    ]
    shapes = [need_4d(st, node, name, x) for x in xs]
    axis = int(attrs_of(node).get("axis", 1))
    if axis % (rank_of(st, node.output[0]) or 4) != 1:
        raise CompileError(name, node.op_type, f"axis {axis} is not supported", "axis 1")
    if len({s[2:] for s in shapes}) != 1:
        raise CompileError(name, node.op_type, f"inputs {shapes} differ in height or width")
    h, w = shapes[0][2:]
    emit(st, node, name, "concat", xs, (1, sum(s[1] for s in shapes), h, w))


@handles("Flatten")
def op_flatten(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    x = act(st, node, name, 0, int8=None)
    shape = shape_of(st, x)
    axis = int(attrs_of(node).get("axis", 1))
    if axis < 0:
        axis += len(shape)
    if axis != 1:
        raise CompileError(name, node.op_type, f"axis {axis} is not supported", "axis 1")
    if len(shape) == 2:
        emit(st, node, name, "identity", [x], shape)
    else:
        emit(st, node, name, "flatten", [x], (1, int(np.prod(shape[1:]))))


@handles("Reshape")
def op_reshape(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    if map_tokens_reshape(st, node, name) or heads_reshape(st, node, name):
        return
    x = act(st, node, name, 0, int8=None)
    shape = shape_of(st, x)
    target = [int(v) for v in const(st, node, name, 1, "shape").reshape(-1)]
    if not attrs_of(node).get("allowzero", 0):
        target = [shape[i] if v == 0 and i < len(shape) else v for i, v in enumerate(target)]
    size = int(np.prod(shape))
    if target.count(-1) == 1:
        rest = int(np.prod([v for v in target if v != -1]))
        target[target.index(-1)] = size // rest if rest and size % rest == 0 else -1
    flat = (1, size)
    if tuple(target) == shape:
        emit(st, node, name, "identity", [x], shape)
    elif len(shape) == 4 and tuple(target) == flat:
        emit(st, node, name, "reshape", [x], flat, {"shape": flat})
    else:
        raise CompileError(
            name,
            node.op_type,
            f"Reshape of {shape} to {tuple(target)} is not supported",
            "flatten of a (1, C, H, W) tensor to (1, C*H*W)",
        )


@handles("Constant")
def op_constant(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    attrs = attrs_of(node)
    out = node.output[0]
    if "value" in attrs:
        st.consts[out] = numpy_helper.to_array(attrs["value"])
    elif "value_float" in attrs:
        st.consts[out] = np.array(attrs["value_float"], np.float32)
    elif "value_floats" in attrs:
        st.consts[out] = np.array(attrs["value_floats"], np.float32)
    elif "value_int" in attrs:
        st.consts[out] = np.array(attrs["value_int"], np.int64)
    elif "value_ints" in attrs:
        st.consts[out] = np.array(attrs["value_ints"], np.int64)
    else:
        raise CompileError(
            name,
            node.op_type,
            f"attributes {sorted(attrs)} are not supported",
            "value, value_float(s), value_int(s)",
        )


@handles("ConstantOfShape")
def op_constant_of_shape(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    shape = const(st, node, name, 0, "shape").astype(np.int64).reshape(-1)
    value = attrs_of(node).get("value")
    fill = (
        numpy_helper.to_array(value).reshape(-1) if value is not None else np.zeros(1, np.float32)
    )
    st.consts[node.output[0]] = np.full(tuple(shape), fill[0], dtype=fill.dtype)


@handles("Identity")
def op_identity(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    src, out = node.input[0], node.output[0]
    if src in st.consts:
        st.consts[out] = st.consts[src]
        if src in st.qconst:
            st.qconst[out] = st.qconst[src]
    elif src in st.qview:
        st.alias[out] = st.alias[src]
        st.qview.add(out)
    else:
        x = act(st, node, name, 0)
        emit(st, node, name, "identity", [x], shape_of(st, x))


@handles("Dropout")
def op_dropout(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    if len(node.output) > 1 and node.output[1] and is_read(st, node.output[1]):
        raise CompileError(name, node.op_type, "its mask output is read", "an unused mask")
    if has_input(node, 2):
        training = const(st, node, name, 2, "training_mode")
        if bool(training.reshape(-1)[0]):
            raise CompileError(name, node.op_type, "training_mode=True is not supported")
    op_identity(st, node, name)

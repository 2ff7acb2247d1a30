"""Reading a node's inputs and attributes, and writing its IR node: the helpers every handler
uses (each a function of the import state)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..errors import CompileError
from ..ir import Node, Tensor
from .state import ImportState, QConst, ir_shape

__all__ = [
    "act",
    "attrs_of",
    "channel_axis",
    "const",
    "elem_type",
    "emit",
    "has_input",
    "is_read",
    "lift_1d",
    "need_2d",
    "need_4d",
    "no_extra_outputs",
    "opt_const",
    "per_channel_vector",
    "rank_of",
    "shape_of",
    "take_over",
]

#: IR ops that pass int8 codes through unchanged (same scale and zero point)
_CODE_MOVES = ("maxpool", "flatten", "reshape", "identity", "upsample")


def attrs_of(node: onnx.NodeProto) -> dict[str, Any]:
    out = {}
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        out[a.name] = value.decode() if isinstance(value, bytes) else value
    return out


def has_input(node: onnx.NodeProto, i: int) -> bool:
    return len(node.input) > i and node.input[i] != ""


def act(
    st: ImportState, node: onnx.NodeProto, name: str, i: int, *, int8: bool | None = False
) -> str:
    """IR tensor of activation input ``i``; ``int8``: it must (True), must not (False) or
    may (None) hold int8 codes."""
    op = node.op_type
    if not has_input(node, i):
        raise CompileError(name, op, f"input {i} is missing")
    value = node.input[i]
    if value in st.pending:
        raise CompileError(
            name,
            op,
            f"input '{value}' is an unscaled ConvInteger/MatMulInteger accumulator",
            "ConvInteger/MatMulInteger -> Cast(to=FLOAT) -> Mul(scale)",
        )
    if value in st.consts:
        raise CompileError(name, op, f"input {i} ('{value}') must be an activation, not a constant")
    if value not in st.alias:
        raise CompileError(name, op, f"input '{value}' is not produced by an earlier node")
    if int8 and value not in st.qview:
        raise CompileError(
            name, op, f"input '{value}' must be int8 (from QuantizeLinear or a QLinear op)"
        )
    if int8 is False and value in st.qview:
        raise CompileError(
            name, op, f"input '{value}' holds int8 codes; it needs a DequantizeLinear first"
        )
    return st.alias[value]


def const(st: ImportState, node: onnx.NodeProto, name: str, i: int, what: str) -> np.ndarray:
    if not has_input(node, i):
        raise CompileError(name, node.op_type, f"{what} (input {i}) is missing")
    value = node.input[i]
    if value not in st.consts:
        raise CompileError(
            name, node.op_type, f"{what} '{value}' must be a constant (initializer or Constant)"
        )
    return st.consts[value]


def opt_const(
    st: ImportState, node: onnx.NodeProto, name: str, i: int, what: str
) -> np.ndarray | None:
    return const(st, node, name, i, what) if has_input(node, i) else None


def shape_of(st: ImportState, ir_name: str) -> tuple[int, ...]:
    return st.tensors[ir_name].shape


def rank_of(st: ImportState, value: str) -> int:
    """The ONNX rank of ``value`` (0 if shape inference did not tell)."""
    return len(st.inferred.get(value, ()))


def need_4d(st: ImportState, node: onnx.NodeProto, name: str, x: str) -> tuple[int, ...]:
    shape = shape_of(st, x)
    if len(shape) != 4:
        raise CompileError(
            name, node.op_type, f"input '{x}' has shape {shape}", "4-D input (1, C, H, W)"
        )
    return shape


def need_2d(st: ImportState, node: onnx.NodeProto, name: str, x: str) -> tuple[int, ...]:
    shape = shape_of(st, x)
    if len(shape) != 2:
        raise CompileError(name, node.op_type, f"input '{x}' has shape {shape}", "2-D input (1, K)")
    return shape


def no_extra_outputs(st: ImportState, node: onnx.NodeProto, name: str, what: str) -> None:
    if any(o for o in node.output[1:]):
        raise CompileError(name, node.op_type, f"{what} output is not supported", "1 output")


#: Import ops of one value per channel, folded into the conv or gemm before them.
PER_CHANNEL_OPS = ("bias_add", "batchnorm", "channel_mul")


def channel_axis(st: ImportState, x: str) -> int:
    """3 for a token tensor (made by a MatMul over the last axis, perhaps followed by per-channel
    ops: channels last), else 1."""
    producer = next((n for n in st.nodes if n.output == x), None)
    while producer is not None and producer.op in PER_CHANNEL_OPS:  # a bias, a layer scale
        producer = next((n for n in st.nodes if n.output == producer.inputs[0]), None)
    tokens = producer is not None and producer.op == "matmul" and len(shape_of(st, x)) == 4
    return 3 if tokens else 1


def is_read(st: ImportState, value: str) -> bool:
    """Whether any node or graph output reads ``value``."""
    graph = st.proto.graph
    return any(value in n.input for n in graph.node) or value in {o.name for o in graph.output}


def elem_type(st: ImportState, value: str) -> int:
    """The element type shape inference gave ``value`` (fp32 if it could not tell)."""
    return st.elem_types.get(value) or TensorProto.FLOAT


def emit(
    st: ImportState,
    node: onnx.NodeProto,
    name: str,
    op: str,
    inputs: list[str],
    shape: tuple[int, ...],
    attrs: dict[str, Any] | None = None,
    params: dict[str, np.ndarray] | None = None,
) -> Node:
    out = node.output[0]
    inferred = st.inferred.get(out)
    if inferred is not None and ir_shape(inferred) != shape:
        raise CompileError(
            name,
            node.op_type,
            f"output shape {shape} disagrees with ONNX shape inference {inferred}",
        )
    ir = Node(name, op, inputs, out, attrs or {}, params or {}, [name])
    st.nodes.append(ir)
    st.tensors[out] = Tensor(out, shape)
    st.alias[out] = out
    if op in _CODE_MOVES and node.input[0] in st.qview:
        st.qview.add(out)  # int8 codes in, int8 codes out, same scale
        source = st.tensors[inputs[0]]
        st.tensors[out] = Tensor(out, shape, source.scale, source.zero_point)
        if node.input[0] in st.qdtype:
            st.qdtype[out] = st.qdtype[node.input[0]]
    return ir


def take_over(st: ImportState, ir: Node, node: onnx.NodeProto, name: str, **changes: Any) -> None:
    """The earlier IR node ``ir`` computes ``node``'s output from now on, with ``node`` folded
    into it and ``changes`` to its fields. It is replaced in ``st.nodes`` by a changed copy:
    a handler replaces records rather than change them (see :meth:`ImportState.snapshot`)."""
    out = node.output[0]
    shape = st.tensors.pop(ir.output).shape
    new = dataclasses.replace(ir, output=out, onnx_nodes=[*ir.onnx_nodes, name], **changes)
    st.nodes[next(i for i, n in enumerate(st.nodes) if n is ir)] = new
    st.tensors[out] = Tensor(out, shape)
    st.alias[out] = out


def lift_1d(st: ImportState, node: onnx.NodeProto, weight: int | None = None) -> onnx.NodeProto:
    """A 1-D window op (on (1, C, L) tensors) as the 2-D op of height 1 on the IR's
    (1, C, 1, L): kernel (1, k), stride (1, s), pads (0, begin, 0, end), dilation (1, d);
    a (O, C, k) weight (input ``weight``) becomes the constant (O, C, 1, k)."""
    lifted = onnx.NodeProto()
    lifted.CopyFrom(node)
    del lifted.attribute[:]
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        if a.name in ("kernel_shape", "strides", "dilations", "output_padding"):
            value = [1, *value]
        elif a.name == "pads" and len(value) == 2:
            value = [0, value[0], 0, value[1]]
        lifted.attribute.append(helper.make_attribute(a.name, value))
    if weight is not None and has_input(node, weight) and node.input[weight] in st.consts:
        w = node.input[weight]
        if st.consts[w].ndim == 3:
            lifted.input[weight] = f"{w}#2d"
            st.consts[lifted.input[weight]] = st.consts[w][:, :, None, :]
            q = st.qconst.get(w)
            if q is not None:
                st.qconst[lifted.input[weight]] = QConst(q.q[:, :, None, :], q.scale, q.axis)
    return lifted


def per_channel_vector(c: np.ndarray, shape: tuple[int, ...], axis: int = 1) -> np.ndarray | None:
    """``c`` as one value per channel (``axis``: 1, or 3 for tokens) of a ``shape`` tensor, or
    None if it is not."""
    if c.ndim > len(shape):
        return None
    try:
        full = np.broadcast_to(c, shape)
    except ValueError:
        return None
    index = tuple(slice(None) if i == axis else 0 for i in range(len(shape)))
    vec = np.array(full[index])
    expect = vec.reshape(tuple(-1 if i == axis else 1 for i in range(len(shape))))
    if not np.array_equal(np.broadcast_to(expect, shape), full):
        return None
    return vec


def only_reader(st: ImportState, value: str) -> onnx.NodeProto | None:
    """The one node reading ``value`` (not a graph output), unless it is forced to the
    host: then this half of a view goes there too."""
    readers = [(i, n) for i, n in enumerate(st.proto.graph.node) if value in n.input]
    outputs = {o.name for o in st.proto.graph.output}
    if len(readers) != 1 or value in outputs or readers[0][0] in st.forced:
        return None
    return readers[0][1]

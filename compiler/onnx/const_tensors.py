"""Constant tensors as inputs of the device: a Concat with a constant (a ViT's class token) and
an Add of a constant tensor that is no per-channel bias (position embeddings, BERT's
token-type + position embeddings) read it as an activation - a ``constant`` IR node, whose
int8 codes the back end puts in the DRAM image (:mod:`compiler.passes.allocate`)."""

from __future__ import annotations

import numpy as np
import onnx

from ..errors import CompileError
from ..ir import Node, Tensor
from .read import shape_of
from .state import ImportState, ir_shape
from .token_inputs import token_inputs_of

__all__ = ["constant_input", "full_constant", "refuse_in_input_stage"]


def refuse_in_input_stage(st: ImportState, node: onnx.NodeProto, name: str, value: str) -> None:
    """A text model's embedding sum stays with its embedding lookup on the host: the host's
    input stage (steps that read only the packed token input) must come before the device."""
    if token_inputs_of(st.proto) is not None and any(value in m.node.output for m in st.marks):
        raise CompileError(
            name,
            node.op_type,
            f"adds a constant to '{value}', which the host computes from the token input",
            "constant tensors added on the device, not in the host's input stage",
        )


def constant_input(
    st: ImportState, node: onnx.NodeProto, name: str, value: str, array: np.ndarray
) -> str:
    """A ``constant`` IR node holding ``array`` (float, in its ONNX shape; ONNX's type rules
    make it the activation's float32) for input ``value`` of ``node``: its tensor's name. The
    node is ``node``'s (it goes to the host with it)."""
    if not np.isfinite(array).all():  # a mask of -inf: no int8 codes hold it
        raise CompileError(
            name,
            node.op_type,
            f"constant '{value}' holds values that are not finite",
            "finite constant tensors",
        )
    shape = ir_shape(tuple(int(d) for d in array.shape))
    if len(shape) != 4 or shape[0] != 1:
        raise CompileError(
            name,
            node.op_type,
            f"constant '{value}' of shape {array.shape} is not supported",
            "constants of shape (1, C, H, W) or tokens (1, T, F)",
        )
    out = st.unique(f"{value}#const")
    while out in st.tensors:
        out = st.unique(out)
    st.nodes.append(
        Node(
            out, "constant", [], out, {}, {"value": array.reshape(shape).astype(np.float32)}, [name]
        )
    )
    st.tensors[out] = Tensor(out, shape)
    return out


def full_constant(st: ImportState, node: onnx.NodeProto, name: str, i: int) -> np.ndarray:
    """The constant input of an Add whose input ``i`` is the activation, broadcast to the
    activation's ONNX shape; CompileError if it would broadcast the activation instead."""
    c, x = st.consts[node.input[1 - i]], st.alias[node.input[i]]
    x_shape = st.inferred.get(node.input[i]) or shape_of(st, x)
    try:
        fits = np.broadcast_shapes(c.shape, x_shape) == tuple(x_shape)
    except ValueError:
        fits = False
    if not fits or ir_shape(tuple(x_shape)) != shape_of(st, x):
        raise CompileError(
            name,
            node.op_type,
            f"Add of a constant of shape {c.shape} to {shape_of(st, x)} is not supported",
            "a per-channel bias, or a constant of the activation's shape",
        )
    return np.broadcast_to(c, x_shape)

"""The norm unit's ops: LayerNormalization (opset 17) and onnxruntime's RMSNorm
(SimplifiedLayerNormalization) over the last axis of tokens, and Softmax over the last axis of
attention scores.

A LayerNormalization of a (1, T, F) tensor over its last axis, with constant scale (and
bias), becomes a ``layer_norm`` node (a SimplifiedLayerNormalization an ``rms_norm``, a Softmax
of (1, H, M, N) scores a ``row_softmax``) when the target config has the norm unit (the
import's ``norm_unit``); else, or in any other form, it is refused here and goes to the host.
"""

from __future__ import annotations

import numpy as np
import onnx

from arch.norm_ops import MASKED_BELOW

from ..errors import CompileError
from ..ir_checks import is_tokens
from .norm_pattern import RMS_OP
from .read import act, attrs_of, const, emit, no_extra_outputs, opt_const, shape_of
from .registry import handles
from .state import ImportState
from .token_inputs import TOKENS_INPUT, token_inputs_of

__all__ = ["causal_mask", "op_layer_normalization", "row_softmax"]


@handles("LayerNormalization", RMS_OP)
def op_layer_normalization(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    if not st.norm_unit:
        raise CompileError(name, node.op_type, "the config has no norm unit", "norm_unit=true")
    rms = node.op_type == RMS_OP
    no_extra_outputs(st, node, name, "an InvStdDev" if rms else "a Mean / InvStdDev")
    x = act(st, node, name, 0)
    shape = shape_of(st, x)
    attrs = attrs_of(node)
    axis = int(attrs.get("axis", -1))
    if not is_tokens(shape) or axis not in (-1, 2):
        raise CompileError(
            name,
            node.op_type,
            f"{node.op_type} over axis {axis} of {shape} is not supported",
            "the last axis of tokens (1, T, F)",
        )
    channels = (shape[-1],)
    gamma = const(st, node, name, 1, "scale").astype(np.float32)
    beta = None if rms else opt_const(st, node, name, 2, "bias")
    params = {"gamma": gamma.reshape(-1)}
    if beta is not None:
        params["beta"] = beta.astype(np.float32).reshape(-1)
    if any(np.size(v) != channels[0] for v in params.values()):
        raise CompileError(
            name,
            node.op_type,
            f"scale / bias of shapes {[v.shape for v in params.values()]} over {shape}",
            f"one value per channel ({channels[0]})",
        )
    eps = float(attrs.get("epsilon", 1e-5))
    op = "rms_norm" if rms else "layer_norm"
    emit(st, node, name, op, [x], shape, {"epsilon": eps}, params)


def row_softmax(st: ImportState, node: onnx.NodeProto, name: str) -> bool:
    """A Softmax over the last axis of (1, H, M, N) scores as a ``row_softmax`` (True), when the
    config has the norm unit; False leaves it to the Softmax handler."""
    if not st.norm_unit:
        return False
    x = act(st, node, name, 0)
    shape = shape_of(st, x)
    axis = int(attrs_of(node).get("axis", 1 if st.opset < 13 else -1))
    if len(shape) != 4 or shape[0] != 1 or axis not in (-1, 3):
        return False
    bias = st.softmax_bias.get(node.input[0])
    params = {} if bias is None else {"bias_mask": bias}
    attrs = {"causal": node.input[0] in st.causal}
    mask = st.host_mask.get(node.input[0])
    inputs = [x] if mask is None else [x, mask]
    emit(st, node, name, "row_softmax", inputs, shape, attrs, params)
    return True


def _softmax_reader(st: ImportState, value: str) -> onnx.NodeProto | None:
    """The one node reading ``value``, if it is a Softmax over the last axis the import may
    run (not forced to the host) and ``value`` is no graph output."""
    readers = [(i, n) for i, n in enumerate(st.proto.graph.node) if value in n.input]
    if len(readers) != 1 or value in {o.name for o in st.proto.graph.output}:
        return None
    index, reader = readers[0]
    axis = int(attrs_of(reader).get("axis", 1 if st.opset < 13 else -1))
    if reader.op_type != "Softmax" or index in st.forced or axis not in (-1, 3):
        return None
    return reader


def causal_mask(st: ImportState, node: onnx.NodeProto, name: str) -> bool:
    """An Add of a constant mask to (1, H, M, N) scores that only a Softmax over the last axis
    reads, with the norm unit: the Add becomes nothing - its output an alias of the scores -
    and that Softmax a row_softmax with ``causal`` when the mask is causal (0 at and below the
    diagonal, <= -1e4 or -inf above), else with the constant as its ``bias_mask`` when it is
    the same for every head (NORM's mask lines). False leaves it to the Add handler."""
    consts = [v for v in node.input if v in st.consts]
    if not st.norm_unit or len(node.input) != 2:
        return False
    if not consts:
        return _host_mask(st, node)
    if len(consts) != 1:
        return False
    value = node.input[1] if node.input[0] == consts[0] else node.input[0]
    if value not in st.alias or value in st.qview or _softmax_reader(st, node.output[0]) is None:
        return False
    x = st.alias[value]
    shape = shape_of(st, x)
    mask = st.consts[consts[0]]
    if len(shape) != 4 or mask.ndim > 4 or np.isnan(mask).any():
        return False
    try:
        full = np.broadcast_to(mask, shape)
    except ValueError:
        return False
    if _is_causal(full):
        st.causal = st.causal | {node.output[0]}
    elif np.all(full == full[:, :1]):  # the same bias for every head
        rows = full[0, 0]
        bias = rows[:1] if np.all(rows == rows[:1]) else rows
        st.softmax_bias = st.softmax_bias | {node.output[0]: bias.astype(np.float32)}
    else:
        return False
    st.alias[node.output[0]] = x
    return True


def _host_mask(st: ImportState, node: onnx.NodeProto) -> bool:
    """An Add of (1, H, M, N) scores and a value of (1, 1, M or 1, N) the host computes at the
    graph input from token inputs (the additive mask of an ``attention_mask``: 0, or <= -1e4
    where padded; the run refuses other values: ``arch.ops.host``) - read only by a
    last-axis Softmax: that Softmax becomes a row_softmax reading the mask as its second input
    (at the fixed scale :data:`arch.ops.norm.MASK_INPUT_SCALE`: 0 stays 0, <= -1e4 is -128)."""
    if token_inputs_of(st.proto) is None:
        return False
    host_values = {o for mark in st.marks for o in mark.node.output} & _input_stage(st)
    for scores, mask in (node.input, node.input[::-1]):
        if scores not in st.alias or mask not in host_values or mask not in st.alias:
            continue
        if scores in st.qview or _softmax_reader(st, node.output[0]) is None:
            return False
        x, m = shape_of(st, st.alias[scores]), shape_of(st, st.alias[mask])
        if len(x) == 4 and len(m) == 4 and m[:2] == (1, 1) and m[2] in (1, x[2]) and m[3] == x[3]:
            st.alias[node.output[0]] = st.alias[scores]
            st.host_mask = st.host_mask | {node.output[0]: st.alias[mask]}
            return True
    return False


def _input_stage(st: ImportState) -> set[str]:
    """The values computed from the packed token input and constants alone."""
    known = {TOKENS_INPUT} | set(st.consts)
    for node in st.proto.graph.node:
        if all(i in known for i in node.input if i):
            known.update(o for o in node.output if o)
    return known


def _is_causal(full: np.ndarray) -> bool:
    """0 at and below the diagonal of square scores, <= -1e4 or -inf above."""
    if full.shape[2] != full.shape[3]:
        return False
    above = np.triu(np.ones(full.shape[2:], bool), 1)
    return bool(np.all(full[..., ~above] == 0) and np.all(full[..., above] <= MASKED_BELOW))

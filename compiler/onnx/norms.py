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

from ..errors import CompileError
from ..ir_checks import is_tokens
from .norm_pattern import RMS_OP
from .read import act, attrs_of, const, emit, no_extra_outputs, opt_const, shape_of
from .registry import handles
from .state import ImportState

__all__ = ["op_layer_normalization", "row_softmax"]


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
    emit(st, node, name, "row_softmax", [x], shape)
    return True

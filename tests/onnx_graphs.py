"""Small ONNX graphs for the front-end unit tests, built with onnx.helper."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def make_model(
    nodes: Sequence[onnx.NodeProto],
    x_shape: Sequence[int | str],
    inits: dict[str, Any] | None = None,
    outputs: Sequence[str] = ("y",),
    opset: int = 17,
    x_type: int = F,
) -> onnx.ModelProto:
    """A model with input ``x`` and untyped-shape float outputs."""
    graph = helper.make_graph(
        list(nodes),
        "g",
        [helper.make_tensor_value_info("x", x_type, list(x_shape))],
        [helper.make_tensor_value_info(o, F, None) for o in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)

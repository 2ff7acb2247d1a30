"""ONNX models that keep onnxruntime busy: a Loop of ``trips`` iterations after a Gemm the
accelerator runs, so the Loop becomes a host step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: A trip count no run ends (2^62 iterations).
FOREVER = 1 << 62


def loop_model(trips: int) -> onnx.ModelProto:
    """x (1, 16) -> Gemm (the array) -> Loop of ``trips`` iterations adding 0 (the host)."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["v_in", "zero"], ["v_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1, 8]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1, 8]),
        ],
        [helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0])],
    )
    w = np.random.default_rng(5).standard_normal((8, 16)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Gemm", ["x", "w"], ["a"], transB=1, name="fc"),
            helper.make_node("Loop", ["n", "c", "a"], ["y"], body=body, name="spin"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [
            numpy_helper.from_array(w, "w"),
            helper.make_tensor("n", TensorProto.INT64, [], [trips]),
            helper.make_tensor("c", TensorProto.BOOL, [], [True]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def save_loop_model(trips: int, path: Path) -> Path:
    onnx.save(loop_model(trips), str(path))
    return path

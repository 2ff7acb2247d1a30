"""compiler/shape_inference.py: the same model as onnx's shape inference, the input left as it
was, with a large weight (left out while inference runs) and a small shape constant (read)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from compiler.onnx.shape_inference import LARGE_BYTES, infer_shapes


def model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((300, 300)).astype(np.float32)  # 360 KB: left out
    assert weight.nbytes > LARGE_BYTES
    shape = np.array([1, 3, 100], np.int64)  # read by inference: Reshape's output shape
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["y"]),
            helper.make_node("Relu", ["y"], ["r"]),
            helper.make_node("Reshape", ["r", "shape"], ["out"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 300])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(shape, "shape")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_same_model_as_onnx_and_the_input_untouched() -> None:
    proto = model()
    before = proto.SerializeToString(deterministic=True)
    for strict in (False, True):
        want = onnx.shape_inference.infer_shapes(proto, strict_mode=strict)
        got = infer_shapes(proto, strict_mode=strict)
        assert got.SerializeToString(deterministic=True) == want.SerializeToString(
            deterministic=True
        )
        assert proto.SerializeToString(deterministic=True) == before
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in got.graph.value_info
    }
    assert shapes["r"] == [1, 300]
    assert [d.dim_value for d in got.graph.output[0].type.tensor_type.shape.dim] == [1, 3, 100]

"""A Gather of every element of a flattened tensor, in order (torch.export's ``as_strided``):
a Reshape, so a pooled map's head runs on the device; any other order stays a host step."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from arch.config import PRESETS
from arch.executable import HostStep
from compiler.compile import compile_model
from compiler.onnx.gather_views import gathers_as_reshapes
from compiler.onnx.shape_inference import infer_shapes
from sim.runtime.run import run
from tests.onnx_graphs import make_model

C = 16


def _strided_head(order: np.ndarray) -> onnx.ModelProto:
    """conv -> global average pool -> Reshape to (-1,) -> Gather(order) -> Flatten -> Gemm."""
    rng = np.random.default_rng(7)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["c"], ["mean"], name="pool"),
        helper.make_node("Reshape", ["mean", "flat"], ["v"], name="node_Reshape_28"),
        helper.make_node("Gather", ["v", "order"], ["s"], name="node_as_strided", axis=0),
        helper.make_node("Flatten", ["s"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc", "fb"], ["y"], name="fc", transB=1),
    ]
    inits = {
        "w": rng.normal(0, 0.3, (C, 3, 3, 3)).astype(np.float32),
        "flat": np.array([-1], np.int64),
        "order": order,
        "fc": rng.normal(0, 0.3, (10, C)).astype(np.float32),
        "fb": rng.normal(0, 0.1, 10).astype(np.float32),
    }
    return make_model(nodes, [1, 3, 8, 8], inits)


def _run_ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["y"], {"x": x})[0]


@pytest.mark.parametrize("shape", [(1, C, 1, 1), (1, C), (1, C // 4, 4)])
def test_an_in_order_gather_is_a_reshape_computing_the_same(shape) -> None:
    model = _strided_head(np.arange(C, dtype=np.int64).reshape(shape))
    rewritten = gathers_as_reshapes(
        infer_shapes(onnx.ModelProto.FromString(model.SerializeToString()))
    )
    ops = [n.op_type for n in rewritten.graph.node]
    assert "Gather" not in ops
    # to the pooled map's own shape: no node at all; to another shape: one Reshape for two
    assert ops.count("Reshape") == (0 if shape == (1, C, 1, 1) else 1)
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(_run_ort(rewritten, x), _run_ort(model, x), rtol=1e-6, atol=1e-6)


def test_a_strided_head_runs_on_the_device(tmp_path) -> None:
    """ConvNeXt's dynamo head pattern: no host step (it was a Reshape+Gather host step between
    two device programs), bit-exact."""
    model = _strided_head(np.arange(C, dtype=np.int64).reshape(1, C, 1, 1))
    onnx.save(model, tmp_path / "m.onnx")
    exe = compile_model(tmp_path / "m.onnx", PRESETS["default"]).executable
    assert not [s for s in exe.steps if isinstance(s, HostStep)]
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch


def _swapped() -> np.ndarray:
    order = np.arange(C)
    order[[3, 9]] = order[[9, 3]]
    return order


@pytest.mark.parametrize("order", [np.arange(C)[::-1].copy(), _swapped(), np.arange(C) % 4])
def test_any_other_gather_is_left_to_the_host(order, tmp_path) -> None:
    """Reversed, two swapped, repeated indices: they move data, so the Gather stays, and its host
    step computes what onnxruntime computes (the run stays bit-exact)."""
    model = _strided_head(order.astype(np.int64).reshape(1, -1, 1, 1))
    rewritten = gathers_as_reshapes(
        infer_shapes(onnx.ModelProto.FromString(model.SerializeToString()))
    )
    assert [n.op_type for n in rewritten.graph.node].count("Gather") == 1
    onnx.save(model, tmp_path / "m.onnx")
    exe = compile_model(tmp_path / "m.onnx", PRESETS["default"]).executable
    hosts = [s for s in exe.steps if isinstance(s, HostStep)]
    assert len(hosts) == 1 and "Gather" in hosts[0].reason
    x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    assert run(exe, x, "isa").bit_exact

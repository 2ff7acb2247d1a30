"""A BatchNormalization that folds into no conv or linear layer before it runs on the device as
a depthwise 1x1 conv (weight ``gamma / sqrt(var + eps)``, bias ``beta - mean * k`` per channel):
on a map, and on the (1, C) flatten of a pooled map (LeViT's head: a BatchNorm1d after the
mean, read by two heads). Bit-exact, and the twin agrees with the ONNX BatchNorm."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from arch.config import PRESETS
from arch.executable import HostStep
from compiler.compile import compile_model
from compiler.onnx import load_onnx
from compiler.passes import canonicalize
from sim.runtime.run import run
from tests.onnx_graphs import make_model
from tests.twin_check import assert_twin_agrees

C = 16


def _bn_inits(rng: np.random.Generator, prefix: str) -> dict[str, np.ndarray]:
    return {
        f"{prefix}.gamma": rng.uniform(0.5, 1.5, C).astype(np.float32),
        f"{prefix}.beta": rng.normal(0, 0.5, C).astype(np.float32),
        f"{prefix}.mean": rng.normal(0, 0.5, C).astype(np.float32),
        f"{prefix}.var": rng.uniform(0.2, 2.0, C).astype(np.float32),
    }


def _bn(x: str, y: str, prefix: str) -> onnx.NodeProto:
    names = [x, *(f"{prefix}.{p}" for p in ("gamma", "beta", "mean", "var"))]
    return helper.make_node("BatchNormalization", names, [y], name=prefix, epsilon=1e-3)


def _compiled_run(model: onnx.ModelProto, shape: tuple[int, ...], tmp_path, seed: int):
    onnx.save(model, tmp_path / "m.onnx")
    exe = compile_model(tmp_path / "m.onnx", PRESETS["default"]).executable
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return exe, x, run(exe, x, "isa")


def test_a_batchnorm_after_a_relu_is_a_depthwise_conv(tmp_path) -> None:
    """A BatchNorm after an activation (it cannot fold through the Relu into the conv)."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="c1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        _bn("r", "y", "norm"),
    ]
    inits = {"w1": rng.normal(0, 0.3, (C, 3, 3, 3)).astype(np.float32)} | _bn_inits(rng, "norm")
    model = make_model(nodes, [1, 3, 8, 8], inits)
    norm = canonicalize.run(load_onnx(model)).node("norm")
    assert (norm.op, norm.attrs["group"], norm.params["weight"].shape) == ("conv", C, (C, 1, 1, 1))
    exe, x, result = _compiled_run(model, (1, 3, 8, 8), tmp_path, 2)
    assert not [s for s in exe.steps if isinstance(s, HostStep)]
    assert result.bit_exact, result.first_mismatch
    assert_twin_agrees(model, exe.reference, [x])


def test_batchnorms_after_a_pooled_flatten_read_by_two_heads(tmp_path) -> None:
    """LeViT's head: mean of the map, flatten, then two BatchNorm1d + Linear heads, added."""
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["c"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flat"),
        _bn("f", "n1", "head.bn"),
        _bn("f", "n2", "dist.bn"),
        helper.make_node("Gemm", ["n1", "h1"], ["o1"], name="head", transB=1),
        helper.make_node("Gemm", ["n2", "h2"], ["o2"], name="dist", transB=1),
        helper.make_node("Add", ["o1", "o2"], ["y"], name="sum"),
    ]
    inits = (
        {
            "w": rng.normal(0, 0.3, (C, 3, 3, 3)).astype(np.float32),
            "h1": rng.normal(0, 0.3, (10, C)).astype(np.float32),
            "h2": rng.normal(0, 0.3, (10, C)).astype(np.float32),
        }
        | _bn_inits(rng, "head.bn")
        | _bn_inits(rng, "dist.bn")
    )
    model = make_model(nodes, [1, 3, 8, 8], inits)
    graph = canonicalize.run(load_onnx(model))
    assert [graph.node(n).op for n in ("head.bn", "dist.bn")] == ["conv", "conv"]
    assert "flat" not in [n.name for n in graph.nodes]  # read by nothing else: dropped
    exe, x, result = _compiled_run(model, (1, 3, 8, 8), tmp_path, 4)
    assert not [s for s in exe.steps if isinstance(s, HostStep)]
    assert result.bit_exact, result.first_mismatch
    rows = assert_twin_agrees(model, exe.reference, [x])
    assert {"n1", "n2"} <= {r["tensor"] for r in rows}

"""A sum of two activations divided or multiplied by a positive constant (LeViT's distilled
head: ``(x + x_dist) / 2``) folds into the add's rescale, on the device; a negative or a
per-element constant does not."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from arch.config import PRESETS
from arch.executable import HostStep
from compiler.compile import compile_model
from sim.runtime.run import run
from tests.onnx_graphs import make_model
from tests.twin_check import assert_twin_agrees


def _scaled_sum(op: str, constant: np.ndarray) -> onnx.ModelProto:
    """Two linear heads of the input, added, then ``op`` by ``constant``."""
    rng = np.random.default_rng(int(abs(constant).sum() * 10) + len(op))
    nodes = [
        helper.make_node("Gemm", ["x", "h1"], ["o1"], name="head", transB=1),
        helper.make_node("Gemm", ["x", "h2"], ["o2"], name="dist", transB=1),
        helper.make_node("Add", ["o1", "o2"], ["s"], name="sum"),
        helper.make_node(op, ["s", "c"], ["y"], name="average"),
    ]
    inits = {
        "h1": rng.normal(0, 0.3, (24, 32)).astype(np.float32),
        "h2": rng.normal(0, 0.3, (24, 32)).astype(np.float32),
        "c": constant.astype(np.float32),
    }
    return make_model(nodes, [1, 32], inits)


@pytest.mark.parametrize(("op", "value"), [("Div", 2.0), ("Mul", 0.5), ("Div", 0.3)])
def test_a_scaled_sum_runs_on_the_device(op, value, tmp_path) -> None:
    model = _scaled_sum(op, np.array(value))
    onnx.save(model, tmp_path / "m.onnx")
    exe = compile_model(tmp_path / "m.onnx", PRESETS["default"]).executable
    assert not [s for s in exe.steps if isinstance(s, HostStep)]
    x = np.random.default_rng(5).standard_normal((1, 32)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert [la.op for la in result.layers][-1] == "add"
    rows = assert_twin_agrees(model, exe.reference, [x])
    assert "y" in {r["tensor"] for r in rows}


@pytest.mark.parametrize("constant", [np.array(-2.0), np.linspace(1, 2, 24)])
def test_a_negative_or_per_element_divisor_stays_on_the_host(constant, tmp_path) -> None:
    model = _scaled_sum("Div", constant)
    onnx.save(model, tmp_path / "m.onnx")
    exe = compile_model(tmp_path / "m.onnx", PRESETS["default"]).executable
    [host] = [s for s in exe.steps if isinstance(s, HostStep)]
    assert "Div is supported as the scale of a MatMul or an Add of two activations" in host.reason
    x = np.random.default_rng(6).standard_normal((1, 32)).astype(np.float32)
    assert run(exe, x, "isa").bit_exact

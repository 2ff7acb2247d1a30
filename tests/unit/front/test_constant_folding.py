"""Constant folding: every node whose inputs are all constants is computed at compile time, even
one ONNX's reference evaluator refuses (BERT's ``inputs_embeds`` form: a GatherElements on axis
-1, whose host step had 0 inputs); one that cannot be computed is refused by name."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from arch.config import PRESETS
from compiler.compile import compile_model
from compiler.errors import CompileError
from compiler.onnx import host_models
from compiler.onnx.importer import load_onnx
from sim.quality.accuracy import compare_fp32
from sim.runtime.run import run
from tests.onnx_graphs import make_model

TINY = PRESETS["tiny"]


def _gather_elements_model(index: np.ndarray) -> onnx.ModelProto:
    """A constant GatherElements (axis -1) whose output a host Add reads after a device MatMul:
    folded, there is no host step at all but the Add; unfolded, it is a host step of no input."""
    rng = np.random.default_rng(41)
    nodes = [
        helper.make_node("GatherElements", ["d", "i"], ["g"], name="node_gather", axis=-1),
        helper.make_node("MatMul", ["x", "w"], ["m"], name="fc"),
        helper.make_node("Add", ["m", "g"], ["a"], name="add"),
        helper.make_node("Tanh", ["a"], ["y"], name="tanh"),
    ]
    inits = {
        "d": rng.normal(0, 1, (1, 32)).astype(np.float32),
        "i": index,
        "w": rng.normal(0, 0.3, (16, 8)).astype(np.float32),
    }
    return make_model(nodes, [1, 4, 16], inits)


def test_fold_falls_back_to_onnxruntime() -> None:
    """The reference evaluator refuses GatherElements(axis=-1) with a smaller index; onnxruntime
    computes it, and the result is numpy's take_along_axis."""
    rng = np.random.default_rng(42)
    data, index = rng.normal(0, 1, (1, 32)).astype(np.float32), rng.integers(0, 32, (1, 8))
    opset = [helper.make_opsetid("", 17)]
    source = helper.make_model(helper.make_graph([], "g", [], []), opset_imports=opset)
    node = helper.make_node("GatherElements", ["d", "i"], ["o"], axis=-1)
    out = host_models.fold_constants(source, node, {"d": data, "i": index})["o"]
    np.testing.assert_array_equal(out, np.take_along_axis(data, index, axis=-1))


def test_constant_gather_elements_is_folded_and_runs_bit_exact(tmp_path) -> None:
    index = np.random.default_rng(43).integers(0, 32, (1, 8))
    path = tmp_path / "m.onnx"
    onnx.save(_gather_elements_model(index), str(path))
    graph = load_onnx(path)
    assert all("node_gather" not in n.onnx_nodes for n in graph.nodes)
    compiled = compile_model(path, TINY)
    x = np.random.default_rng(44).standard_normal((1, 4, 16)).astype(np.float32)
    result = run(compiled.executable, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert compare_fp32(compiled.source, compiled.executable.reference, x)["cosine_vs_fp32"] > 0.99


def test_constant_node_that_cannot_be_computed_is_named() -> None:
    index = np.array([[0, 1, 2, 3, 40, 5, 6, 7]])  # 40 is out of range: neither can compute it
    with pytest.raises(CompileError) as err:
        load_onnx(_gather_elements_model(index))
    text = str(err.value)
    assert "'node_gather' (GatherElements): its inputs are all constants" in text
    assert "Out of range value in index tensor" in text
    assert "has 0 inputs" not in text

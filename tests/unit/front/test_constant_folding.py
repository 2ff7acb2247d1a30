"""Constant folding: every node whose inputs are all constants is computed at compile time, even
one ONNX's reference evaluator refuses (BERT's ``inputs_embeds`` form: a GatherElements on axis
-1, whose host step had 0 inputs); one that cannot be computed is refused by name. Never folded:
Quantize/DequantizeLinear - a refused quantized weight goes to the host, not to float."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from arch.config import PRESETS
from arch.executable import HostStep
from arch.host_runtime import HostModelError
from compiler.compile import compile_model
from compiler.errors import CompileError
from compiler.onnx import host_models
from compiler.onnx.const_fold import fold_constant_nodes
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


def _uint8_weight_model(opset: int) -> onnx.ModelProto:
    """x -> QDQ -> MatMul(DequantizeLinear(uint8 weight, zero point 70)) -> QDQ -> MatMul(int8
    weight) -> QDQ -> y: the first weight's codes minus the zero point span beyond int8, so the
    importer must see its DQ (and refuse it); the second layer runs on the device."""
    rng = np.random.default_rng(45)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"], name="qx"),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"], name="dqx"),
        helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["w"], name="dqw"),
        helper.make_node("MatMul", ["xd", "w"], ["m"], name="fc"),
        helper.make_node("QuantizeLinear", ["m", "sm", "zm"], ["mq"], name="qm"),
        helper.make_node("DequantizeLinear", ["mq", "sm", "zm"], ["md"], name="dqm"),
        helper.make_node("DequantizeLinear", ["vq", "sv"], ["v"], name="dqv"),
        helper.make_node("MatMul", ["md", "v"], ["o"], name="fc2"),
        helper.make_node("QuantizeLinear", ["o", "so", "zo"], ["oq"], name="qo"),
        helper.make_node("DequantizeLinear", ["oq", "so", "zo"], ["y"], name="dqo"),
    ]
    inits = {
        "sx": np.float32(0.03),
        "zx": np.uint8(128),
        "wq": rng.integers(0, 256, (16, 8)).astype(np.uint8),
        "sw": np.float32(0.01),
        "zw": np.uint8(70),
        "sm": np.float32(0.05),
        "zm": np.uint8(128),
        "vq": rng.integers(-128, 128, (8, 8)).astype(np.int8),
        "sv": np.float32(0.02),
        "so": np.float32(0.1),
        "zo": np.uint8(128),
    }
    return make_model(nodes, [1, 4, 16], inits, opset=opset)


def test_quantize_nodes_are_never_folded() -> None:
    """A DequantizeLinear of a constant weight stays a node: the importer reads its codes."""
    model = _uint8_weight_model(19)
    consts = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    with pytest.raises(HostModelError, match="DequantizeLinear is never folded"):
        host_models.fold_constants(model, model.graph.node[2], consts)
    folded = fold_constant_nodes(model)
    assert [n.name for n in folded.graph.node] == [n.name for n in model.graph.node]


@pytest.mark.parametrize("opset", [13, 19])  # 13: onnxruntime could fold it, 19: the evaluator
def test_refused_quantized_weight_goes_to_the_host_not_folded(opset, tmp_path) -> None:
    """A weight of uint8 codes beyond int8 after its zero point cannot be held by the array: its
    layer runs on the host, with the reason, rather than being folded to float and requantized."""
    model = _uint8_weight_model(opset)
    centred = onnx.numpy_helper.to_array(model.graph.initializer[2]).astype(int) - 70
    assert centred.max() > 127  # beyond int8, as the test needs
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    exe = compile_model(path, TINY).executable
    hosts = [s for s in exe.steps if isinstance(s, HostStep)]
    span = f"span {centred.min()}..{centred.max()}, beyond int8"
    assert len(hosts) == 1 and span in hosts[0].reason, hosts
    x = np.random.default_rng(46).standard_normal((1, 4, 16)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch

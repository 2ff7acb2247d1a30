"""The fake-quantized twin (``sim/quality/twin.py``): the integer reference of float models
against onnxruntime running the *original* ONNX model with QuantizeLinear/DequantizeLinear at
every device tensor - per layer, host steps included - and ``compare_fp32`` on every output."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from arch.config import PRESETS
from arch.reference import evaluate, quantize_input
from compiler.compile import compile_model
from sim.quality.accuracy import compare_fp32
from sim.quality.twin import TIE_BAND, check_rule, twin_agreement
from tests.twin_check import assert_twin_agrees, assert_within_rule

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "torch"


def _inputs(model: onnx.ModelProto, seeds: tuple[int, ...]) -> list[np.ndarray]:
    shape = [d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim]
    return [np.random.default_rng(s).standard_normal(shape).astype(np.float32) for s in seeds]


def test_check_rule_by_hand() -> None:
    """1 off is by design only near a tie; after a second rounding, up to its step anywhere."""
    device = np.array([3, 4, 4, 5, -128], np.int8)
    twin = np.array([3, 3, 3, 3, -128], np.int8)
    unrounded = np.array([3.1, 3.5 - TIE_BAND / 2, 3.2, 3.5, -140.0])
    assert check_rule(device, twin, unrounded).tolist() == [
        False,
        False,
        True,  # 1 off, 0.3 from the tie
        True,  # 2 off
        False,
    ]
    assert check_rule(device, twin, unrounded, 1).tolist() == [False, False, False, True, False]
    assert not check_rule(device, twin, unrounded, 2).any()


@pytest.mark.parametrize(
    "model",
    [
        "cnn",  # measured 0.99976 equal
        "encoder_default.onnx",  # 1.0, GELU's table 0.856; LayerNorm on the host
        "mixed_torch.onnx",  # 0.99991
        "unet",  # 0.99971; ConvTranspose as a 1x1 conv and a depth_to_space
    ],
)
def test_twin_agrees_with_the_device(model: str) -> None:
    path = model if model in ("cnn", "unet") else str(FIXTURES / model)
    size = 16 if model == "unet" else None
    compiled = compile_model(path, PRESETS["default"], image_size=size)
    source = compiled.source
    assert source is not None
    graph = compiled.executable.reference
    rows = assert_twin_agrees(source, graph, _inputs(source, (7, 8)))
    compared = {r["tensor"] for r in rows}
    if model == "encoder_default.onnx":  # host steps (LayerNorm) against the original nodes
        hosts = {n.output for n in compiled.executable.reference.nodes if n.op == "host"}
        assert hosts and hosts <= compared, (hosts, compared)


def test_twin_catches_a_softmax_temperature_of_one_over_d() -> None:
    """The scores' scale folded as 1/d instead of 1/sqrt(d): the product q @ k^T is off by
    far more than the rule allows (its cosine against fp32 stays above 0.998)."""
    compiled = compile_model(str(FIXTURES / "encoder_default.onnx"), PRESETS["default"])
    graph = compiled.executable.reference
    source = compiled.source
    assert source is not None
    scores = next(n for n in graph.nodes if n.op == "batch_matmul")
    head = graph.tensors[scores.inputs[0]].shape[-1]
    mult = np.rint(scores.params["mult"] / np.sqrt(head)).astype(np.int64)
    wrong = dataclasses.replace(scores, params={**scores.params, "mult": mult})
    graph.nodes[graph.nodes.index(scores)] = wrong
    rows = twin_agreement(source, graph, _inputs(source, (7,)))
    row = next(r for r in rows if r["tensor"] == scores.output)
    assert row["max_code_diff"] > 1 and row["outside_rule"] > 0, row


def test_twin_catches_a_wrong_host_step() -> None:
    """A host step whose model computes something else than the original nodes (its output
    doubled): the reference and the run would both agree with it; the twin does not."""
    compiled = compile_model(str(FIXTURES / "encoder_default.onnx"), PRESETS["default"])
    graph = compiled.executable.reference
    source = compiled.source
    assert source is not None
    host = next(n for n in graph.nodes if n.op == "host")
    model = onnx.ModelProto.FromString(host.params["model"].tobytes())
    fetch = host.attrs["fetch"]
    for node in model.graph.node:
        node.output[:] = [f"{o}#raw" if o == fetch else o for o in node.output]
        node.input[:] = [f"{i}#raw" if i == fetch else i for i in node.input]
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two#twin_test")
    model.graph.initializer.append(two)
    model.graph.node.append(helper.make_node("Mul", [f"{fetch}#raw", two.name], [fetch]))
    params = {**host.params, "model": np.frombuffer(model.SerializeToString(), np.uint8)}
    graph.nodes[graph.nodes.index(host)] = dataclasses.replace(host, params=params)
    rows = twin_agreement(source, graph, _inputs(source, (7,)))
    row = next(r for r in rows if r["tensor"] == host.output)
    assert row["outside_rule"] > 0, row


def _two_outputs() -> onnx.ModelProto:
    rng = np.random.default_rng(11)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["a"]),
        helper.make_node("Conv", ["a", "w2"], ["b"], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes,
        "two_outputs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 8, 8, 8]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 8, 8, 8]),
        ],
        [w1, w2],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_compare_fp32_compares_every_output(tmp_path) -> None:
    path = tmp_path / "two.onnx"
    onnx.save(_two_outputs(), path)
    compiled = compile_model(path, PRESETS["tiny"])
    graph = compiled.executable.reference
    assert graph.outputs == ["a", "b"]
    x = _inputs(compiled.source, (3,))[0]
    measured = compare_fp32(compiled.source, graph, x)
    assert [o["tensor"] for o in measured["outputs"]] == ["a", "b"]
    assert all(o["cosine_vs_fp32"] > 0.99 for o in measured["outputs"]), measured
    # the second output wrong (its codes reversed): the result says so
    t = graph.tensors["x"]
    known = dict(evaluate(graph, quantize_input(x, t.scale or 1.0)))
    known["b"] = known["b"][..., ::-1].copy()
    broken = compare_fp32(compiled.source, graph, x, known)
    assert broken["tensor"] == "b" and broken["cosine_vs_fp32"] < 0.9, broken
    assert broken["outputs"][0]["cosine_vs_fp32"] == measured["outputs"][0]["cosine_vs_fp32"]
    rows = twin_agreement(compiled.source, graph, [x])
    assert {r["tensor"] for r in rows} >= {"a", "b"}
    assert_within_rule(rows)


def test_chained_twin_drifts_from_the_first_layer_on() -> None:
    """``isolated=False``: the twin's own codes flow on, so the graph input and the first
    layer agree as in the isolated twin, and later layers pick up earlier differences (cnn:
    measured 0.9978 equal, at most 1 code apart)."""
    compiled = compile_model("cnn", PRESETS["default"])
    graph, source = compiled.executable.reference, compiled.source
    assert source is not None
    xs = _inputs(source, (7, 8))
    isolated = twin_agreement(source, graph, xs)
    chained = twin_agreement(source, graph, xs, isolated=False)
    assert [r["tensor"] for r in chained] == [r["tensor"] for r in isolated]
    assert chained[:2] == isolated[:2]
    assert all(r["max_code_diff"] <= 1 for r in chained), chained
    count = sum(r["count"] for r in chained)
    assert sum(r["equal"] * r["count"] for r in chained) / count >= 0.995, chained


def test_a_mask_cast_to_bool_is_not_compared_and_the_twin_runs() -> None:
    """The TorchScript BERT casts its attention mask to bool, a tensor the device holds as
    int8 codes: the twin gives it no QuantizeLinear (onnxruntime refused the model) and
    compares every float tensor within the rule."""
    from compiler.onnx.token_inputs import token_inputs_of
    from sim.runtime.inputs import check_input

    path = FIXTURES.parent / "hf" / "hf_bert_small_ts.onnx"
    compiled = compile_model(path, PRESETS["tiny"])
    assert compiled.source is not None
    spec = token_inputs_of(compiled.source)
    assert spec is not None
    x = check_input(spec.default(5)[0], compiled.executable.input.shape)
    rows = twin_agreement(compiled.source, compiled.executable.reference, [x])
    cast = "/model/bert/Cast_output_0"
    assert cast in compiled.executable.reference.tensors  # the device does hold it
    assert cast not in {r["tensor"] for r in rows}
    assert len(rows) > 10
    assert_within_rule(rows, least_equal=0.99)

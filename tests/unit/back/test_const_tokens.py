"""Constant tensors on the device (issue 39 item 2): a Concat with a constant (a ViT's class
token) and an Add of a constant tensor (position embeddings) as device ops whose constant is a
region of the DRAM image - on the ISA simulator bit-exact against the integer reference, close
to onnxruntime's fp32, with no host step; the constant's scale from its own values."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from arch import executable
from arch.config import PRESETS
from arch.executable.format import HostStep
from compiler.compile import compile_model
from compiler.frontend import compile_front
from compiler.onnx import load_onnx
from compiler.onnx.class_token import fold_class_tokens
from compiler.onnx.prepare import prepare
from sim.quality.accuracy import compare_fp32
from sim.runtime.run import run
from tests import token_graphs
from tests.onnx_graphs import make_model
from zoo.transformers import bert, vit


def _compile(model: onnx.ModelProto, config, tmp_path, **kwargs):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    return compile_model(path, config, **kwargs).executable


def _input(model: onnx.ModelProto, seed: int) -> np.ndarray:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _check_on_isa(exe, model: onnx.ModelProto, seed: int, cosine: float = 0.995) -> None:
    """Bit-exact on the ISA simulator, one device program, no host step, close to fp32."""
    x = _input(model, seed)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert len(exe.programs) == 1
    assert not [s.name for s in exe.steps if isinstance(s, HostStep)]
    assert compare_fp32(model, exe.reference, x)["cosine_vs_fp32"] > cosine


def _constants(exe) -> dict[str, object]:
    return {n.name: n for n in exe.reference.nodes if n.op == "constant"}


def _inits(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}


@pytest.mark.parametrize("config", ["default", "tiny"])
def test_class_token_and_position_add_run_on_the_device(config, tmp_path):
    """timm's ViT stem: Conv, tokens, Concat(cls, tokens), Add(pos): one program. The class
    token's codes are cls + pos[0] in fp32 rounded once at the Concat's scale (as the host
    rounded them), the patch tokens' positions a constant of their own."""
    model = token_graphs.timm_vit_block(seed=1)
    exe = _compile(model, PRESETS[config], tmp_path)
    _check_on_isa(exe, model, 2)
    inits = _inits(model)
    consts = _constants(exe)
    assert sorted(consts) == ["cls+pos#const", "pos.1#const"]
    token0 = consts["cls+pos#const"]
    (concat,) = [n for n in exe.reference.nodes if n.op == "concat"]
    assert concat.inputs[0] == token0.output and concat.output == "x0"
    scale = exe.reference.tensors["x0"].scale
    expected = (inits["cls"] + inits["pos"][:, :1]).reshape(-1)
    got = token0.params["value"].reshape(-1).astype(np.float64) * scale
    assert np.abs(got - expected).max() <= scale / 2 + 1e-6
    positions = consts["pos.1#const"]
    s_pos = exe.reference.tensors[positions.output].scale
    assert s_pos == pytest.approx(np.abs(inits["pos"][:, 1:]).max() / 127, rel=1e-6)


def test_the_class_token_rewrite_computes_what_onnxruntime_computes():
    """Concat(c, x) + p and Concat(c + p[:1], x + p[1:]) on onnxruntime, on random input."""
    model = token_graphs.timm_vit_block(seed=3)
    rewritten = prepare(onnx.load_from_string(model.SerializeToString())).proto
    ops = [n.op_type for n in rewritten.graph.node]
    assert ops.index("Concat") > ops.index("Add")  # the Add now before the Concat
    x = _input(model, 4)
    outputs = [
        ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
        for m in (model, rewritten)
    ]
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-5, atol=1e-5)
    unchanged = token_graphs.map_token_round_trip(seed=1)  # no Concat: nothing to rewrite
    assert fold_class_tokens(unchanged) is unchanged


def _bert_embeddings(tokens: int, dim: int, seed: int) -> onnx.ModelProto:
    """BERT's embeddings as the zoo writes them: x + positions (1, T, F), then a linear
    layer and a residual."""
    rng = np.random.default_rng(seed)
    inits = {
        "pos": rng.normal(0, 0.2, (1, tokens, dim)).astype(np.float32),
        "w": rng.normal(0, 1 / np.sqrt(dim), (dim, dim)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Add", ["x", "pos"], ["e"], name="embeddings.add"),
        helper.make_node("MatMul", ["e", "w"], ["h"], name="fc"),
        helper.make_node("Relu", ["h"], ["r"], name="act"),
        helper.make_node("Add", ["e", "r"], ["y"], name="residual"),
    ]
    return make_model(nodes, [1, tokens, dim], inits)


@pytest.mark.parametrize(("config", "tokens", "dim"), [("default", 12, 40), ("tiny", 7, 12)])
def test_position_add_to_the_input_runs_on_the_device(config, tokens, dim, tmp_path):
    """x + positions of the input's shape (BERT): an add of the input and a constant whose
    scale is max|positions| / 127, whatever the calibration inputs."""
    model = _bert_embeddings(tokens, dim, 5)
    exe = _compile(model, PRESETS[config], tmp_path)
    _check_on_isa(exe, model, 6)
    (pos,) = _constants(exe).values()
    add = exe.reference.producer("e")
    assert add is not None and add.op == "add" and add.inputs == ["x", pos.output]
    expected = np.abs(_inits(model)["pos"]).max() / 127
    assert exe.reference.tensors[pos.output].scale == pytest.approx(expected, rel=1e-6)
    other = [np.full((1, tokens, dim), 3.0, np.float32) * _input(model, 9)]
    graph = compile_front(model, calibration=other)
    assert graph.tensors[pos.output].scale == pytest.approx(expected, rel=1e-6)


def test_the_calibration_method_chooses_the_constant_range():
    """percentile:50 over the constant's own values: its threshold is their median |x| (within
    one histogram bin), not their max."""
    model = _bert_embeddings(16, 32, 7)
    pos = np.abs(_inits(model)["pos"])
    graph = compile_front(model, calib_method="percentile:50")
    (node,) = [n for n in graph.nodes if n.op == "constant"]
    threshold = graph.tensors[node.output].scale * 127
    assert abs(threshold - np.median(pos)) <= pos.max() / 2048 + 1e-6


def test_constant_maps_in_a_cnn(tmp_path):
    """Channels-last constants: an Add of a (1, 1, H, W) constant (broadcast over channels,
    no per-channel bias) and a Concat of a constant map along channels, on the 4x4 array."""
    rng = np.random.default_rng(8)
    inits = {
        "w1": rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32),
        "bias_map": rng.normal(0, 0.5, (1, 1, 6, 6)).astype(np.float32),
        "prior": rng.normal(0, 0.5, (1, 4, 6, 6)).astype(np.float32),
        "w2": rng.normal(0, 0.3, (8, 12, 1, 1)).astype(np.float32),
    }
    node = helper.make_node
    nodes = [
        node("Conv", ["x", "w1"], ["c"], name="c1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        node("Add", ["c", "bias_map"], ["a"], name="map_add"),
        node("Relu", ["a"], ["r"], name="act"),
        node("Concat", ["r", "prior"], ["cat"], name="cat", axis=1),
        node("Conv", ["cat", "w2"], ["y"], name="c2", kernel_shape=[1, 1]),
    ]
    model = make_model(nodes, [1, 3, 6, 6], inits)
    exe = _compile(model, PRESETS["tiny"], tmp_path)
    _check_on_isa(exe, model, 9)
    assert len(_constants(exe)) == 2


def test_an_add_that_would_broadcast_the_activation_goes_to_the_host():
    """x (1, 1, F) + c (1, 4, F) broadcasts x: the host runs it, saying why."""
    rng = np.random.default_rng(10)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
        helper.make_node("Add", ["h", "c"], ["y"], name="wide_add"),
    ]
    inits = {
        "w": rng.normal(0, 0.3, (16, 16)).astype(np.float32),
        "c": rng.normal(0, 0.3, (1, 4, 16)).astype(np.float32),
    }
    graph = load_onnx(make_model(nodes, [1, 1, 16], inits))
    assert graph.host_reasons["wide_add"] == (
        "wide_add (Add): Add of a constant of shape (1, 4, 16) to (1, 1, 1, 16) is not "
        "supported (supported: a per-channel bias, or a constant of the activation's shape)"
    )


def test_a_vector_concat_with_a_constant_goes_to_the_host():
    """A Concat of (1, F) vectors with a constant: no layout holds it; the host, naming why."""
    rng = np.random.default_rng(11)
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["h"], name="fc", transB=1),
        helper.make_node("Concat", ["h", "c"], ["y"], name="vec_cat", axis=1),
    ]
    inits = {
        "w": rng.normal(0, 0.3, (8, 8)).astype(np.float32),
        "b": rng.normal(0, 0.1, 8).astype(np.float32),
        "c": rng.normal(0, 0.3, (1, 4)).astype(np.float32),
    }
    graph = load_onnx(make_model(nodes, [1, 8], inits))
    assert graph.host_reasons["vec_cat"] == (
        "vec_cat (Concat): constant 'c' of shape (1, 4) is not supported (supported: constants "
        "of shape (1, C, H, W) or tokens (1, T, F))"
    )


def test_a_class_token_before_merged_heads_goes_to_the_host(tmp_path):
    """Attention's merged heads are a view of the heads the product wrote, not tokens of their
    own: a Concat of a class token with them goes to the host, naming why, bit-exact."""
    rng = np.random.default_rng(12)
    node = helper.make_node
    nodes = [
        node("MatMul", ["x", "wq"], ["q"], name="q"),
        node("MatMul", ["x", "wv"], ["v"], name="v"),
        node("Reshape", ["q", "split"], ["qr"], name="q.split"),
        node("Transpose", ["qr"], ["qh"], name="q.heads", perm=[0, 2, 1, 3]),
        node("Reshape", ["v", "split"], ["vr"], name="v.split"),
        node("Transpose", ["vr"], ["vh"], name="v.heads", perm=[0, 2, 3, 1]),
        node("MatMul", ["qh", "vh"], ["s"], name="qv"),
        node("Transpose", ["s"], ["st"], name="merge", perm=[0, 2, 1, 3]),
        node("Reshape", ["st", "flat"], ["m"], name="merge.reshape"),
        node("Concat", ["cls", "m"], ["c"], name="cls_cat", axis=1),
        node("MatMul", ["c", "wo"], ["y"], name="out"),
    ]
    inits = {
        "wq": rng.normal(0, 0.2, (32, 32)).astype(np.float32),
        "wv": rng.normal(0, 0.2, (32, 32)).astype(np.float32),
        "split": np.array([1, 16, 2, 16], np.int64),
        "flat": np.array([1, 16, 32], np.int64),
        "cls": rng.normal(0, 0.5, (1, 1, 32)).astype(np.float32),
        "wo": rng.normal(0, 0.2, (32, 32)).astype(np.float32),
    }
    model = make_model(nodes, [1, 16, 32], inits)
    exe = _compile(model, PRESETS["default"], tmp_path)
    result = run(exe, _input(model, 13), "isa")
    assert result.bit_exact, result.first_mismatch
    reasons = " ".join(s.reason for s in exe.steps if isinstance(s, HostStep))
    assert (
        "cls_cat (Concat): input 'm' is not the whole bytes of a tensor of 32 channels per "
        "token (supported: inputs that own their tokens (or view a whole map's pixels))"
    ) in reasons, reasons


def test_a_saved_executable_with_constants_runs_the_same(tmp_path):
    """Saved (format 7) and loaded: the constants' reference nodes and image bytes come back,
    and the loaded executable runs bit-exact with the same outputs."""
    model = token_graphs.timm_vit_block(seed=2)
    exe = _compile(model, PRESETS["default"], tmp_path)
    loaded = executable.load(executable.save(exe, tmp_path / "vit.cosim"))
    assert sorted(_constants(loaded)) == sorted(_constants(exe))
    np.testing.assert_array_equal(loaded.programs[0].image, exe.programs[0].image)
    x = _input(model, 14)
    a, b = run(exe, x, "isa"), run(loaded, x, "isa")
    assert b.bit_exact, b.first_mismatch
    for name, value in a.outputs.items():
        np.testing.assert_array_equal(b.outputs[name], value)


@pytest.mark.parametrize("model", ["vit", "bert"])
def test_zoo_transformers_with_the_norm_unit_are_one_program(model, tmp_path):
    """The zoo vit (64x64) and bert (32 tokens) with the norm unit: one device program, no host
    step, bit-exact, cosine vs fp32 > 0.99."""
    config = dataclasses.replace(PRESETS["default"], norm_unit=True)
    proto = vit(image_size=64, layers=2) if model == "vit" else bert(tokens=32, layers=2)
    exe = _compile(proto, config, tmp_path)
    _check_on_isa(exe, proto, 15, cosine=0.99)


def test_a_text_models_embedding_sum_stays_in_the_hosts_input_stage():
    """Hugging Face BERT (ids + mask): the position and token-type embeddings are added to the
    host's embedding lookup, so those Adds join the host's input stage (which must come before
    the device), naming why."""
    from tests.fixtures.hf.survey import HERE

    graph = load_onnx(HERE / "hf_bert_small_ts.onnx")
    reasons = " ".join(graph.host_reasons.values())
    assert (
        "/model/bert/embeddings/Add (Add): adds a constant to "
        "'/model/bert/embeddings/word_embeddings/Gather_output_0', which the host computes "
        "from the token input (supported: constant tensors added on the device, not in the "
        "host's input stage)"
    ) in reasons

"""Additive masks on the norm unit's Softmax (configs with norm_unit): torch's exported encoder
layer with its causal mask swapped for other constants - a bias per query row, one padding row
shared by every row - runs as row_softmax with NORM's mask lines, bit-exact on the ISA
simulator against the reference and close to onnxruntime's fp32; a bias beyond +-127 score
codes keeps the Softmax on the host. Hugging Face BERT/DistilBERT's ``attention_mask``: the
mask the input stage computes is row_softmax's second input, padded positions exactly 0."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from arch import norm_ops
from arch.config import PRESETS
from arch.host_runtime import HostMaskNotBinary
from arch.ops import OP_SPECS
from arch.reference import evaluate
from compiler.compile import compile_model
from compiler.errors import Unplaceable
from compiler.onnx.token_inputs import token_inputs_of
from compiler.quantizers import mask_codes
from sim.app.cli import exit_code
from sim.runtime.run import run
from tests.fixtures.hf.survey import HERE, survey_one

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "torch" / "encoder_causal.onnx"
MASK = "val_71"  # the fixture's (20, 20) causal mask, added to the scores
TOKENS, WIDTH = 20, 64


def _masked_model(mask: np.ndarray, tmp_path: Path) -> tuple[onnx.ModelProto, Path]:
    model = onnx.load(FIXTURE)
    (init,) = [i for i in model.graph.initializer if i.name == MASK]
    init.CopyFrom(numpy_helper.from_array(mask.astype(np.float32), MASK))
    path = tmp_path / "masked.onnx"
    onnx.save(model, path)
    return model, path


def _bias(kind: str) -> np.ndarray:
    rng = np.random.default_rng(11)
    if kind == "per_row":  # a random bias, a few positions masked in each row
        bias = 0.5 * rng.standard_normal((TOKENS, TOKENS))
        bias[rng.random((TOKENS, TOKENS)) < 0.2] = -np.inf
        return bias
    row = np.zeros((1, TOKENS))  # padding: the last 6 positions masked as HF writes it
    row[0, -6:] = np.finfo(np.float32).min
    return row


def _fp32(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize(
    ("kind", "config"), [("per_row", "default"), ("shared", "default"), ("per_row", "tiny")]
)
def test_constant_mask_on_the_norm_unit(kind, config, tmp_path):
    """No host step; the mask is row_softmax's int8 codes (masked: -128); bit-exact; cosine."""
    bias = _bias(kind)
    model, path = _masked_model(bias, tmp_path)
    accel = dataclasses.replace(PRESETS[config], norm_unit=True)
    if config == "tiny":  # 1 KiB of ACT: query rows in more than one tile, mask lines beside
        accel = dataclasses.replace(accel, act_kib=1)
    exe = compile_model(path, accel).executable
    (node,) = [n for n in exe.reference.nodes if n.op == "row_softmax"]
    assert not node.attrs["causal"]
    assert node.params["mask"].shape == bias.shape
    assert np.array_equal(node.params["mask"] == -128, bias <= norm_ops.MASKED_BELOW)
    x = np.random.default_rng(0).standard_normal((1, TOKENS, WIDTH)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert [la.op for la in result.layers if la.device == "host"] == []
    name = model.graph.output[0].name
    assert _cosine(result.outputs[name], _fp32(model, x)) > 0.999


def test_without_the_mask_lines_the_result_differs(tmp_path):
    """The mask matters: the same codes without it give another output (the test can fail)."""
    _, path = _masked_model(_bias("per_row"), tmp_path)
    accel = dataclasses.replace(PRESETS["default"], norm_unit=True)
    exe = compile_model(path, accel).executable
    x = np.random.default_rng(0).standard_normal((1, TOKENS, WIDTH)).astype(np.float32)
    masked = run(exe, x, "isa").outputs
    _, plain = _masked_model(np.zeros((TOKENS, TOKENS)), tmp_path)
    unmasked = run(compile_model(plain, accel).executable, x, "isa").outputs
    assert not np.array_equal(next(iter(masked.values())), next(iter(unmasked.values())))


def test_masked_positions_are_exactly_zero_and_the_rest_near_fp32():
    """The reference with mask codes: masked positions 0, a fully masked row all 0, the others
    within one code (1/128) of fp32 softmax of (x + bias) * s rounded to 1/128."""
    rng = np.random.default_rng(4)
    s_in, heads, rows, n = 0.05, 2, 6, 37
    codes = rng.integers(-128, 128, (1, heads, rows, n)).astype(np.int8)
    bias = rng.integers(-40, 40, (rows, n)).astype(np.int8)
    bias[rng.random((rows, n)) < 0.3] = -128
    bias[2] = -128  # a row with every position masked
    node = SimpleNamespace(
        op="row_softmax",
        params={"k": np.array([norm_ops.softmax_params(s_in)]), "mask": bias},
        attrs={"causal": False},
    )
    got = OP_SPECS["row_softmax"].evaluate(SimpleNamespace(), node, [codes]).astype(np.int64)
    off = np.broadcast_to(bias == -128, got.shape)
    assert np.all(got[off] == 0)
    z = (codes.astype(np.float64) + np.where(bias == -128, 0, bias)) * s_in
    z = np.where(off, -np.inf, z)
    live = ~np.all(off, axis=-1)
    top = np.max(np.where(off, -np.inf, z), axis=-1, keepdims=True)
    e = np.where(off, 0.0, np.exp(z - np.where(np.isfinite(top), top, 0)))
    p = e / np.maximum(e.sum(axis=-1, keepdims=True), 1e-30)
    want = np.minimum(np.rint(128 * p), 127)
    assert np.abs(got - want)[live].max() <= 1


def test_a_bias_beyond_the_score_codes_keeps_the_softmax_on_the_host(tmp_path):
    """A bias of 1e3 is far more than 127 codes of the scores: Unplaceable, named; the
    Softmax runs on the host and the rest still on the device."""
    node = SimpleNamespace(name="sm", op="row_softmax")
    with pytest.raises(Unplaceable, match=r"mask value 1000 is 20000 codes at the scores' scale"):
        mask_codes(node, np.array([[0.0, 1000.0, -np.inf]], np.float32), 0.05)
    bias = _bias("per_row")
    bias[0, 0] = 1000.0
    model, path = _masked_model(bias, tmp_path)
    exe = compile_model(path, dataclasses.replace(PRESETS["default"], norm_unit=True)).executable
    assert not [n for n in exe.reference.nodes if n.op == "row_softmax"]
    x = np.random.default_rng(1).standard_normal((1, TOKENS, WIDTH)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert any("Softmax" in la.op for la in result.layers if la.device == "host")
    name = model.graph.output[0].name
    assert _cosine(result.outputs[name], _fp32(model, x)) > 0.999


def test_a_mask_that_differs_per_head_stays_on_the_host(tmp_path):
    """A bias per head is no NORM mask: the Add stays an Add; with -inf in it, its scale is
    not finite and the Softmax it feeds goes to the host with the reason (once an
    OverflowError reached the user)."""
    bias = np.stack([_bias("per_row"), _bias("per_row")[::-1]])
    model, path = _masked_model(bias, tmp_path)
    exe = compile_model(path, dataclasses.replace(PRESETS["default"], norm_unit=True)).executable
    assert not [n for n in exe.reference.nodes if n.op == "row_softmax"]
    x = np.random.default_rng(2).standard_normal((1, TOKENS, WIDTH)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    name = model.graph.output[0].name
    assert _cosine(result.outputs[name], _fp32(model, x)) > 0.999
    with pytest.raises(ValueError, match="softmax input scale inf out of range"):
        norm_ops.softmax_params(float("inf"))


@pytest.mark.parametrize("name", ["hf_bert_ts", "hf_distilbert_dy"])
def test_attention_mask_input_on_the_norm_unit(name):
    """Every Softmax a row_softmax reading the input stage's mask (codes 0 and -128 exactly,
    -128 at the padded tail of the seeded input); its probabilities there exactly 0; no
    Softmax or LayerNorm on the host; bit-exact and close to onnxruntime on the same ids. (The
    mask arithmetic stays in the input stage, ahead of the embedding LayerNorm now on the
    device: these fixtures once failed on an INT64 mask crossing host regions.)"""
    config = dataclasses.replace(PRESETS["tiny"], norm_unit=True)
    s = survey_one(name, config)
    assert s.bit_exact
    assert s.cosine > 0.99, s.cosine
    assert not {"Softmax", "LayerNormalization"} & set(s.host_ops)
    compiled = compile_model(HERE / f"{name}.onnx", config)
    graph = compiled.executable.reference
    softmaxes = [n for n in graph.nodes if n.op == "row_softmax"]
    assert softmaxes and all(len(n.inputs) == 2 for n in softmaxes)
    assert compiled.source is not None
    spec = token_inputs_of(compiled.source)
    assert spec is not None
    packed, _ = spec.default(0)
    pad = spec.unpack(packed)[next(t.name for t in spec.inputs if t.kind == "mask")] == 0
    assert pad.any() and not pad.all()  # the seeded input has a padded tail
    values = evaluate(graph, packed.astype(np.int8).reshape(compiled.executable.input.shape))
    for node in softmaxes:
        mask = values[node.inputs[1]]
        assert set(np.unique(mask)) <= {0, -128}
        assert np.array_equal(mask[0, 0, 0] == -128, pad)
        assert np.all(values[node.output][..., pad] == 0)
        assert np.all(values[node.output][..., ~pad].sum(axis=-1) > 0)


@pytest.mark.parametrize("masking", [-100.0, -5000.0])
def test_an_input_mask_neither_zero_nor_masking_is_refused(masking, tmp_path):
    """An exporter whose mask stage writes -100 (not <= -1e4) where padded: the device's mask
    codes say only keep or mask, so the run stops naming the host step and the value, instead
    of rounding -100 to a multiple of the mask scale and giving a silently different answer."""
    model = onnx.load(HERE / "hf_bert_ts.onnx")
    [where] = [n for n in model.graph.node if n.name == "/model/bert/Where_1"]
    producers = {out: n for n in model.graph.node for out in n.output}
    [value] = producers[where.input[2]].attribute  # the Constant of the masked positions
    masked = numpy_helper.to_array(value.t)
    assert masked.size == 1 and masked.ravel()[0] <= norm_ops.MASKED_BELOW  # as exported
    value.t.CopyFrom(numpy_helper.from_array(np.full_like(masked, masking)))
    path = tmp_path / "bert_mask.onnx"
    onnx.save(model, path)
    compiled = compile_model(path, dataclasses.replace(PRESETS["tiny"], norm_unit=True))
    assert compiled.source is not None
    spec = token_inputs_of(compiled.source)
    assert spec is not None
    packed, _ = spec.default(0)  # the seeded input has a padded tail
    x = packed.astype(np.int8).reshape(compiled.executable.input.shape)
    with pytest.raises(HostMaskNotBinary, match=rf"neither 0 nor <= -10000 \(e\.g\. {masking:g}\)"):
        evaluate(compiled.executable.reference, x)
    with pytest.raises(HostMaskNotBinary) as caught:
        run(compiled.executable, x, "isa")
    assert exit_code(caught.value) == (2, f"error: {caught.value}")  # bad input, not a bug


@pytest.mark.parametrize("scale", [1e-7, 300.0])
def test_a_softmax_input_scale_out_of_range_is_unplaceable_naming_node_op_and_scale(scale):
    """k = round(s_in log2(e) 2**16) must be in 1..2**24-1: outside, the node goes to the host
    with the reason (the node, the op and the scale named)."""
    from compiler.quantizers import row_softmax

    graph = SimpleNamespace(tensors={"scores": SimpleNamespace(scale=scale)})
    node = SimpleNamespace(name="attn.sm", op="row_softmax", inputs=["scores"], params={})
    with pytest.raises(Unplaceable) as caught:
        row_softmax(graph, node)
    assert (caught.value.node, caught.value.op) == ("attn.sm", "row_softmax")
    assert f"softmax input scale {scale!r} out of range" in caught.value.why

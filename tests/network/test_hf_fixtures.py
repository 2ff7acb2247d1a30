"""Models as Hugging Face and timm export them (tests/fixtures/hf/): a fast sample on the ISA
simulator - bit-exact, and close to onnxruntime running the exported file on the same integers
or image - and BERT's ids + mask on the tiny RTL. ``make fixtures`` runs every fixture."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from arch.config import PRESETS, load_config
from compiler.compile import compile_graph, compile_model
from compiler.export import assemble
from compiler.frontend import compile_placed
from compiler.onnx.token_inputs import token_inputs_of
from sim.quality.accuracy import compare_fp32
from sim.quality.twin import INTEGER_ALGORITHMS, twin_agreement
from sim.runtime.inputs import check_input, noise_input
from sim.runtime.run import run
from tests.fixtures.hf.survey import HERE, survey_one
from tests.twin_check import LEAST_EQUAL

TINY = PRESETS["tiny"]


@pytest.mark.parametrize("name", ["hf_bert_ts", "timm_deit_dy"])
def test_fixture_on_isa(name: str) -> None:
    """hf_bert_ts takes input_ids + attention_mask (the TorchScript export: constant position
    and token-type ids folded); timm's DeiT an image."""
    s = survey_one(name, TINY)
    assert s.bit_exact
    assert s.cosine > 0.99, s.cosine
    assert s.device_programs >= 1
    if name == "hf_bert_ts":  # the embedding lookup and the mask: steps of the input alone
        assert s.input_stage >= 1 and "Gather" in s.host_ops


@pytest.mark.simulator
def test_bert_ids_and_mask_on_rtl(tmp_path) -> None:
    """A one-layer BERT (ids + mask) on the tiny RTL: bit-exact, the ISA simulator's outputs."""
    compiled = compile_model(HERE / "hf_bert_small_ts.onnx", TINY)
    assert compiled.source is not None
    spec = token_inputs_of(compiled.source)
    assert spec is not None
    x = check_input(spec.default(5)[0], compiled.executable.input.shape)
    rtl = run(compiled.executable, x, "rtl", workdir=tmp_path / "rtl")
    isa = run(compiled.executable, x, "isa")
    assert rtl.bit_exact, rtl.first_mismatch
    for name, value in isa.outputs.items():
        np.testing.assert_array_equal(rtl.outputs[name], value)


@pytest.mark.parametrize(
    "name", ["hf_bert_embeds_ts", "hf_bert_ts", "timm_deit_ts", "timm_deit_dy", "timm_levit_ts"]
)
def test_encoder_blocks_without_host_steps_on_the_norm_unit(name: str) -> None:
    """With the norm unit: BERT's TorchScript head merge (its (1, T, -1) target in a Constant
    node after the Transpose) and DeiT's packed q, k, v (Split or Slice of a permuted
    (1, T, 3, H, d)) are device views - every host step is in the input stage, one device
    program; LeViT's attention bias (a constant added to the scores) bit-exact (it was not)."""
    config = dataclasses.replace(TINY, norm_unit=True)
    s = survey_one(name, config)
    assert s.bit_exact
    if name != "timm_levit_ts":  # LeViT's BatchNorms, HardSwish and pooling stay on the host
        assert s.host_steps == s.input_stage, s.host_ops
        assert s.device_programs == 1
        assert s.cosine > 0.99, s.cosine
    _assert_twin_agrees(name, config)


def _assert_twin_agrees(name: str, config) -> None:
    """Every device tensor code by code against the fake-quantized twin of the exported file
    (onnxruntime on the original graph), on the seeded ids or a noise image: issue 41's goal
    (tests/twin_survey.py) - every code within the rule, 0.999 of the exactly computed layers'
    codes equal. (A table layer's share of equal codes is not bounded here: a tiny config's
    few codes of a steep table - BERT's pooler tanh, 32 codes - go below the zoo's 0.5.)"""
    compiled = compile_model(HERE / f"{name}.onnx", config)
    exe, source = compiled.executable, compiled.source
    assert source is not None
    _assert_meets_twin_goal(source, exe, exe.reference)


def _assert_meets_twin_goal(source, exe, reference) -> None:
    spec = token_inputs_of(source)
    x = (
        check_input(spec.default(0)[0], exe.input.shape)
        if spec
        else noise_input(exe.input.shape, 0)
    )
    rows = twin_agreement(source, reference, [x])
    assert rows and all(r["outside_rule"] == 0 for r in rows), rows
    assert all(r["max_code_diff"] <= max(1, r["second_step"]) for r in rows), rows
    exact = [r for r in rows if not r["second_step"] and r["op"] not in INTEGER_ALGORITHMS]
    count = sum(r["count"] for r in exact)
    assert sum(r["equal"] * r["count"] for r in exact) >= LEAST_EQUAL * count, exact


def test_efficientvit_on_the_norm_unit_config() -> None:
    """EfficientViT's per-head attention bias: the constant added to the scores (heads) is laid
    out as heads, so the Add runs on the device before the Softmax on the norm unit - bit-exact
    on the ISA simulator (it was refused: "is both tokens and heads", then sent to the host)."""
    config = load_config("default_norm")
    graph, steps = compile_placed(
        HERE / "timm_efficientvit_ts.onnx",
        back=lambda quantized: compile_graph(quantized, config),
        norm_unit=True,
    )
    assert steps is not None and graph.source is not None
    assert "tokens and heads" not in " ".join(graph.host_reasons.values())
    softmax_inputs = {n.inputs[0] for n in graph.nodes if n.op == "row_softmax"}
    assert any(n.op == "add" and n.output in softmax_inputs for n in graph.nodes)
    exe = assemble("efficientvit", graph, steps, config)
    assert any(n.op == "row_softmax" for n in exe.reference.nodes)  # the Softmax on the device
    x = noise_input(exe.input.shape, 0)
    assert run(exe, x, "isa").bit_exact
    assert compare_fp32(graph.source, exe.reference, x)["cosine_vs_fp32"] > 0.9
    _assert_meets_twin_goal(graph.source, exe, exe.reference)


def test_hugging_face_gpt2_decodes_with_the_kv_cache() -> None:
    """Hugging Face GPT-2 as it exports without its cache (issue 40's "nearest form"): the
    prefill and decode programs derived from it (its canonical order is v, q, k; the key
    projection moves before the value's so the cache's readers come two layers after the new
    key row's STORE) decode 8 steps after an 8-token prompt, every launch bit-exact and each
    step's logits row p of the full pass."""
    from arch.reference import evaluate, quantize_input
    from compiler.kv_link import compile_kv
    from sim.runtime.kv_run import KvRun
    from sim.runtime.run import backend_of

    path, config = HERE / "hf_gpt2_dy.onnx", load_config("default_norm")
    kv = compile_kv(path, config)
    spec = token_inputs_of(compile_model(path, config).source)
    assert spec is not None
    context = kv.context

    def window(ids: list[int]) -> np.ndarray:
        padded = np.asarray(ids + [0] * (context - len(ids)), np.int64)
        return spec.pack({spec.inputs[0].name: padded}, "window")

    ids = [int(i) for i in np.random.default_rng(3).integers(0, 50, 8)]
    run_ = KvRun(kv, backend_of("isa"))
    first = run_.prefill(window(ids), len(ids))
    assert first.first_mismatch is None
    rows = [first.logits[len(ids) - 1]]
    while len(ids) < context:
        ids.append(int(np.argmax(rows[-1])))
        step = run_.step(window(ids))
        assert step.first_mismatch is None, step.first_mismatch
        rows.append(step.logits[0])
    ref = kv.prefill.reference
    x = quantize_input(window(ids), kv.prefill.input.scale or 1.0)
    logits = evaluate(ref, x.reshape(kv.prefill.input.shape))[ref.outputs[0]].reshape(context, -1)
    assert len(rows) == context - 7
    for p, row in enumerate(rows, 7):
        np.testing.assert_array_equal(row, logits[p], err_msg=f"position {p}")

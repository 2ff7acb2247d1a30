"""The ``chargpt`` language model: its corpus (numpy's docstrings, pinned by digest, a fixed
held-out split), the numpy training (gradients against finite differences, reproducible,
learning), the ONNX export against the numpy network, the weights' cache, and - on the tiny
variant compiled for ``tiny`` with the norm unit - one device program after the input stage,
bit-exact, bits per character and generation by recomputation on the ISA simulator."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from arch.config import PRESETS
from arch.executable import DeviceProgram, HostStep
from arch.reference import evaluate, quantize_input
from compiler.compile import compile_model
from compiler.onnx.token_inputs import token_inputs_of
from sim.app.generate import Generation, generate
from sim.app.language import LanguageModel
from sim.app.text_eval import evaluate_windows
from sim.quality.bits_per_char import bits_per_char, next_char_top1
from sim.runtime.inputs import InputError
from zoo import chargpt as chargpt_module
from zoo import chargpt_data, chargpt_train
from zoo.chargpt import chargpt, trained
from zoo.chargpt_train import TINY, Shape

TINY_NORM = dataclasses.replace(PRESETS["tiny"], norm_unit=True)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("chargpt") / "chargpt_tiny.onnx"
    onnx.save(chargpt(shape=TINY), path)
    return path


@pytest.fixture(scope="module")
def tiny_compiled(tiny_model: Path):
    return compile_model(tiny_model, TINY_NORM)


def test_corpus_is_pinned_split_by_docstring_and_round_trips(monkeypatch) -> None:
    corpus = chargpt_data.load()
    assert len(corpus.train) > 200_000 and len(corpus.held_out) > 20_000
    root = Path(np.__file__).parent
    docs = chargpt_data.docstrings(root)
    held = np.random.default_rng(chargpt_data.SPLIT_SEED).permutation(len(docs))[:20]
    # The held-out text is exactly the held-out docstrings, none of them in the training text.
    want = "\n\n".join(d for i, d in enumerate(docs) if i in set(held.tolist()))
    assert chargpt_data.decode(corpus.held_out) == want
    assert docs[int(held[0])] not in chargpt_data.decode(corpus.train)
    text = "Return a new array\n\tof ~given shape: é"
    assert chargpt_data.decode(chargpt_data.encode(text)) == text.replace("\t", " ").replace(
        "é", " "
    )
    monkeypatch.setattr(chargpt_data, "CORPUS_SHA256", "0" * 64)
    with pytest.raises(chargpt_data.CorpusError, match=r"has sha256 af77b386d713c973\.\.\., not"):
        chargpt_data.load()


def test_gradients_match_finite_differences() -> None:
    """Every parameter's gradient against central differences of the float64 loss."""
    s = Shape(context=5, width=8, heads=2, layers=2, mlp=12, vocab=7)
    rng = np.random.default_rng(4)
    p = {k: v + rng.normal(0, 0.3, v.shape) for k, v in chargpt_train.init(s, 0).items()}
    p = {k: v.astype(np.float64) for k, v in p.items()}
    ids, targets = rng.integers(0, 7, (3, 5)), rng.integers(0, 7, (3, 5))
    _loss, grads = chargpt_train.loss_and_grads(p, ids, targets, s)
    for name, value in p.items():
        for index in list(np.ndindex(value.shape))[:: max(1, value.size // 2)]:
            old = value[index]
            value[index] = old + 1e-6
            up = chargpt_train.loss_and_grads(p, ids, targets, s)[0]
            value[index] = old - 1e-6
            down = chargpt_train.loss_and_grads(p, ids, targets, s)[0]
            value[index] = old
            numeric = (up - down) / 2e-6
            assert abs(numeric - grads[name][index]) <= 1e-6 + 1e-4 * abs(numeric), name


def test_training_is_reproducible_learns_and_exports_what_it_trained(tiny_model: Path) -> None:
    corpus = chargpt_data.load()
    short = dataclasses.replace(TINY, steps=6)
    once, again = (chargpt_train.train(corpus.train, short, seed=0) for _ in range(2))
    for name, value in once.items():
        np.testing.assert_array_equal(value, again[name], err_msg=name)
    first = trained(TINY, 0)  # (what the model is built from)
    held = chargpt_data.windows(corpus.held_out, TINY.context, 64)
    untrained = chargpt_train.init(TINY, 0)
    assert chargpt_train.bits_per_char(untrained, held, TINY) > math.log2(96) - 0.1
    assert chargpt_train.bits_per_char(first, held, TINY) < 4.5  # (uniform: 6.58)
    # The ONNX model computes the numpy network it was trained as (onnxruntime, fp32).
    model = onnx.load(tiny_model)
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(str(tiny_model), providers=["CPUExecutionProvider"])
    ids = held[:3, :-1]
    got = np.concatenate([session.run(None, {"input": w[None]})[0] for w in ids])
    want = chargpt_train.forward(trained(TINY, 0), ids, TINY)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_weights_are_cached_and_a_damaged_cache_is_trained_again(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(chargpt_module, "CACHE_DIR", tmp_path)
    shape = dataclasses.replace(TINY, steps=3)
    first = chargpt_module.trained.__wrapped__(shape, 0)
    (path,) = tmp_path.glob("chargpt-*.npz")
    with np.load(path) as saved:
        np.testing.assert_array_equal(saved["wte"], first["wte"])
    path.write_bytes(path.read_bytes()[:100])  # cut short
    again = chargpt_module.trained.__wrapped__(shape, 0)
    np.testing.assert_array_equal(again["head.weight"], first["head.weight"])
    with np.load(path) as saved:  # written again whole
        assert saved.files == list(first)


def test_one_device_program_after_the_input_stage_bit_exact(tiny_compiled) -> None:
    exe = tiny_compiled.executable
    assert [type(step) for step in exe.steps] == [HostStep, DeviceProgram]
    (host,) = [step for step in exe.steps if isinstance(step, HostStep)]
    spec = token_inputs_of(tiny_compiled.source)
    assert spec is not None and spec.inputs[0].vocab == len(chargpt_data.VOCAB)
    # The calibration windows are the training text in the executable's packed form.
    corpus = chargpt_data.load()
    for window in chargpt_module.calibration_set(3, TINY):
        ids = window.reshape(-1).astype(np.int64)
        np.testing.assert_array_equal(window, spec.pack({"input": ids}, "calibration"))
        assert chargpt_data.decode(ids) in chargpt_data.decode(corpus.train)
    assert host.name  # (the embedding Gather and position Add: the input stage)


def test_bits_per_char_by_hand() -> None:
    logits = np.array([[[0.0, 0.0, 0.0, 0.0], [2.0, 0.0, 0.0, -1.0]]])
    targets = np.array([[3, 0]])
    first = 2.0  # uniform over 4
    second = -math.log2(math.exp(2) / (math.exp(2) + 1 + 1 + math.exp(-1)))
    assert bits_per_char(logits, targets) == pytest.approx((first + second) / 2, rel=1e-12)
    assert next_char_top1(logits, targets) == 0.5  # row 0: a tie, the first (0) is not 3
    assert next_char_top1(logits, np.array([[0, 0]])) == 1.0


def test_held_out_bits_per_char_int8_close_to_fp32_on_the_isa(tiny_compiled) -> None:
    windows = chargpt_data.windows(chargpt_data.load().held_out, TINY.context, 6)
    exe, source = tiny_compiled.executable, tiny_compiled.source
    result = evaluate_windows("tiny", exe, source, windows, "isa")
    assert result["bit_exact"] and result["n"] == 6 and result["characters"] == 6 * TINY.context
    session = ort.InferenceSession(source.SerializeToString(), providers=["CPUExecutionProvider"])
    spec = token_inputs_of(source)
    fp32 = [session.run(None, {"tokens": spec.pack({"input": w[:-1]}, "w")})[0] for w in windows]
    assert result["bits_per_char_fp32"] == pytest.approx(
        bits_per_char(np.stack(fp32), windows[:, 1:]), rel=1e-6
    )
    assert result["int8_over_fp32"] < 1.05


def _reference_logits(exe, x: np.ndarray) -> np.ndarray:
    """The integer reference's dequantized logits (arch.reference, not the backend)."""
    x = x.reshape(exe.input.shape)
    values = evaluate(
        exe.reference, quantize_input(x, exe.input.scale or 1.0, exe.input.zero_point)
    )
    name = exe.reference.outputs[0]
    t = exe.reference.tensors[name]
    return (values[name].astype(np.float64) - t.zero_point) * t.scale


def test_generation_by_recomputation_on_the_isa(tiny_compiled) -> None:
    """Greedy characters are the argmax of the integer reference's last row, window by
    window; padding after the last position changes nothing before it (causal); seeded top-k
    draws only among the k likeliest and repeats with its seed."""
    exe, source = tiny_compiled.executable, tiny_compiled.source
    lm, spec = LanguageModel.of(source), token_inputs_of(source)
    assert lm is not None and lm.context == TINY.context and spec is not None
    streamed: list[str] = []
    prompt = "The array"  # longer than the context: the window slides
    out = generate(exe, lm, spec, Generation(prompt, 4), "isa", on_text=streamed.append)
    assert out["bit_exact"] and out["mode"] == "recompute" and "".join(streamed) == out["text"]
    assert all(step["cycles"] > 0 and step["dram_read_bytes"] > 0 for step in out["steps"])
    ids = list(lm.encode(prompt))
    for step in out["steps"]:
        window = np.asarray(ids[-TINY.context :])
        logits = _reference_logits(exe, spec.pack({"input": window}, "w"))
        assert step["token"] == int(np.argmax(logits.reshape(TINY.context, -1)[-1]))
        ids.append(step["token"])
    short = lm.encode("arr")
    rows = []
    for pad in ("    ", "zzzz", "\n\n()"):
        window = np.concatenate([short, lm.encode(pad + "x")[: TINY.context - 3]])
        logits = _reference_logits(exe, spec.pack({"input": window}, "w"))
        rows.append(logits.reshape(TINY.context, -1)[:3])
    assert all(np.array_equal(rows[0], r) for r in rows[1:])
    sampled = generate(exe, lm, spec, Generation("arr", 3, top_k=3, seed=5), "isa")
    again = generate(exe, lm, spec, Generation("arr", 3, top_k=3, seed=5), "isa")
    assert sampled["text"] == again["text"]
    first = _reference_logits(exe, spec.pack({"input": np.r_[short, [1] * 5]}, "w"))
    top3 = np.argsort(-first.reshape(TINY.context, -1)[2], kind="stable")[:3]
    assert sampled["steps"][0]["token"] in top3.tolist()


def test_prompt_outside_the_vocabulary_is_named() -> None:
    lm = LanguageModel(chargpt_data.VOCAB, 8)
    with pytest.raises(InputError, match=r"character 'é' \(at 3\) is not in the model's vocab"):
        lm.encode("arré")
    with pytest.raises(InputError, match="newline and printable ASCII"):
        lm.encode("\t")

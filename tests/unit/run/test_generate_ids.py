"""``make sim MODEL=<gpt2.onnx> TOKENS=ids.npy GENERATE=N``: a model of token ids in and logits
over them out (Hugging Face GPT-2 as exported without its cache, tests/fixtures/hf/) generates
ids with the KV cache on the ISA simulator - the integer reference's greedy ids by
recomputation, close to onnxruntime's fp32 logits at the first step - and every misuse is one
line and exit code 2."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import numpy as np
import onnxruntime as ort
import pytest

from arch import executable
from arch.config import load_config
from arch.ops.quant import dequantize
from arch.reference import evaluate, quantize_input
from compiler.compile import compile_model
from compiler.kv_link import compile_kv
from compiler.onnx.token_inputs import token_inputs_of
from sim.app.generate import Generation, generate, generate_in_run
from sim.app.language import LanguageModel
from sim.app.own_cache import OwnCache, cosine
from sim.runtime.inputs import InputError
from tests.fixtures.hf.survey import HERE
from tests.unit.run.test_cli_errors import assert_usage_error, in_process

GPT2 = str(HERE / "hf_gpt2_dy.onnx")
CONFIG = "default_norm"  # (16x16 with the norm unit: one device program after the input stage)
STEPS = 3


@pytest.fixture(scope="module")
def prompt() -> list[int]:
    return [int(i) for i in np.random.default_rng(7).integers(1, 96, 5)]


def _greedy(logits_of, prompt: list[int], count: int, context: int) -> tuple[list[int], list]:
    """Greedy ids by recomputation: the growing sequence, padded at its end with id 95 (the
    causal attention makes the padding change nothing before it), one full pass a step."""
    ids, rows = list(prompt), []
    for _ in range(count):
        window = ids[-context:]
        padded = np.asarray(window + [95] * (context - len(window)), np.int64)
        rows.append(logits_of(padded)[len(window) - 1])
        ids.append(int(np.argmax(rows[-1])))
    return ids[len(prompt) :], rows


def test_gpt2_generates_the_integer_references_ids(prompt, tmp_path, capsys) -> None:
    tokens, out = tmp_path / "prompt.npy", tmp_path / "run"
    np.save(tokens, np.asarray([prompt], np.int64))  # (1, L)
    done = in_process(
        capsys, "--model", GPT2, "--config", CONFIG, "--tokens", str(tokens),
        "--generate", str(STEPS), "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    gen = report["generation"]
    assert gen["mode"] == "kv_cache" and gen["bit_exact"] is True and gen["count"] == STEPS
    assert gen["prompt"] is None and gen["text"] is None and gen["texts"] is None
    assert gen["prompt_ids"] == prompt and gen["prompt_source"] == str(tokens)
    assert gen["prefill"]["tokens"] == len(prompt) and gen["prefill"]["char"] is None
    assert [gen["prefill"]["token"]] + [s["token"] for s in gen["steps"]] == gen["ids"]
    assert report["input"]["tokens"]["input_ids"] == prompt + [0] * (16 - len(prompt))
    assert done.stdout.count("no tokenizer is bundled") == 1
    assert f"{prompt} ->" + "".join(f" {i}" for i in gen["ids"]) + "\n" in done.stdout
    assert f"generated {STEPS} ids (greedy) with a KV cache" in done.stdout

    # The integer reference of the run's executable, a full pass a step: the same ids.
    exe = executable.load(out / "hf_gpt2_dy.cosim")
    source = compile_model(GPT2, load_config(CONFIG)).source
    spec, lm = token_inputs_of(source), LanguageModel.of(source)
    assert spec is not None and lm is not None
    assert lm.vocab is None and (lm.context, lm.size) == (16, 96)
    expected, int8_rows = _greedy(_integer(exe, spec), prompt, STEPS, spec.length)
    assert gen["ids"] == expected

    # onnxruntime's fp32 on the exported file: its first step's logits (later steps may
    # legitimately pick other ids from int8 and fp32 logits, so only the first is held).
    session = ort.InferenceSession(GPT2, providers=["CPUExecutionProvider"])

    def fp32(ids: np.ndarray) -> np.ndarray:
        return session.run(None, {"input_ids": ids[None]})[0][0]

    _, fp32_rows = _greedy(fp32, prompt, 1, spec.length)
    a, b = fp32_rows[0], int8_rows[0]
    assert float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)) > 0.99

    # Seeded top-k: the KV cache's ids are recomputation's (--decode recompute's loop).
    kv, streamed = compile_kv(GPT2, load_config(CONFIG)), []
    want = Generation(tuple(prompt), STEPS, top_k=5, seed=3, fed="a test")
    cached, failure = generate_in_run(exe, source, want, "isa", streamed.append, tmp_path, kv)
    again = generate(exe, lm, spec, dataclasses.replace(want, decode="recompute"), "isa")
    assert failure is None and cached is not None and cached["picking"] == "top-5 (seed 3)"
    assert cached["ids"] == again["ids"] and again["prompt_ids"] == prompt
    assert again["text"] is None and again["steps"][0]["char"] is None
    assert "".join(streamed).endswith("->" + "".join(f" {i}" for i in again["ids"]) + "\n")


def _integer(exe: executable.Executable, spec) -> Callable[[np.ndarray], np.ndarray]:
    """The logits rows of ``exe``'s integer reference for a window of ids (a full pass)."""
    ref, scale = exe.reference, exe.input.scale or 1.0
    logits = ref.tensors[ref.outputs[0]]

    def integer(ids: np.ndarray) -> np.ndarray:
        x = quantize_input(spec.pack({spec.inputs[0].name: ids}, "window"), scale)
        codes = evaluate(ref, x.reshape(exe.input.shape))[ref.outputs[0]]
        return dequantize(codes.reshape(spec.length, -1), logits.scale or 1.0, logits.zero_point)

    return integer


@pytest.mark.parametrize("exporter", ["ts", "dy"])
def test_gpt2_exported_with_its_cache_decodes_as_its_own_cache_does(
    exporter, prompt, tmp_path, capsys
) -> None:
    """GPT-2 exported with ``past_key_values`` in and ``present`` out (issue 40, item 4),
    compiled as its prefill (the past bound empty): the KV-cache generation's ids are the
    integer reference's by recomputation, and every launch's logits are close to onnxruntime
    running the exported file with its own cache (the prompt, then one id a step with the
    presents fed back) - which itself gives a full pass's rows."""
    model = str(HERE / f"hf_gpt2_cache_{exporter}.onnx")
    tokens, out = tmp_path / "prompt.npy", tmp_path / "run"
    np.save(tokens, np.asarray(prompt, np.int64))
    done = in_process(
        capsys, "--model", model, "--config", CONFIG, "--tokens", str(tokens),
        "--generate", str(STEPS), "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    gen = json.loads((out / "report.json").read_text())["generation"]
    assert gen["bit_exact"] is True and gen["context"] == 32  # GPT2Config(n_positions=32)
    exe = executable.load(out / f"hf_gpt2_cache_{exporter}.cosim")
    spec = token_inputs_of(compile_model(model, load_config(CONFIG)).source)
    assert spec is not None and spec.length == 32
    expected, int8_rows = _greedy(_integer(exe, spec), prompt, STEPS, spec.length)
    assert gen["ids"] == expected

    # onnxruntime stepping the exported cache along these ids gives a full pass's rows ...
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    empty = np.zeros((1, 2, 0, 16), np.float32)
    names = [f"past_key_values.{i}.{kv}" for i in range(2) for kv in ("key", "value")]
    ids = prompt + gen["ids"][:-1]
    full = session.run(None, {"input_ids": np.asarray([ids]), **dict.fromkeys(names, empty)})[0]
    own = OwnCache.of(model, compile_model(model, load_config(CONFIG)).source)
    assert own is not None
    stepped = [own.start(prompt)] + [own.step(token) for token in gen["ids"][:-1]]
    np.testing.assert_allclose(stepped, full[0, len(prompt) - 1 :], atol=1e-4)
    # ... and the run compared each launch's int8 logits with them
    cosines = [gen["prefill"]["fp32_cosine"]] + [s["fp32_cosine"] for s in gen["steps"]]
    assert cosines == [round(cosine(a, b), 6) for a, b in zip(int8_rows, stepped, strict=True)]
    assert gen["fp32_own_cache"] == {"launches": STEPS, "cosine_min": min(cosines)}
    assert min(cosines) > 0.995  # (measured 0.9995 here; 0.9982 at worst over 12 steps)
    assert f"cosine >= {min(cosines):.5f} over {STEPS} launches" in done.stdout


def _save(path, array) -> str:
    np.save(path, array)
    return str(path)


def test_misuse_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    base = ("--model", GPT2, "--config", CONFIG, "--generate", "2", "--out", str(tmp_path / "o"))
    npz = tmp_path / "named.npz"
    np.savez(npz, ids=np.arange(3))
    cases = [
        (("--prompt", "hello"), ("--prompt: model", "hf_gpt2_dy.onnx", "takes token ids, not "
                                 "text", "TOKENS=ids.npy (--tokens)")),
        (("--tokens", _save(tmp_path / "long.npy", np.arange(17))),
         ("a prompt of 17 ids is longer than the model's 16 positions", "give 1 to 16 ids")),
        (("--tokens", _save(tmp_path / "big.npy", np.asarray([3, 96, 4]))),
         ("input_ids holds 96; the model takes ids in [0, 96)",)),
        (("--tokens", _save(tmp_path / "float.npy", np.asarray([3.0, 4.0]))),
         ("input_ids has dtype float64; use integers",)),
        (("--tokens", _save(tmp_path / "rank.npy", np.zeros((2, 3), np.int64))),
         ("input_ids has shape (2, 3); a prompt for --generate is (L,) or (1, L) of 1 to 16",)),
        (("--tokens", str(npz)), (str(npz), "no array named 'input_ids', the model's input")),
        (("--top-k", "97"), ("--top-k 97 is more than the model's 96 ids",)),
    ]  # fmt: skip
    for args, words in cases:
        assert_usage_error(in_process(capsys, *base, *args), *words)
    bert = ("--model", str(HERE / "hf_bert_ts.onnx"), "--config", CONFIG, "--generate", "2")
    line = assert_usage_error(in_process(capsys, *bert, "--out", str(tmp_path / "b")))
    assert "or one of token ids in and logits over them out); model" in line


def test_a_model_of_ids_alone_has_no_text() -> None:
    """Its ids print as numbers, its text is None, and text is no prompt for it (the API)."""
    lm = LanguageModel(None, 16, 96)
    assert (lm.decode([3, 41]), lm.text([3, 41]), lm.pad, lm.words) == (" 3 41", None, 0, "ids")
    assert lm.encode((5, 7)).tolist() == [5, 7]
    assert lm.prompt_fields((5, 7), "seeded") == {
        "prompt": None, "prompt_ids": [5, 7], "prompt_source": "seeded"
    }  # fmt: skip
    with pytest.raises(InputError, match="this model takes token ids, not text"):
        lm.encode("hi")

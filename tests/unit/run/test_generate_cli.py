"""``make sim PROMPT=... GENERATE=N [TOP_K=K] [DECODE=...]`` on the command line: the tiny
``chargpt`` (an ONNX file with the language-model metadata) compiled for tiny with the norm
unit generates on the ISA simulator with the KV cache, prints the prompt and the characters and
writes ``generation``; every misuse is one line and exit code 2."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import onnx
import pytest

from arch.config import PRESETS
from tests.unit.run.test_cli_errors import assert_usage_error, in_process
from zoo.chargpt import chargpt
from zoo.chargpt_train import TINY

TINY_NORM = dataclasses.replace(PRESETS["tiny"], norm_unit=True)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    folder = tmp_path_factory.mktemp("lm")
    model, config = folder / "chargpt_tiny.onnx", folder / "tiny_norm.json"
    onnx.save(chargpt(shape=TINY), model)
    config.write_text(TINY_NORM.to_json())
    return str(model), str(config)


@pytest.mark.long  # a whole make sim run (~25 s on a loaded machine): make test-long
def test_generate_on_the_isa_prints_and_reports(files, tmp_path, capsys) -> None:
    model, config = files
    out = tmp_path / "run"
    done = in_process(
        capsys, "--model", model, "--config", config, "--prompt", "np.", "--generate", "3",
        "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    generation = json.loads((out / "report.json").read_text())["generation"]
    assert generation["mode"] == "kv_cache" and generation["count"] == 3
    assert len(generation["text"]) == 3 and generation["bit_exact"] is True
    assert f"np.{generation['text']}\n" in done.stdout
    assert generation["cycles_per_token"] == sum(s["cycles"] for s in generation["steps"]) / 2
    assert generation["prefill"]["tokens"] == 3 and len(generation["steps"]) == 2
    assert "cycles per decode step on isa, every launch bit-exact: yes" in done.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--model", "mlp", "--prompt", "a", "--generate", "2"), ("not one", "'mlp'")),
        (("--model", "mlp", "--prompt", "a"), ("--prompt applies only to generation",)),
        (("--model", "mlp", "--generate", "2"), ("not one", "'mlp'")),
        (("--model", "mlp", "--prompt", "a", "--generate", "0"), ("--generate must be 1..4096",)),
        (("--model", "mlp", "--top-k", "3"), ("--top-k applies only to generation",)),
        (("--model", "mlp", "--decode", "recompute"), ("--decode applies only to generation",)),
        (
            ("--model", "mlp", "--prompt", "a", "--generate", "2", "--top-k", "0"),
            ("--top-k must be a positive integer",),
        ),
        (("--model", "mlp", "--batch", "2"), ("--batch applies only to generation with the KV",)),
        (
            ("--model", "mlp", "--prompt", "a", "--generate", "2", "--decode", "recompute",
             "--batch", "2"),
            ("--batch applies only to generation with the KV cache", "not --decode recompute"),
        ),
        (
            ("--model", "mlp", "--prompt", "a", "--generate", "2", "--batch", "0"),
            ("--batch must be a positive integer, not 0",),
        ),
    ],
)  # fmt: skip
def test_misuse_is_one_line_and_exit_2(capsys, args, words) -> None:
    assert_usage_error(in_process(capsys, *args), *words)


def test_model_dependent_refusals(files, capsys) -> None:
    model, config = files
    base = ("--model", model, "--config", config, "--generate", "2")
    line = assert_usage_error(in_process(capsys, *base, "--prompt", "a", "--top-k", "97"))
    assert "--top-k 97 is more than the model's 96 characters" in line
    line = assert_usage_error(in_process(capsys, *base, "--prompt", "naïve"))
    assert "character 'ï' (at 2) is not in the model's vocabulary" in line
    line = assert_usage_error(in_process(capsys, *base))
    assert f"--generate of model {model!r} needs a --prompt to continue (PROMPT=" in line
    # The caches of 64 sequences (and their tables) need more than 1 MiB of DRAM; one fits.
    small = Path(config).with_name("tiny_norm_1mib.json")
    small.write_text(dataclasses.replace(TINY_NORM, dram_mib=1).to_json())
    base = ("--model", model, "--config", str(small), "--generate", "2", "--prompt", "a")
    line = assert_usage_error(in_process(capsys, *base, "--batch", "64"))
    assert "--batch 64: a decode of 64 sequences (caches of 512 positions: 64 x context 8)" in line
    assert "bytes of DRAM, more than the config's 1,048,576" in line
    assert line.endswith("; supported: a smaller --batch")

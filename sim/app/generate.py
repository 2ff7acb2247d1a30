"""Text generation: with a KV cache (``--decode kv_cache``, the default: :mod:`sim.app.generate_kv`)
or by recomputation (``--decode recompute``, here): every new character is one full forward
pass of the executable over the last T characters (the prompt and what was generated), run on
the backend and checked bit for bit; the next character is picked on the host from the int8
logits of the last position - greedily, or by seeded top-k sampling.

The causal attention makes row t of the logits depend only on ids[:t + 1] (masked scores are
exactly 0 on the device, and every other op works on rows), so a window shorter than T is
padded at its end with spaces that change nothing before them.

The report's ``generation`` keeps one entry per generated character (cycles, DRAM bytes,
utilization), under ``mode: "recompute"``; with a KV cache the same fields with ``mode:
"kv_cache"``, a ``prefill`` entry and per decode step its roofline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from arch.config import AccelConfig
from arch.executable import Executable
from arch.executable.kv import KvExecutable
from compiler.onnx.token_inputs import TokenInputs, token_inputs_of
from sim.app.generate_kv import KvGenerationFailed, generate_kv
from sim.app.language import LANGUAGE_KEY, LanguageModel
from sim.runtime.inputs import InputError
from sim.runtime.run import RunResult, run

__all__ = [
    "DECODES",
    "Generation",
    "GenerationFailed",
    "generate",
    "generate_in_run",
    "generation_of",
]

#: How generation runs: prefill and one decode launch per character, or a full pass each.
DECODES = ("kv_cache", "recompute")


class GenerationFailed(RuntimeError):
    """A generation step was not bit-exact (its message names the step and the layer)."""


@dataclass(frozen=True)
class Generation:
    """What to generate: ``count`` characters after ``prompt``; ``top_k`` None is greedy;
    ``decode`` one of :data:`DECODES`; ``batch`` sequences decoded together (KV cache)."""

    prompt: str
    count: int
    top_k: int | None = None
    seed: int = 0
    decode: str = "kv_cache"
    batch: int = 1


def _pick(logits: np.ndarray, top_k: int | None, rng: np.random.Generator) -> int:
    """The next id: the largest logit (the first in a tie), or a draw from the softmax of the
    ``top_k`` largest."""
    if top_k is None:
        return int(np.argmax(logits))
    best = np.argsort(-logits, kind="stable")[:top_k]
    z = logits[best].astype(np.float64)
    weights = np.exp(z - z.max())
    return int(best[rng.choice(len(best), p=weights / weights.sum())])


def _step_entry(result: RunResult, config: AccelConfig, char: str, token: int) -> dict[str, Any]:
    accel = [la for la in result.layers if la.device == "accel"]
    macs = sum(la.macs for la in accel)
    return {
        "token": token,
        "char": char,
        "cycles": result.cycles,
        "dram_read_bytes": sum(la.dram_read_bytes for la in accel),
        "dram_write_bytes": sum(la.dram_write_bytes for la in accel),
        "utilization": macs / (config.rows * config.cols * result.cycles) if result.cycles else 0.0,
        "bit_exact": result.first_mismatch is None,
    }


def generate(
    exe: Executable,
    lm: LanguageModel,
    spec: TokenInputs,
    want: Generation,
    backend: str,
    *,
    on_text: Callable[[str], None] = lambda text: None,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """Generate ``want.count`` characters (each passed to ``on_text`` as it comes); the
    report's ``generation``. A step that is not bit-exact is :class:`GenerationFailed`."""
    ids = list(lm.encode(want.prompt))
    space = lm.vocab.index(" ") if " " in lm.vocab else 0
    rng = np.random.default_rng(want.seed)
    steps: list[dict[str, Any]] = []
    started = time.perf_counter()
    for step in range(want.count):
        window = ids[-lm.context :]
        last = len(window) - 1
        padded = np.asarray(window + [space] * (lm.context - len(window)), np.int64)
        x = spec.pack({spec.inputs[0].name: padded}, "generation window")
        where = workdir / f"step{step}" if workdir is not None else None
        result = run(exe, x, backend, workdir=where)
        if result.first_mismatch is not None:
            bad = result.first_mismatch
            raise GenerationFailed(
                f"generated character {step} is not bit-exact: layer {bad.name} ({bad.op}): "
                f"{bad.mismatch}"
            )
        (output,) = result.outputs.values()
        logits = np.asarray(output).reshape(lm.context, -1)[last]
        token = _pick(logits, want.top_k, rng)
        ids.append(token)
        char = lm.decode([token])
        on_text(char)
        steps.append(_step_entry(result, exe.config, char, token))
    cycles = [s["cycles"] for s in steps]
    return {
        "mode": "recompute",  # every character a full forward pass
        "prompt": want.prompt,
        "text": "".join(s["char"] for s in steps),
        "count": want.count,
        "picking": _picking(want),
        "context": lm.context,
        "backend": backend,
        "prefill": None,  # (a KV-cache run: the prompt's launch)
        "steps": steps,
        "cycles_per_token": float(np.mean(cycles)) if cycles else 0.0,
        "bit_exact": all(s["bit_exact"] for s in steps),
        "wall_s": round(time.perf_counter() - started, 3),
    }


def _picking(want: Generation) -> str:
    if want.top_k is None:
        return "greedy"
    if want.batch == 1:
        return f"top-{want.top_k} (seed {want.seed})"
    return f"top-{want.top_k} (seeds {want.seed}..{want.seed + want.batch - 1})"


def generation_of(
    count: int | None,
    prompt: str | None,
    top_k: int | None,
    seed: int,
    model: str | None,
    source: onnx.ModelProto | None,
    decode: str | None = None,
    batch: int | None = None,
) -> Generation | None:
    """``--generate count`` checked against the model: a language model (its metadata), a
    prompt in its vocabulary, ``--top-k`` at most its vocabulary (else InputError, exit 2)."""
    if count is None:
        return None
    lm = LanguageModel.of(source)
    if lm is None or source is None or token_inputs_of(source) is None:
        what = f"model {model!r}" if model is not None else "an executable (--bundle)"
        raise InputError(
            f"--generate is for language models (the zoo's chargpt, or an ONNX model of token "
            f"inputs with {LANGUAGE_KEY!r} metadata); {what} is not one"
        )
    assert prompt is not None  # (request_checks)
    lm.encode(prompt)  # a character outside the vocabulary: InputError
    if top_k is not None and top_k > len(lm.vocab):
        raise InputError(f"--top-k {top_k} is more than the model's {len(lm.vocab)} characters")
    return Generation(prompt, count, top_k, seed, decode or "kv_cache", batch or 1)


def generate_in_run(
    exe: Executable,
    source: onnx.ModelProto,
    want: Generation,
    backend: str,
    stream: Callable[[str], None],
    workdir: Path,
    kv: KvExecutable | None = None,
) -> tuple[dict[str, Any] | None, str | None]:
    """``make sim``'s generation (with a KV cache when ``kv`` is given): the prompt and each
    character to ``stream`` as they come, then a newline (a batch of B sequences: a line per
    sequence at the end, as a Python string literal); the report's ``generation``, or None and
    the failure of a step that was not bit-exact."""
    lm, spec = LanguageModel.of(source), token_inputs_of(source)
    assert lm is not None and spec is not None  # (generation_of checked)
    batch = kv.batch if kv is not None else 1
    stream(want.prompt if batch == 1 else f"{batch} sequences after {want.prompt!r}:")
    try:
        if kv is not None:

            def pick(logits: np.ndarray, rng: np.random.Generator) -> int:
                return _pick(logits, want.top_k, rng)

            generated = generate_kv(kv, lm, spec, want, backend, pick, on_text=stream)
            generated["picking"] = _picking(want)
            for b, text in enumerate(generated["texts"] if batch > 1 else []):
                stream(f"\n[{b}] {want.prompt + text!r}")  # (a line each: newlines escaped)
            return generated, None
        return generate(exe, lm, spec, want, backend, on_text=stream, workdir=workdir), None
    except (GenerationFailed, KvGenerationFailed) as exc:
        return None, str(exc)
    finally:
        stream("\n")

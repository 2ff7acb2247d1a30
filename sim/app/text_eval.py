"""Held-out evaluation of a language model trained on text (``chargpt``): the first N windows
of its held-out text on the backend in one batch, every layer checked bit for bit, and the bits
per character of the int8 logits against fp32 onnxruntime on the same windows."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

import zoo
from arch.executable import Executable
from compiler.onnx.token_inputs import token_inputs_of
from sim.quality.bits_per_char import bits_per_char, next_char_top1
from sim.quality.dataset_accuracy import fp32_outputs
from sim.runtime.batch import run_batch

__all__ = ["DEFAULT_WINDOWS", "evaluate_text", "evaluate_windows"]

#: Held-out windows evaluated when EVAL is not given (of T characters each).
DEFAULT_WINDOWS = 16


def evaluate_text(
    model: str,
    exe: Executable,
    source: onnx.ModelProto,
    backend: str,
    *,
    limit: int | None = None,
    workdir: Path | None = None,
) -> dict[str, Any] | None:
    """``accuracy.dataset`` of the report for a zoo language model (None for another model):
    :func:`evaluate_windows` of its first ``limit`` (default :data:`DEFAULT_WINDOWS`)
    held-out windows."""
    windows = zoo.held_out_windows(model, DEFAULT_WINDOWS if limit is None else limit)
    if windows is None or token_inputs_of(source) is None:
        return None
    return evaluate_windows(f"{model} held-out text", exe, source, windows, backend, workdir)


def evaluate_windows(
    name: str,
    exe: Executable,
    source: onnx.ModelProto,
    windows: np.ndarray,
    backend: str,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """The language model ``source`` (compiled: ``exe``) on ``windows`` (N, T + 1) of ids:
    the contract's ``name``, ``n`` (windows), ``top1_fp32`` / ``top1_int8`` (of the next
    character) and ``agreement``, plus ``characters``, ``bits_per_char_fp32`` / ``_int8``,
    ``perplexity_fp32`` / ``_int8`` (per character), ``int8_over_fp32`` (of the bits),
    ``bit_exact``, ``cycles`` (summed) and ``wall_s``."""
    spec = token_inputs_of(source)
    assert spec is not None
    started = time.perf_counter()
    xs = [spec.pack({spec.inputs[0].name: w[:-1]}, "held-out window") for w in windows]
    targets = windows[:, 1:]
    batch = run_batch(exe, xs, backend, workdir=workdir)
    output = exe.reference.outputs[0]
    int8 = np.stack([out[output].reshape(targets.shape[1], -1) for out in batch.outputs])
    fp32 = fp32_outputs(source, xs).reshape(int8.shape)
    bpc_fp32, bpc_int8 = bits_per_char(fp32, targets), bits_per_char(int8, targets)
    first_bad = next((m for m in batch.mismatches if m is not None), None)
    return {
        "name": name,
        "n": len(windows),
        "characters": int(targets.size),
        "top1_fp32": next_char_top1(fp32, targets),
        "top1_int8": next_char_top1(int8, targets),
        "agreement": float(np.mean(fp32.argmax(-1) == int8.argmax(-1))),
        "bits_per_char_fp32": bpc_fp32,
        "bits_per_char_int8": bpc_int8,
        "perplexity_fp32": 2.0**bpc_fp32,
        "perplexity_int8": 2.0**bpc_int8,
        "int8_over_fp32": bpc_int8 / bpc_fp32,
        "bit_exact": batch.bit_exact,
        **({"first_mismatch": first_bad} if first_bad else {}),
        "cycles": int(sum(batch.cycles)),
        "wall_s": round(time.perf_counter() - started, 3),
    }

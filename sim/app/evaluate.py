"""Held-out evaluation of a zoo model trained on a data set (``digits``): the whole split (or
its first ``limit`` images) on the backend in one batch, against fp32 onnxruntime; of a
language model trained on text (``chargpt``): :mod:`sim.app.text_eval`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

import zoo
from arch.executable import Executable
from sim.app.run_inputs import RunInputs
from sim.app.text_eval import evaluate_text
from sim.quality.dataset_accuracy import dataset_accuracy, fp32_outputs
from sim.runtime.batch import run_batch

__all__ = ["evaluate_held_out", "evaluate_images"]


def evaluate_held_out(
    model: str,
    exe: Executable,
    source: onnx.ModelProto,
    backend: str,
    *,
    limit: int | None = None,
    workdir: Path | None = None,
) -> dict[str, Any] | None:
    """``accuracy.dataset`` of the report for zoo model ``model`` (None if it has no data set),
    plus ``bit_exact`` (every layer of every image), ``cycles`` (summed) and ``wall_s``; a
    language model's: :func:`sim.app.text_eval.evaluate_text`."""
    text = evaluate_text(model, exe, source, backend, limit=limit, workdir=workdir)
    if text is not None:
        return text
    split = zoo.held_out(model)
    if split is None:
        return None
    n = len(split.y) if limit is None else min(limit, len(split.y))
    xs = [split.x[i : i + 1] for i in range(n)]
    started = time.perf_counter()
    batch = run_batch(exe, xs, backend, workdir=workdir)
    output = exe.reference.outputs[0]
    int8 = np.stack([out[output].reshape(-1) for out in batch.outputs])
    result = dataset_accuracy(model, split.y[:n], fp32_outputs(source, xs), int8)
    first_bad = next((m for m in batch.mismatches if m is not None), None)
    return result | {
        "bit_exact": batch.bit_exact,
        **({"first_mismatch": first_bad} if first_bad else {}),
        "cycles": int(sum(batch.cycles)),
        "wall_s": round(time.perf_counter() - started, 3),
    }


def evaluate_images(
    exe: Executable,
    source: onnx.ModelProto | None,
    inputs: RunInputs,
    backend: str,
    workdir: Path | None = None,
) -> list[dict[str, Any]]:
    """Every input of ``inputs`` (``IMAGE=`` a folder) on the backend in one batch: per image
    its file, int8 top-1, whether every layer was bit-exact, and (with the fp32 model) its fp32
    top-1 and whether they agree."""
    batch = run_batch(exe, inputs.xs, backend, workdir=workdir)
    output = exe.reference.outputs[0]
    fp32 = fp32_outputs(source, inputs.xs) if source is not None else None
    rows: list[dict[str, Any]] = []
    for i, (name, outs) in enumerate(zip(inputs.names, batch.outputs, strict=True)):
        row: dict[str, Any] = {
            "file": name,
            "top1_int8": int(np.argmax(outs[output])),
            "bit_exact": batch.mismatches[i] is None,
        }
        if batch.mismatches[i] is not None:
            row["mismatch"] = batch.mismatches[i]
        if fp32 is not None:
            row["top1_fp32"] = int(np.argmax(fp32[i]))
            row["top1_agree_fp32"] = row["top1_fp32"] == row["top1_int8"]
        rows.append(row)
    return rows

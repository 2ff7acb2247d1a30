"""Accuracy on a labelled data set: the int8 outputs of a run against fp32 onnxruntime on the
original model, image by image (``report.json``'s ``accuracy.dataset``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from compiler.calibrate import open_session, run_session

__all__ = ["dataset_accuracy", "fp32_outputs"]


def fp32_outputs(model: onnx.ModelProto | str | Path, inputs: Sequence[np.ndarray]) -> np.ndarray:
    """The first output of ``model`` on onnxruntime (fp32) for each input, flattened: (N, K)."""
    session = open_session(model, ())
    name = session.get_outputs()[0].name
    return np.stack([run_session(session, [name], x)[name].reshape(-1) for x in inputs])


def dataset_accuracy(
    name: str,
    labels: np.ndarray,
    fp32: np.ndarray,
    int8: np.ndarray,
) -> dict[str, Any]:
    """``{"name", "n", "top1_fp32", "top1_int8", "agreement"}`` for (N, K) outputs ``fp32`` and
    ``int8`` (dequantized) of N images with integer ``labels``: top-1 accuracy of each, and the
    fraction of images on which their top-1 classes agree."""
    labels = np.asarray(labels).reshape(-1)
    fp32, int8 = (
        np.asarray(fp32).reshape(len(labels), -1),
        np.asarray(int8).reshape(len(labels), -1),
    )
    top_fp32, top_int8 = fp32.argmax(axis=1), int8.argmax(axis=1)
    return {
        "name": name,
        "n": int(len(labels)),
        "top1_fp32": float(np.mean(top_fp32 == labels)),
        "top1_int8": float(np.mean(top_int8 == labels)),
        "agreement": float(np.mean(top_fp32 == top_int8)),
    }

"""``digits``: the CNN of :mod:`zoo.digits_train`, trained on scikit-learn's handwritten
digits, as an ONNX model - the zoo's one network with trained weights and a real held-out set."""

from __future__ import annotations

import functools

import numpy as np
import onnx

from ._graph import GraphBuilder
from .digits_data import HELD_OUT, Split, load
from .digits_train import EPOCHS, train

__all__ = ["calibration_set", "digits", "held_out", "trained"]


@functools.cache
def _splits() -> tuple[Split, Split]:
    return load()


@functools.cache
def trained(seed: int = 0) -> dict[str, np.ndarray]:
    """The trained float32 parameters for ``seed`` (trained once per process, ~4 s)."""
    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return train(_splits()[0], seed=seed)


def held_out() -> Split:
    """The 360 held-out images (never trained or calibrated on) and their labels."""
    return _splits()[1]


def calibration_set(count: int = 64) -> list[np.ndarray]:
    """The first ``count`` training images, each (1, 1, 8, 8): the default calibration."""
    x = _splits()[0].x
    return [x[i : i + 1] for i in range(min(count, len(x)))]


def digits(*, seed: int = 0) -> onnx.ModelProto:
    """conv1 3x3 1->16 + Relu + MaxPool 2, conv2 3x3 16->32 + Relu + MaxPool 2, Flatten, fc
    128->10, with the weights :func:`trained` for ``seed``; input ``[1, 1, 8, 8]`` (ink 0..1),
    output ``"logits"`` ``[1, 10]``. The same seed gives a byte-identical model."""
    p = trained(seed)
    g = GraphBuilder(seed)
    x = "input"
    for name in ("conv1", "conv2"):
        w, b = (
            g.param(f"{name}.weight", p[f"{name}.weight"]),
            g.param(f"{name}.bias", p[f"{name}.bias"]),
        )
        conv = g.node("Conv", name, [x, w, b], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        x = g.max_pool(f"{name}.pool", g.relu(f"{name}.relu", conv), 2, 2)
    x = g.flatten("flatten", x)
    w, b = g.param("fc.weight", p["fc.weight"]), g.param("fc.bias", p["fc.bias"])
    g.node("Gemm", "fc", [x, w, b], output="logits", transB=1)
    return g.model(
        "digits",
        {"input": [1, 1, 8, 8]},
        {"logits": [1, 10]},
        f"digits CNN trained on scikit-learn's handwritten digits (seed {seed}, {EPOCHS} epochs; "
        f"{HELD_OUT} images held out)",
    )

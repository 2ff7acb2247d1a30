"""The front-end passes, in order, and the one place that runs them (verifying after each)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..ir import Graph
from . import canonicalize, quantize

__all__ = ["FRONT_PASSES", "run_front"]

FRONT_PASSES: list[tuple[str, Callable[..., Graph]]] = [
    # fold Identity/BN/bias Adds, fuse Relu/ReLU6 and residual Adds into conv/gemm (fp32)
    ("canonicalize", canonicalize.run),
    # calibrate scales; int8 weights, int32 biases, fixed-point rescales and clamps
    ("quantize", quantize.run),
]


def run_front(graph: Graph, calibration: Sequence[np.ndarray]) -> Graph:
    """Run :data:`FRONT_PASSES` on an imported fp32 graph; ``graph.verify()`` after each pass."""
    extra: dict[str, tuple[Any, ...]] = {"quantize": (calibration,)}
    graph.verify()
    for name, pass_ in FRONT_PASSES:
        graph = pass_(graph, *extra.get(name, ()))
        graph.verify()
    return graph

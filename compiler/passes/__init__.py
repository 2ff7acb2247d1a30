"""The compiler passes, in order, and the one place that runs them (verifying after each)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from arch.config import AccelConfig

from ..calibrate import Ranges
from ..ir import Graph
from ..plan import Plan
from . import allocate, canonicalize, emit, layout, partition, quantize, schedule, tile

__all__ = ["BACK_PASSES", "FRONT_PASSES", "run_back", "run_front"]

FRONT_PASSES: list[tuple[str, Callable[..., Graph]]] = [
    # fold Identity/BN/bias Adds, fuse Relu/ReLU6 and residual Adds into conv/gemm (fp32)
    ("canonicalize", canonicalize.run),
    # calibrate scales; int8 weights, int32 biases, fixed-point rescales and clamps
    ("quantize", quantize.run),
]


def run_front(
    graph: Graph,
    calibration: Sequence[np.ndarray],
    calib_method: str = "minmax",
    ranges: Ranges | None = None,
) -> Graph:
    """Run :data:`FRONT_PASSES` on an imported fp32 graph; ``graph.verify()`` after each pass.
    ``ranges``: calibration thresholds measured before (see :class:`compiler.calibrate.Ranges`)."""
    extra: dict[str, tuple[Any, ...]] = {"quantize": (calibration, calib_method, ranges)}
    graph.verify()
    for name, pass_ in FRONT_PASSES:
        graph = pass_(graph, *extra.get(name, ()))
        graph.verify()
    return graph


BACK_PASSES: list[tuple[str, Callable[[Plan], Plan]]] = [
    # every conv/pool/add/FC on the accelerator, a final Softmax on the host
    ("partition", partition.run),
    # NHWC tensors with channels padded to lines; host im2col for an RGB first conv
    ("layout", layout.run),
    # m tile x n group x k group per layer, to fit the double-buffered memories
    ("tile", tile.run),
    # loads / computes / stores per step with dependency tokens; a barrier per layer
    ("schedule", schedule.run),
    # DRAM map: program, descriptors, perf records, weights, params, activations
    ("allocate", allocate.run),
    # instructions, descriptor table and DRAM image
    ("emit", emit.run),
]


def run_back(graph: Graph, config: AccelConfig) -> Plan:
    """Run :data:`BACK_PASSES` on a quantized graph; ``plan.verify(stage)`` after each pass."""
    plan = Plan(config, graph)
    for name, pass_ in BACK_PASSES:
        plan = pass_(plan)
        plan.verify(name)
    return plan

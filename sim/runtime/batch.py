"""Run one executable on many inputs: each device program once per input, all of them in one
batch for the backend (on the rtl backend: one simulator process per device program, not one
per input), every layer of every input checked bit for bit against the integer reference."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arch.executable import Executable, check_images
from arch.reference import quantize_input
from sim.runtime.execute import Lane, graph_outputs, run_steps
from sim.runtime.inputs import check_input
from sim.runtime.results import LayerResult
from sim.runtime.run import backend_of, reference_values

__all__ = ["BatchResult", "run_batch"]


@dataclass
class BatchResult:
    """Per input: the graph outputs (fp32), the first layer that was not bit-exact (None when
    all were) and the cycles; the simulators' wall time over the whole batch."""

    backend: str
    outputs: list[dict[str, np.ndarray]]
    mismatches: list[str | None]
    cycles: list[int]
    sim_wall_s: float

    @property
    def bit_exact(self) -> bool:
        return all(m is None for m in self.mismatches)


def _first_mismatch(layers: list[LayerResult]) -> str | None:
    """The first layer's mismatch (a device layer's named after the layer)."""
    for layer in layers:
        if layer.mismatch:
            return layer.mismatch if layer.device == "host" else f"{layer.name}: {layer.mismatch}"
    return None


def run_batch(
    exe: Executable,
    inputs: Sequence[np.ndarray],
    backend: str = "isa",
    *,
    workdir: Path | None = None,
    max_cycles: int = 400_000_000,
) -> BatchResult:
    """Run ``exe`` on ``backend`` once for each fp32 input of ``inputs`` (each of the
    executable's input shape); see the module docstring. An input of another shape, complex or
    not finite is :class:`sim.runtime.inputs.InputError`, an accelerator error
    :class:`sim.runtime.results.RunError`."""
    xs = [check_input(x, exe.input.shape, f"input {i}") for i, x in enumerate(inputs)]
    check_images(exe)
    engine = backend_of(backend)
    lanes = []
    for i, x in enumerate(xs):
        expected: Future[dict[str, np.ndarray]] = Future()
        expected.set_result(reference_values(exe, x))
        quantized = quantize_input(x, exe.input.scale or 1.0, exe.input.zero_point)
        lanes.append(Lane({exe.reference.inputs[0]: quantized}, expected, f"input {i}"))
    run_steps(exe, lanes, engine, max_cycles=max_cycles, workdir=workdir, records=False)
    return BatchResult(
        backend,
        [graph_outputs(exe, lane.values) for lane in lanes],
        [_first_mismatch(lane.layers) for lane in lanes],
        [lane.cycles for lane in lanes],
        sum(lane.sim_seconds for lane in lanes),
    )

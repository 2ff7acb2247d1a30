"""Run an executable on a backend and check it layer by layer.

:func:`run` quantizes the input, runs the executable's steps in order - each device program on
the chosen backend (:mod:`sim.backends.registry`), each host step on the host - reads every
layer's output back from DRAM and compares it bit for bit with the integer reference evaluated
on the executable's reference graph, and reads the per-layer PERF records the program wrote
(the step loop is :mod:`sim.runtime.execute`'s).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from arch.config import AccelConfig
from arch.executable import Executable, check_images
from arch.reference import evaluate, quantize_input
from sim.backends.base import Backend
from sim.backends.registry import NAMES, UnknownBackend, get_backend
from sim.runtime.execute import Lane, graph_outputs, run_steps
from sim.runtime.host import apply_time_bound
from sim.runtime.inputs import check_input
from sim.runtime.results import LayerResult, RunError, RunResult
from sim.waves import selection
from sim.waves.capture import Capture
from sim.waves.capture import start as start_capture
from sim.waves.window import WaveRequest

__all__ = ["BACKENDS", "LayerResult", "RunError", "RunResult", "reference_values", "run"]

BACKENDS = NAMES


def reference_values(exe: Executable, x: np.ndarray) -> dict[str, np.ndarray]:
    """Every tensor of the reference graph from the integer reference ops, for fp32 input."""
    return evaluate(exe.reference, quantize_input(x, exe.input.scale or 1.0, exe.input.zero_point))


def backend_of(name: str) -> Backend:
    """The backend called ``name``; an unknown name is a :class:`RunError`."""
    try:
        return get_backend(name)
    except UnknownBackend as exc:
        raise RunError(str(exc)) from None


def wave_bits(waves: WaveRequest, config: AccelConfig, engine: Backend) -> int:
    """The bits ``waves``' signal selection writes per sample (builds the traced model; a
    pattern that matches no signal is a :class:`sim.waves.window.WaveError`)."""
    header = engine.wave_header(config, waves.fmt)
    if header is None:
        return 0
    return selection.resolve(waves.signals, header)[3]


def traced_capture(waves: WaveRequest, exe: Executable, engine: Backend, name: str) -> Capture:
    """The capture of ``waves`` on ``engine``, its signal selection matched against the traced
    build's names (a pattern that matches none is a :class:`sim.waves.window.WaveError`)."""
    return start_capture(waves, exe.programs, name, engine.wave_header(exe.config, waves.fmt))


def run(
    exe: Executable,
    x: np.ndarray,
    backend: str = "isa",
    *,
    workdir: Path | None = None,
    max_cycles: int = 400_000_000,
    progress: Callable[[dict[str, Any]], None] | None = None,
    waves: WaveRequest | None = None,
    name: str = "run",
    reference: Future[dict[str, np.ndarray]] | None = None,
) -> RunResult:
    """Run ``exe`` on ``backend`` (one of :data:`BACKENDS`) with fp32 input ``x`` and check
    every layer; ``progress`` receives ``{cycles, layers_done, wall_s}`` during RTL runs.
    ``waves`` traces a window of an rtl run into ``waves/<name>-...`` with a GTKWave save file
    (:mod:`sim.waves`). ``reference``: :func:`reference_values` of ``x`` being computed
    elsewhere (runs of one input share it). An input of another shape, complex or not finite is
    :class:`sim.runtime.inputs.InputError`; an image larger than the config's DRAM
    :class:`arch.executable.ExecutableError`."""
    apply_time_bound()  # COSIM_HOST_STEP_SECONDS
    x = check_input(x, exe.input.shape)
    check_images(exe)
    engine = backend_of(backend)
    if waves is not None and not engine.traces:
        raise RunError(f"waveforms need the rtl backend, not {backend!r}")
    capture = traced_capture(waves, exe, engine, name) if waves is not None else None
    quantized = quantize_input(x, exe.input.scale or 1.0, exe.input.zero_point)
    # The integer reference is computed while the simulator runs (it uses another core).
    with ThreadPoolExecutor(max_workers=1) as pool:
        expected = reference if reference is not None else pool.submit(reference_values, exe, x)
        lane = Lane({exe.reference.inputs[0]: quantized}, expected)
        entry = run_steps(
            exe,
            [lane],
            engine,
            max_cycles=max_cycles,
            workdir=workdir,
            progress=progress,
            capture=capture,
        )
    ideal = None if engine.runs_rtl else lane.cycles
    outputs = graph_outputs(exe, lane.values)
    result = RunResult(backend, lane.layers, lane.cycles, lane.sim_seconds, outputs, lane.counters)
    result.ideal_cycles = ideal
    result.hooks = lane.hooks
    result.dram_stall = lane.dram_stall
    result.timeline = lane.timeline
    if capture is not None:
        result.waves = entry
    return result

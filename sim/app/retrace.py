"""A failing window traced again: after an accelerator error, the cycles before it; after a
mismatch, the layer (:func:`failure_dump`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from arch.executable import Executable
from sim.runtime.run import RunError, backend_of, run, wave_bits
from sim.verilate.build import BuildError, SimulationFailed
from sim.verilate.toolchain import ToolchainError
from sim.waves.size import check_window
from sim.waves.window import WaveRequest, resolve

FAILURE_CYCLES = 4000  # traced before an accelerator error


@dataclass
class Retrace:
    """A failing window to trace again (:meth:`Session.failure_dump`): the run's executable,
    input and directory, the window, and the failed run's layers (for a size warning)."""

    exe: Executable
    x: np.ndarray
    out: Path
    window: WaveRequest
    layers: list[Any] | None = None


def failure_cycles(cycle: int) -> tuple[int, int]:
    """The cycle window traced when the accelerator stops with an error at ``cycle``."""
    return max(0, cycle - FAILURE_CYCLES), cycle + 16


def waves_summary(waves: dict[str, Any]) -> str:
    """Where a waveform went, and how to open it."""
    if waves.get("file") is None:
        return f"waveform: {waves['window']['label']}: {waves.get('note', 'no dump')}"
    first, last = waves["traced_cycles"]
    return (
        f"waveform ({waves['window']['label']}, cycles {first}..{last}, "
        f"{waves['bytes'] / 1e6:.2f} MB): {waves['file']}\n"
        f"  open: make waves   (or gtkwave {waves['file']} {waves['savefile']})"
    )


def failure_dump(request: Any, retrace: Retrace, warn: Callable[[str], None]) -> None:
    """Re-run with tracing over the failing window (unless ``no_failure_waves``) and say where
    the dump is; otherwise say the command that makes it. ``request``: the failed run's
    (``backend``, ``no_failure_waves``, ``max_cycles``)."""
    exe, request_window = retrace.exe, retrace.window
    window = resolve(request_window, exe.programs)
    option = (
        f"WAVE_LAYER={request_window.layer}"
        if request_window.layer
        else f"WAVE_CYCLES={window.start}:{window.stop}"
    )
    if not backend_of(request.backend).traces or request.no_failure_waves:
        warn(f"to trace the failing window: make sim ... BACKEND=rtl {option}")
        return
    warn(f"re-running with tracing over the failing window ({window.label})...")
    if retrace.layers:
        bits = wave_bits(request_window, exe.config, backend_of(request.backend))
        check_window(request_window, exe.programs, retrace.layers, exe.config, bits)
    try:
        result = run(
            exe,
            retrace.x,
            request.backend,
            workdir=retrace.out / "sim-waves",
            max_cycles=request.max_cycles,
            waves=request_window,
            name=retrace.out.name,
        )
        if result.waves is not None:
            warn(waves_summary(result.waves))
    except RunError as exc:  # the error again: the dump was written up to it
        warn(f"{exc}\n  open: make waves")
    except (ToolchainError, BuildError, SimulationFailed) as exc:
        warn(f"could not trace the failing window: {exc}")

"""What to trace: a waveform request (format and window) and the window it resolves to.

A run traces one window; outside it nothing is written (sim/hdl/tb_top.v gates the dump):

- by layer (``WAVE_LAYER``): that layer's instruction range;
- by instructions (``WAVE_INSN=a:b``): from the cycle a unit starts an instruction with index
  ``>= a`` until every instruction below ``b`` has retired;
- by cycles (``WAVE_CYCLES=a:b``): the accelerator's cycle counter (the report's cycle
  windows) in ``[a, b)``;
- none of these: the whole run.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from arch.executable import DeviceProgram
from sim.verilate.build import WORK_ROOT

WAVES_DIR = WORK_ROOT / "waves"
FORMATS = ("fst", "vcd")


class WaveError(ValueError):
    """A waveform request that cannot be honoured (bad range, unknown layer, format)."""


def parse_range(text: str, what: str) -> tuple[int, int]:
    """``"a:b"`` (``b`` exclusive, ``a < b``, both non-negative integers) as ``(a, b)``."""
    match = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text)
    if match is None:
        raise WaveError(f"{what} must look like FROM:TO with integers, e.g. 100:200; got {text!r}")
    start, stop = int(match[1]), int(match[2])
    if start >= stop:
        raise WaveError(f"{what} {text!r} is empty: FROM must be below TO (TO is exclusive)")
    return start, stop


@dataclass(frozen=True)
class WaveRequest:
    """Trace a run: ``fmt`` ("fst" or "vcd") and at most one of ``layer``, ``insns``, ``cycles``
    (none: the whole run); ``signals``: which are written (``WAVE_SIGNALS``: "default", "all"
    or comma-separated globs, :mod:`sim.waves.selection`). Dumps go to ``directory`` (default
    ``waves/``)."""

    fmt: str = "fst"
    layer: str | None = None
    insns: tuple[int, int] | None = None
    cycles: tuple[int, int] | None = None
    directory: Path = WAVES_DIR
    signals: str = "default"

    def __post_init__(self) -> None:
        if self.fmt not in FORMATS:
            raise WaveError(f"wave format {self.fmt!r} is not supported; choose fst or vcd")
        if any(not item.strip() for item in self.signals.split(",")):
            raise WaveError(
                f"WAVE_SIGNALS {self.signals!r} has an empty pattern; give `default`, `all` or "
                "comma-separated globs over signal names (dut.accel.load.*)"
            )
        chosen = [n for n in ("layer", "insns", "cycles") if getattr(self, n) is not None]
        if len(chosen) > 1:
            raise WaveError(
                f"choose one wave window, not {' and '.join(chosen)} "
                "(WAVE_LAYER, WAVE_INSN or WAVE_CYCLES)"
            )

    @classmethod
    def parse(
        cls,
        fmt: str | None = None,
        layer: str | None = None,
        insns: str | None = None,
        cycles: str | None = None,
        directory: Path | None = None,
        signals: str | None = None,
    ) -> WaveRequest:
        """From the command-line strings (``WAVE_INSN="a:b"``, ...)."""
        return cls(
            signals=(signals or "default").strip(),
            fmt=(fmt or "fst").lower(),
            layer=layer or None,
            insns=parse_range(insns, "WAVE_INSN") if insns else None,
            cycles=parse_range(cycles, "WAVE_CYCLES") if cycles else None,
            directory=directory or WAVES_DIR,
        )


@dataclass(frozen=True)
class Window:
    """A resolved window: ``by`` is "insn", "cycles" or "all"; ``[start, stop)``."""

    by: str
    start: int
    stop: int
    label: str
    program: int = 0  # index of the traced device program among the executable's

    def plusargs(self) -> list[str]:
        """The plusargs sim/hdl/tb_top.v reads."""
        if self.by == "all":
            return []
        return [f"+wave_by={self.by}", f"+wave_from={self.start}", f"+wave_to={self.stop}"]

    def as_dict(self) -> dict[str, Any]:
        entry = asdict(self)
        del entry["program"]
        return entry


def resolve(request: WaveRequest, programs: list[DeviceProgram]) -> Window:
    """The window of ``request`` among the executable's device programs (a layer's window is in
    its program; instruction and cycle windows are in the first); unknown layers and ranges
    outside the program are errors naming what exists."""
    if request.layer is not None:
        found = [
            (index, layer)
            for index, program in enumerate(programs)
            for layer in program.layers
            if layer.name == request.layer
        ]
        if not found:
            names = [layer.name for program in programs for layer in program.layers]
            close = difflib.get_close_matches(request.layer, names, n=5, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            listed = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
            raise WaveError(
                f"WAVE_LAYER {request.layer!r} is not a layer of this model{hint} "
                f"(layers: {listed}; see the listing)"
            )
        index, layer = found[0]
        start, stop = layer.insn_range
        label = f"layer {request.layer} (instructions {start}:{stop})"
        return Window("insn", start, stop, label, index)
    if request.insns is not None:
        start, stop = request.insns
        count = programs[0].instructions
        if stop > count:
            raise WaveError(
                f"WAVE_INSN {start}:{stop} runs past the program's {count} instructions "
                f"(valid: 0:{count})"
            )
        return Window("insn", start, stop, f"instructions {start}:{stop}")
    if request.cycles is not None:
        start, stop = request.cycles
        return Window("cycles", start, stop, f"cycles {start}:{stop}")
    return Window("all", 0, 2**64 - 1, "whole run")

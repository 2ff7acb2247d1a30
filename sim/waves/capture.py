"""A traced run: where the dump goes, the plusargs that gate it, and what is written after the
run (the ``.gtkw`` save file with layer markers, and the report's ``waves`` entry)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from arch.executable import DeviceProgram
from sim.waves import selection
from sim.waves.dump import Dump
from sim.waves.savefile import write_savefile
from sim.waves.window import WaveRequest, Window, resolve


class _Layer(Protocol):
    name: str
    cycle_window: tuple[int, int]


class _Timing(Protocol):
    def cycle_time(self, cycle: int) -> int: ...


@dataclass(frozen=True)
class Capture:
    """One run's waveform: ``dump`` is ``<directory>/<name>.<fmt>``; ``select`` the signal
    selection handed to the harness (None: every signal)."""

    request: WaveRequest
    window: Window
    dump: Path
    program: DeviceProgram  # the traced device program
    select: Path | None = None
    signals: int = 0  # signals written
    bits: int = 0  # their bits

    @property
    def trace(self) -> tuple[Path, list[str], Path | None]:
        """(dump file, plusargs, selection) for :func:`sim.backends.rtl.run_programs`."""
        return self.dump, self.window.plusargs(), self.select

    def finish(self, timing: _Timing, layers: Sequence[_Layer], rtl_dir: Path) -> dict[str, Any]:
        """After the run: write the save file (markers at the layer boundaries inside the traced
        span) and return the report entry (files, sizes, window, traced cycles)."""
        entry: dict[str, Any] = {
            "format": self.request.fmt,
            "window": self.window.as_dict(),
            "signals": self.request.signals,
            "signal_count": self.signals,
            "signal_bits": self.bits,
            "file": None,
            "savefile": None,
        }
        if not self.dump.exists():
            entry["note"] = "the window was never reached: nothing was traced"
            return entry
        dump = Dump(self.dump)
        first, last = dump.span()
        markers = layer_markers(timing, layers, (first, last))
        wrong = first_wrong_store(dump, timing, layers)
        if wrong is not None:
            markers = sorted([*markers, wrong])
        title = f"{self.window.label}: {self.dump.name}"
        savefile = write_savefile(self.dump, rtl_dir, markers, title, (first, last))
        cycle0 = timing.cycle_time(0)
        step = max(1, timing.cycle_time(1) - cycle0)
        entry.update(
            file=str(self.dump),
            savefile=str(savefile),
            bytes=self.dump.stat().st_size,
            traced_cycles=[(first - cycle0) // step, (last - cycle0) // step],
            markers=[label for _time, label in markers],
        )
        return entry


def layer_markers(
    timing: _Timing, layers: Sequence[_Layer], span: tuple[int, int]
) -> list[tuple[int, str]]:
    """(time, label) markers at the start and end of every layer the traced ``span`` shows
    part of: ``fc1 start (cycle 120)``; an edge outside the span is put on the span's edge
    and says so; markers at one time share one label (``fc1 end | fc2 start``)."""
    first, last = span
    at: dict[int, list[str]] = {}
    for layer in layers:
        start, end = (timing.cycle_time(cycle) for cycle in layer.cycle_window)
        if end < first or start > last:
            continue
        for time, edge, cycle in ((start, "start", layer.cycle_window[0]),
                                  (end, "end", layer.cycle_window[1])):  # fmt: skip
            where = f"cycle {cycle}" + ("" if first <= time <= last else ", outside the window")
            at.setdefault(min(max(time, first), last), []).append(f"{layer.name} {edge} ({where})")
    return [(time, " | ".join(labels)) for time, labels in sorted(at.items())]


def first_wrong_store(
    dump: Dump, timing: _Timing, layers: Sequence[_Layer]
) -> tuple[int, str] | None:
    """A marker at the last write, within its layer, of the first value of the first
    mismatching layer that differs from the reference (the store that put it there)."""
    for layer in layers:
        address = getattr(layer, "mismatch_addr", None)
        if address is None:
            continue
        end = timing.cycle_time(layer.cycle_window[1])
        writes = [time for time in dump.writes_to(address) if time <= end]
        if writes:
            return writes[-1], f"{layer.name}: first wrong value stored (DRAM 0x{address:x})"
        return None
    return None


def start(
    request: WaveRequest, programs: list[DeviceProgram], name: str, header: Path | None = None
) -> Capture:
    """Resolve ``request`` for an executable's device ``programs``; the dump is named after
    ``name`` and the window. An older dump of the same name is removed, so a run that never
    opens the window leaves none behind. ``header``: the traced build's dump header, which the
    signal selection is matched against (None: every signal is written)."""
    window = resolve(request, programs)
    label = name if window.by == "all" else f"{name}-{window.by}-{window.start}"
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
    dump = request.directory / f"{stem}.{request.fmt}"
    dump.parent.mkdir(parents=True, exist_ok=True)
    dump.unlink(missing_ok=True)
    capture = Capture(request, window, dump, programs[window.program])
    if header is None:
        return capture
    lines, _names, count, bits = selection.resolve(request.signals, header)
    select = selection.write_select(lines, request.directory / ".select" / f"{stem}.txt")
    return dataclasses.replace(capture, select=select, signals=count, bits=bits)

"""Reading a dump (FST or VCD) back with pywellen: signal names, value changes, and the
instructions each unit ran in the traced window."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pywellen

from sim.waves.signals import TOP

UNITS = ("load", "compute", "store")


class Dump:
    """One waveform file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.wave = pywellen.Waveform(str(path))
        self.vars = {var.full_name: var for var in self.wave.all_vars()}

    def names(self) -> set[str]:
        return set(self.vars)

    def widths(self) -> dict[str, int]:
        """Signal name -> bits."""
        return {name: var.bitwidth for name, var in self.vars.items()}

    def changes(self, names: Iterable[str]) -> dict[str, list[tuple[int, int]]]:
        """``{name: [(time, value), ...]}``: each signal's first traced value and its changes.
        Values with X or Z bits are skipped."""
        wanted = [self.vars[name] for name in names]
        by_id: dict[str, list[str]] = {}
        for var in wanted:
            by_id.setdefault(str(var.signal_ref), []).append(var.full_name)
        out: dict[str, list[tuple[int, int]]] = {var.full_name: [] for var in wanted}

        def record(time: int, signal: object, value: object) -> None:
            if isinstance(value, int):
                for name in by_id.get(str(signal), ()):
                    out[name].append((time, value))

        self.wave.stream_changes(record, wanted)
        return out

    def span(self) -> tuple[int, int]:
        """First and last traced time (of the clock)."""
        clock = self.changes([f"{TOP}.clk"])[f"{TOP}.clk"]
        return clock[0][0], clock[-1][0]

    def writes_to(self, address: int) -> list[int]:
        """Times at which the DRAM write port carries a write of byte ``address`` (valid,
        the beat's address, its strobe set), one per change of the port's signals."""
        port = f"{TOP}.dut.dram_wr__"
        names = [f"{port}valid", f"{port}ready", f"{port}payload.addr", f"{port}payload.strb"]
        changes = self.changes(names)
        bus = self.vars[f"{port}payload.strb"].bitwidth
        times = sorted({time for name in names for time, _value in changes[name]})
        hits = []
        for time in times:
            valid, ready, addr, strb = (_value_at(changes[name], time) for name in names)
            lane = address % bus
            if valid and ready and addr - addr % bus == address - lane and strb >> lane & 1:
                hits.append(time)
        return hits

    def instructions(self) -> dict[str, list[tuple[int, int]]]:
        """Per unit, the (program index, opcode) of every instruction it held in the window, in
        order: one entry per change of its current-instruction index."""
        out = {}
        for unit in UNITS:
            index_name = f"{TOP}.dut.accel.{unit}.index"
            opcode_name = f"{TOP}.dut.accel.{unit}.opcode"
            changes = self.changes([index_name, opcode_name])
            opcodes = changes[opcode_name]
            sequence = []
            for time, index in changes[index_name]:
                opcode = _value_at(opcodes, time)
                sequence.append((index, opcode))
            out[unit] = sequence
        return out


def _value_at(changes: list[tuple[int, int]], time: int) -> int:
    """The value of a signal at ``time`` from its change list."""
    value = changes[0][1]
    for at, new in changes:
        if at > time:
            break
        value = new
    return value

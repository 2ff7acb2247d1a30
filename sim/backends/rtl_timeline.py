"""The RTL's own timeline: the spans and token moves of each run, read from the events that the
testbench writes with ``+timeline=<file>`` (sim/hdl/tb_top.v) - nothing is copied from the ISA
simulator.

The testbench samples, at every rising clock edge of a run, each unit's ``busy`` (its frame's RUN
state: what the ``*_busy`` counters count) and the four token counters, and writes a line when
one changes, with the cycle counter and the DRAM byte counters at that edge:

- ``R``: a run starts (the cycle counter restarts);
- ``U unit busy cycle index opcode dram_read dram_write``: unit 0 (load), 1 (compute) or 2
  (store) starts (busy 1) or ends (busy 0) instruction ``index``;
- ``T counter cycle count``: token counter 0 (load->compute), 1 (compute->load), 2
  (compute->store) or 3 (store->compute) holds ``count`` tokens.

A span's cycles are the edges at which its unit was busy - exactly what the unit's busy counter
adds - and its DRAM bytes are what the DRAM counters moved while it ran (bytes read for a load,
written for a store; a load's include the instruction words fetched in the same cycles).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from arch.isa import Opcode
from sim.backends.isa_results import Span, TokenMove

__all__ = ["PLUSARG", "RunTimeline", "parse", "read"]

PLUSARG = "timeline"
UNITS = ("load", "compute", "store")
#: Each token counter's (source, target) queue names, as the ISA simulator names them.
CHANNELS = (("LOAD", "COMPUTE"), ("COMPUTE", "LOAD"), ("COMPUTE", "STORE"), ("STORE", "COMPUTE"))


class TimelineError(ValueError):
    """The testbench's event file does not read as the format above (a harness bug)."""


@dataclass
class RunTimeline:
    """One run's spans (in the order they ended) and token moves."""

    spans: list[Span] = field(default_factory=list)
    tokens: list[TokenMove] = field(default_factory=list)


@dataclass
class _Open:
    start: int
    index: int
    opcode: Opcode
    dram: tuple[int, int]


def parse(lines: list[str], where: str = "timeline") -> list[RunTimeline]:
    """The runs of an event file's ``lines`` (see the module docstring)."""
    runs: list[RunTimeline] = []
    running: dict[int, _Open] = {}
    depth = [0] * len(CHANNELS)
    for number, line in enumerate(lines, start=1):
        fields = line.split()
        try:
            if fields == ["R"]:
                runs.append(RunTimeline())
                running.clear()
                depth = [0] * len(CHANNELS)
            elif fields[0] == "U" and runs:
                unit, busy, cycle, index, opcode, read, write = map(int, fields[1:])
                if busy:
                    running[unit] = _Open(cycle, index, Opcode(opcode), (read, write))
                else:
                    runs[-1].spans.append(_span(unit, running.pop(unit), cycle, read, write))
            elif fields[0] == "T" and runs:
                counter, cycle, count = map(int, fields[1:])
                source, target = CHANNELS[counter]
                runs[-1].tokens.append(TokenMove(cycle, source, target, count - depth[counter]))
                depth[counter] = count
            else:
                raise ValueError("not an event of a run")
        except (ValueError, KeyError, IndexError) as exc:
            raise TimelineError(f"{where}:{number}: {line.strip()!r}: {exc}") from None
    return runs


def _span(unit: int, begun: _Open, cycle: int, read: int, write: int) -> Span:
    moved = read - begun.dram[0] if UNITS[unit] == "load" else 0
    if UNITS[unit] == "store":
        moved = write - begun.dram[1]
    return Span(begun.index, UNITS[unit], begun.opcode, begun.start, cycle - begun.start, moved)


def read(path: Path) -> list[RunTimeline]:
    """The runs recorded in ``path``."""
    return parse(path.read_text().splitlines(), str(path))

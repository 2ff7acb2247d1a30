"""An instruction-level timeline of a device program, in the Chrome trace-event format.

Perfetto UI (ui.perfetto.dev) and ``chrome://tracing`` open the JSON. One process per device
program; one track (thread) per unit - LOAD, the compute unit's engines (array: GEMM and CONV;
line: ACCUM and POOL; window: DWCONV), STORE - with one slice per instruction (its layer, op,
index and cycles); counters for the dependency-token queues between the units and for the DRAM
bytes of the loads and stores running; layer ends (PERF records) as instant markers. Time is in
accelerator cycles, written as microseconds (1 us on the ruler = 1 cycle).

The ISA simulator records the spans (:class:`~sim.backends.isa_results.Span`) and token moves
(:class:`~sim.backends.isa_results.TokenMove`) of every run
(:class:`sim.backends.isa_queues.QueueScheduler`); the rtl backend reads its own from the
testbench's events (:mod:`sim.backends.rtl_timeline`: each unit's busy edges, the token
counters); :func:`trace_events` turns either into events.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arch.executable import DeviceProgram
from arch.isa import Opcode
from sim.backends.isa_results import ENGINE_OF, Span, TokenMove

__all__ = ["TRACKS", "ProgramTimeline", "busy_cycles", "trace", "trace_events", "write"]

#: Every track, top to bottom.
TRACKS: tuple[str, ...] = ("load", *dict.fromkeys(ENGINE_OF.values()), "compute: other", "store")


@dataclass
class ProgramTimeline:
    """What one device program's run recorded, and the run's cycle at which it started."""

    program: DeviceProgram
    spans: list[Span] = field(repr=False)
    tokens: list[TokenMove] = field(repr=False)
    first_cycle: int = 0


def busy_cycles(spans: Sequence[Span]) -> dict[str, int]:
    """Cycles each unit (load, compute, store) spent running instructions."""
    busy: dict[str, int] = {}
    for span in spans:
        busy[span.unit] = busy.get(span.unit, 0) + span.cycles
    return busy


def trace_events(
    program: DeviceProgram, spans: Sequence[Span], tokens: Sequence[TokenMove], pid: int = 1
) -> list[dict[str, Any]]:
    """The trace events of one program's run (see the module docstring)."""
    tid = {track: number for number, track in enumerate(TRACKS, start=1)}
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": program.name}}
    ]
    for track, number in tid.items():
        meta = {"pid": pid, "tid": number}
        events.append({"ph": "M", "name": "thread_name", **meta, "args": {"name": track}})
        events.append(
            {"ph": "M", "name": "thread_sort_index", **meta, "args": {"sort_index": number}}
        )
    for span in spans:
        layer = program.layer_of(span.index)
        events.append(
            {
                "ph": "X",
                "name": span.opcode.name,
                "cat": span.unit,
                "pid": pid,
                "tid": tid[span.track],
                "ts": span.start,
                "dur": span.cycles,
                "args": {
                    "insn": span.index,
                    "layer": layer.name if layer is not None else None,
                    "op": layer.op if layer is not None else None,
                    "cycles": span.cycles,
                    "dram_bytes": span.dram_bytes,
                },
            }
        )
        if span.opcode is Opcode.PERF and layer is not None:
            events.append(
                {"ph": "i", "s": "p", "name": f"end of {layer.name}", "pid": pid, "tid": 0,
                 "ts": span.start, "args": {"layer": layer.name, "op": layer.op}}
            )  # fmt: skip
    events += _token_counters(tokens, pid) + _dram_counter(spans, pid)
    return events


def _token_counters(tokens: Sequence[TokenMove], pid: int) -> list[dict[str, Any]]:
    depth: dict[str, int] = {}
    events = []
    for move in sorted(tokens, key=lambda m: (m.time, -m.delta)):
        channel = f"tokens {move.source}->{move.target}"
        depth[channel] = depth.get(channel, 0) + move.delta
        events.append(
            {"ph": "C", "name": channel, "pid": pid, "ts": move.time,
             "args": {"tokens": depth[channel]}}
        )  # fmt: skip
    return events


def _dram_counter(spans: Sequence[Span], pid: int) -> list[dict[str, Any]]:
    """DRAM bytes of the loads and stores running at each moment."""
    changes: dict[int, int] = {}
    for span in spans:
        if span.dram_bytes and span.cycles:
            changes[span.start] = changes.get(span.start, 0) + span.dram_bytes
            end = span.start + span.cycles
            changes[end] = changes.get(end, 0) - span.dram_bytes
    events, level = [], 0
    for time in sorted(changes):
        level += changes[time]
        events.append(
            {"ph": "C", "name": "DRAM bytes in flight", "pid": pid, "ts": time,
             "args": {"bytes": level}}
        )  # fmt: skip
    return events


def trace(runs: Sequence[ProgramTimeline]) -> dict[str, Any]:
    """The whole trace of a run: one process per device program, each from the cycle it started
    at (host steps between programs take no cycles)."""
    events: list[dict[str, Any]] = []
    for pid, run in enumerate(runs, start=1):
        for event in trace_events(run.program, run.spans, run.tokens, pid):
            if "ts" in event:
                event["ts"] += run.first_cycle
            events.append(event)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"time_unit": "1 us on the ruler is 1 accelerator cycle"},
    }


def write(runs: Sequence[ProgramTimeline], path: Path) -> Path | None:
    """``path`` holding the trace of ``runs`` (compact JSON); None if nothing was recorded."""
    if not runs:
        return None
    path.write_text(json.dumps(trace(runs), separators=(",", ":")))
    return path

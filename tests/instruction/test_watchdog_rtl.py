"""WATCHDOG on the RTL: the one error no regression program raised (docs/coverage.md).

The watchdog stops a run when nothing moves for ``watchdog_cycles`` cycles: no unit retires, no
queue has room, no DRAM data arrives or is written, the array is idle. With a correct RTL a
token deadlock is caught first (DEADLOCK after a few cycles of every unit blocked), so the
watchdog needs a window where a unit is busy but nothing moves: here a config whose DRAM
latency (64 cycles) is longer than its watchdog (16), and a program that fills every queue -
compute and store instructions waiting for tokens no LOAD pushes, then more LOADs than the load
queue holds - so that while a LOAD waits for DRAM, nothing moves. The same program with the
watchdog longer than the DRAM latency runs its LOADs and then stops with DEADLOCK instead (the
tokens never come), at the first compute instruction, as the ISA simulator says.
"""

from __future__ import annotations

import dataclasses

import pytest

from arch.config import PRESETS
from sim.backends.rtl import run_programs
from tests.instruction.bad_programs import END, Case, act_load, device_run, isa_outcome, word

pytestmark = pytest.mark.simulator

SLOW_DRAM = dataclasses.replace(PRESETS["tiny"], dram_latency=64, watchdog_cycles=16)
PATIENT = dataclasses.replace(SLOW_DRAM, watchdog_cycles=1 << 16)


def _every_queue_full(depth: int) -> Case:
    # a queue holds `depth` instructions, its waiting head included
    waiting_compute = [word("sync", "pop_prev", queue="COMPUTE")] * depth
    waiting_store = [word("sync", "pop_prev", queue="STORE")] * depth
    loads = [word("load", desc=0)] * (3 * depth)
    return Case(
        "every_queue_full",
        [*waiting_compute, *waiting_store, *loads, END],
        descs=[act_load(SLOW_DRAM, 2)],
    )


def test_watchdog_stops_a_run_where_nothing_moves(tmp_path):
    case = _every_queue_full(SLOW_DRAM.queue_depth)
    queued = 2 * SLOW_DRAM.queue_depth  # the compute and store instructions
    [fast] = run_programs(SLOW_DRAM, [device_run(case)], tmp_path / "watchdog")
    [slow] = run_programs(PATIENT, [device_run(case)], tmp_path / "patient")
    assert not fast.timeout and not fast.done
    assert fast.error_code == "WATCHDOG", fast.error_code
    # fetch was stuck on a LOAD that found the load queue full
    assert queued < fast.error_index < len(case.words) - 1, fast.error_index
    # a watchdog longer than the DRAM latency: the LOADs run, then the token deadlock is seen
    assert (slow.error_code, slow.error_index) == ("DEADLOCK", 0)
    assert isa_outcome(PATIENT, case) == ("DEADLOCK", 0)


# The instruction fetch is stuck at when every queue is full and a LOAD waits for DRAM: the
# watchdog names it (fetch's pc), whatever its opcode. Each word below goes to a full queue
# (a compute or store word, or END, which waits for every queue to drain); it never executes.
STUCK_AT = {
    "GEMM": word("gemm"),
    "ACCUM": word("accum"),
    "POOL": word("pool"),
    "DWCONV": word("dwconv"),
    "CONV": word("conv"),
    "SYNC": word("sync", queue="COMPUTE"),
    "STORE": word("store"),
    "PERF": word("perf"),
    "END": END,
}


def _stuck_at(opcode: str, loads: int) -> Case:
    depth = SLOW_DRAM.queue_depth
    waiting_compute = [word("sync", "pop_prev", queue="COMPUTE")] * depth
    waiting_store = [word("sync", "pop_prev", queue="STORE")] * depth
    body = [*waiting_compute, *waiting_store, *[word("load", desc=0)] * loads, STUCK_AT[opcode]]
    return Case(
        f"stuck_at_{opcode}", body if opcode == "END" else [*body, END], [act_load(SLOW_DRAM, 2)]
    )


def test_watchdog_names_the_instruction_fetch_is_stuck_at(tmp_path):
    """Every opcode at the watchdog's index (functional coverage: opcode x WATCHDOG): the load
    queue holds `depth` LOADs besides the one running, so the word after them finds its own
    queue full while the first LOAD still waits for DRAM."""
    loads = SLOW_DRAM.queue_depth + 1
    cases = [_stuck_at(op, loads) for op in STUCK_AT]
    results = run_programs(SLOW_DRAM, [device_run(case) for case in cases], tmp_path)
    got = {op: (r.error_code, r.error_index) for op, r in zip(STUCK_AT, results, strict=True)}
    stuck = 2 * SLOW_DRAM.queue_depth + loads  # the index of the word after the LOADs
    assert got == dict.fromkeys(STUCK_AT, ("WATCHDOG", stuck))

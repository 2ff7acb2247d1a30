"""WATCHDOG on the RTL: the one error no regression program raised (docs/coverage.md).

The watchdog stops a run when nothing moves for ``watchdog_cycles`` cycles: no instruction
enters a queue, no unit retires, no DRAM data arrives or is written, the array is idle. Waiting
for DRAM is no progress, so a watchdog shorter than the DRAM latency fires at the first fetch:
here a tiny variant whose DRAM latency (40) is longer than its watchdog (16) stops every program
at instruction 0, as the ISA simulator says. (A queue that merely had room used to count as
progress: such a watchdog, even ``watchdog_cycles=1``, never fired on a correct program.) The
same programs with a watchdog longer than the DRAM latency end as the ISA simulator says: done,
or DEADLOCK at the first compute instruction when the tokens never come.
"""

from __future__ import annotations

import dataclasses

import pytest

from arch.config import PRESETS
from sim.backends.rtl import run_programs
from tests.instruction.bad_programs import (
    END,
    Case,
    act_load,
    device_run,
    isa_outcome,
    rtl_outcome,
    word,
)

pytestmark = pytest.mark.simulator

# The patient one is the DMA sweep's slow-DRAM config (tiny's watchdog): one build serves both.
PATIENT = dataclasses.replace(PRESETS["tiny"], dram_latency=40, dram_bytes_per_cycle=16)
SLOW_DRAM = dataclasses.replace(PATIENT, watchdog_cycles=16)


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


def _one_load() -> Case:
    return Case("one_load", [word("load", desc=0), END], descs=[act_load(SLOW_DRAM, 2)])


def test_a_watchdog_shorter_than_the_dram_latency_fires_as_the_isa_simulator_says(tmp_path):
    cases = [_one_load(), _every_queue_full(SLOW_DRAM.queue_depth)]
    fast = run_programs(SLOW_DRAM, [device_run(case) for case in cases], tmp_path / "watchdog")
    slow = run_programs(PATIENT, [device_run(case) for case in cases], tmp_path / "patient")
    got = [rtl_outcome(r) for r in (*fast, *slow)]
    want = [isa_outcome(config, case) for config in (SLOW_DRAM, PATIENT) for case in cases]
    assert got == want
    # independently of the ISA simulator: the first fetch's 40 quiet cycles stop both programs;
    # a long watchdog runs the LOAD to END, and the tokens never come to the compute queue
    assert want == [("WATCHDOG", 0), ("WATCHDOG", 0), ("done", None), ("DEADLOCK", 0)]


# The word fetch waits for when the watchdog fires: the first, whatever its opcode (functional
# coverage: opcode x WATCHDOG, an undecodable word's too). None runs; each is followed by END.
FIRST_WORD = {
    "LOAD": word("load", desc=0),
    "GEMM": word("gemm"),
    "ACCUM": word("accum"),
    "POOL": word("pool"),
    "DWCONV": word("dwconv"),
    "CONV": word("conv"),
    "SYNC": word("sync", queue="COMPUTE"),
    "STORE": word("store"),
    "PERF": word("perf"),
    "END": END,
    "ILLEGAL": 13,  # an undecodable word (opcode 13): fetch waits for it, never decodes it
}


def test_watchdog_names_the_instruction_fetch_waits_for(tmp_path):
    cases = [
        Case(f"first_{op}", [first] if op == "END" else [first, END], [act_load(SLOW_DRAM, 2)])
        for op, first in FIRST_WORD.items()
    ]
    results = run_programs(SLOW_DRAM, [device_run(case) for case in cases], tmp_path)
    got = {op: rtl_outcome(r) for op, r in zip(FIRST_WORD, results, strict=True)}
    assert got == dict.fromkeys(FIRST_WORD, ("WATCHDOG", 0))
    assert [isa_outcome(SLOW_DRAM, case) for case in cases] == [("WATCHDOG", 0)] * len(cases)

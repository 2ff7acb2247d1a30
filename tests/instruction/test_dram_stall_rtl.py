"""Instruction level under a hostile DRAM (sim/backends/dram_stall.py): the kernel programs and
seeded random programs on the tiny config with the testbench DRAM dropping ``ready`` on reads
and writes and delaying reads, bit for bit equal to the ISA simulator with guard bands intact.

One simulator process on the tiny build of every other instruction test (the profile is chosen
per run, not built in): each kernel runs unstalled and under one profile, the profiles taking
turns over the programs (every profile meets kernels and random programs), so the stalled runs
must be slower and the unstalled ones see no pause. A program of PERF records (16 write beats
each on tiny) runs under heavy write stalls: every record whole, with its tag and the MACs.
``make test DRAM_STALL=heavy`` runs every RTL test under one profile.
"""

from dataclasses import replace

import numpy as np
import pytest

from arch import isa
from arch.config import PRESETS
from sim.backends import dram_stall
from sim.backends.rtl import run_programs
from tests.instruction.rtl_compare import Outcome, assert_guards, assert_same_dram, prepare
from tests.instruction.test_perf_counters_rtl import TAGS, _outside_records, _program, _records
from tests.instruction.test_rtl_vs_isa import kernel_programs
from tests.random_programs import program_seeds, random_programs

pytestmark = pytest.mark.simulator
CONFIG = PRESETS["tiny"]
STALLED = ("light", "heavy", "bursty")


def test_programs_bit_exact_under_every_stall_profile(tmp_path):
    kernels = kernel_programs(CONFIG, seed=17)
    randoms = random_programs(CONFIG, program_seeds(3, base=41))
    prepared = [prepare(CONFIG, n, b) for n, b in {**kernels, **randoms}.items()]
    cases = [(p, f"{STALLED[i % len(STALLED)]}:{i + 1}") for i, p in enumerate(prepared)]
    cases += [(p, "none") for p in prepared if p.name in kernels]
    perf_builder, records = _program(seed=23)
    perf = prepare(CONFIG, "perf", perf_builder)
    runs = [replace(p.run, dram_stall=stall) for p, stall in cases]
    *results, perf_rtl = run_programs(
        CONFIG, [*runs, replace(perf.run, dram_stall="heavy:9")], tmp_path
    )
    check_perf_records(perf, records, perf_rtl)
    cycles: dict[tuple[str, bool], int] = {}
    for (p, stall), rtl in zip(cases, results, strict=True):
        name = f"{p.name} under {stall}"
        assert p.isa_error is None, f"{name}: {p.isa_error}"
        assert rtl.done, f"{name}: RTL ended with {rtl.error_code} (cycle {rtl.cycles})"
        assert_same_dram(Outcome(name, rtl, p.isa, None, p.guard.size, p.guard))
        profile, seed = stall.partition(":")[::2]
        assert (rtl.dram_stall["profile"], rtl.dram_stall["seed"]) == (profile, int(seed or 0))
        paused = sum(rtl.dram_stall[k] for k in dram_stall.COUNTS)
        assert (paused > 0) == (profile != "none"), f"{name}: {rtl.dram_stall}"
        cycles[p.name, profile != "none"] = rtl.cycles
    for name in kernels:
        assert cycles[name, True] > cycles[name, False], f"{name}: stalls cost no cycle"


def check_perf_records(perf, addresses, rtl) -> None:
    """The PERF program: DRAM as the ISA simulator's outside the records (they hold cycles),
    each record written whole - its tag, its MACs as the ISA simulator counted them."""
    assert rtl.done and rtl.dram_stall["write_paused_cycles"] > 0, rtl.error_code
    assert_guards("perf", perf.guard, rtl=rtl.dram, isa=perf.isa.dram)
    outside = _outside_records(rtl.dram.size, addresses)
    np.testing.assert_array_equal(rtl.dram[outside], perf.isa.dram[: rtl.dram.size][outside])
    got = _records(rtl.dram, addresses)
    assert [r["tag"] for r in got] == list(TAGS)
    assert got[-1]["macs"] == perf.isa.stats.macs == rtl.perf["macs"]
    assert all(got[n]["cycles"] < got[n + 1]["cycles"] < rtl.cycles for n in range(2))
    assert isa.PERF_RECORD.nbytes // CONFIG.dram_bytes_per_cycle > 1  # records of many beats

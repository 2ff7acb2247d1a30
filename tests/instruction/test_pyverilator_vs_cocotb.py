"""The pyverilator backend runs the same programs as the cocotb backend with the same outcome:
kernels, seeded random programs, bad programs and a timeout on the tiny config give identical
DRAM, status (done / error / timeout, error code and index) and every performance counter,
including cycles; valid programs also leave the ISA simulator's DRAM. The random programs run
with a hostile testbench DRAM (one stall profile each, sim/backends/dram_stall.py): the same
seeded pauses on both backends. Ticking the clock from Python (pyverilator's own API) gives the
same results as the C++ clock loop."""

from dataclasses import replace

import numpy as np
import pytest

from arch.config import PRESETS
from sim.backends import dram_stall
from sim.backends import pyverilator as pyverilator_backend
from sim.backends.base import DeviceResult, DeviceRun
from sim.backends.rtl import run_programs
from tests.instruction.rtl_compare import assert_guards, prepare
from tests.instruction.test_rtl_vs_isa import EXPECTED_CODES, bad_programs, kernel_programs
from tests.random_programs import program_seeds, random_programs

pytestmark = pytest.mark.simulator
CONFIG = PRESETS["tiny"]
STATUS = ("done", "error", "timeout", "error_code", "error_index", "perf", "dram_stall")
STALLS = ("light:3", "heavy:4", "bursty:5")  # the random programs' DRAM, in turn


def programs():
    """(name, DeviceRun, guard, expected DRAM or None) for kernels, random, bad and timed-out
    programs; every image has guard bands (sim/runtime/guard.py)."""
    random = random_programs(CONFIG, program_seeds(3, base=5))
    valid = {**kernel_programs(CONFIG, seed=29), **random}
    out = []
    for name, builder in valid.items():
        p = prepare(CONFIG, name, builder, max_cycles=200_000)
        assert p.isa_error is None, f"{name}: {p.isa_error}"
        run = replace(p.run, dram_stall=STALLS[len(out) % 3]) if name in random else p.run
        out.append((name, run, p.guard, p.isa.dram[: p.guard.size]))
    bad = bad_programs(CONFIG)
    builder = bad["illegal_opcode"]
    launch = builder.finish()
    second = launch.insn_base + 16
    builder.dram[second] = (builder.dram[second] & 0xF0) | 13  # as test_rtl_vs_isa does
    builder.finish = lambda: launch  # already placed
    for name, builder in bad.items():
        p = prepare(CONFIG, name, builder, max_cycles=200_000)
        out.append((name, p.run, p.guard, None))
    first = out[0]
    timeout = DeviceRun(first[1].image, first[1].launch, max_cycles=300, dump_size=first[2].size)
    out.append(("timeout", timeout, first[2], None))
    return out


def assert_same(name: str, got: DeviceResult, want: DeviceResult) -> None:
    for field in STATUS:
        assert getattr(got, field) == getattr(want, field), (
            f"{name}: {field} {getattr(got, field)} (pyverilator) != "
            f"{getattr(want, field)} (cocotb)"
        )
    diff = np.flatnonzero(got.dram != want.dram)
    assert got.dram.size == want.dram.size and diff.size == 0, (
        f"{name}: {diff.size} DRAM bytes differ, first at 0x{int(diff[0]):x}"
    )


def test_programs_match_the_cocotb_backend(tmp_path):
    cases = programs()
    runs = [run for _, run, _, _ in cases]
    cocotb = run_programs(CONFIG, runs, tmp_path)
    pyv = pyverilator_backend.run_programs(CONFIG, runs)
    for (name, run, guard, expected), got, want in zip(cases, pyv, cocotb, strict=True):
        assert_guards(name, guard, pyverilator=got, cocotb=want)
        assert_same(name, got, want)
        profile = dram_stall.from_env(run.dram_stall).profile.name  # (COSIM_DRAM_STALL: all)
        assert got.dram_stall["profile"] == profile, f"{name}: {got.dram_stall}"
        assert (got.dram_stall["read_paused_cycles"] > 0) == (profile != "none"), name
        if expected is not None:
            assert got.done and want.done, f"{name}: ended with {got.error_code}"
            assert np.array_equal(got.dram, expected), f"{name}: pyverilator DRAM != ISA simulator"
            assert np.array_equal(want.dram, expected), f"{name}: cocotb DRAM != ISA simulator"
    outcomes = {case[0]: result.error_code for case, result in zip(cases, pyv, strict=True)}
    for name, code in EXPECTED_CODES.items():
        assert outcomes[name] == code, f"{name}: {outcomes[name]}"
    timeout = pyv[-1]
    assert timeout.timeout and not timeout.done and not timeout.error


def test_python_ticks_match_the_cpp_clock_loop():
    cases = [case for case in programs() if case[0] in ("conv3x3_s2", "descriptor_out_of_range")]
    runs = [run for _, run, _, _ in cases]
    ticked = pyverilator_backend.run_programs(CONFIG, runs, stepping="tick")
    chunked = pyverilator_backend.run_programs(CONFIG, runs, stepping="chunk")
    for (name, _, _, _), got, want in zip(cases, ticked, chunked, strict=True):
        assert_same(name, got, want)
    assert ticked[0].done and ticked[1].error_code == "BAD_DESCRIPTOR"
    with pytest.raises(ValueError, match="unknown stepping 'ticks'; choose one of chunk, tick"):
        pyverilator_backend.run_programs(CONFIG, runs, stepping="ticks")

"""The three ways the accelerator is clocked agree bit for bit: the normal cocotb run (clock
generated in C++ by sim/csrc/cocotb_main.cpp, Python asleep between start and done), a cocotb run
with cocotb's own harness and a cocotb ``Clock`` (the clock=None fallback), and the plain C++
harness of ``make bench`` (sim/csrc/bench_main.cpp). Same DRAM, same performance counters, and
both equal to the ISA simulator's DRAM."""

import dataclasses

import numpy as np
import pytest

from arch.config import PRESETS
from sim.backends.accelerator import accelerator_spec, build_accelerator
from sim.backends.rtl import run_programs
from sim.bench.speed import raw_spec, run_raw
from sim.verilate.build import build
from tests.instruction.rtl_compare import assert_guards, prepare
from tests.instruction.test_rtl_vs_isa import kernel_programs


@pytest.mark.simulator
def test_clocked_fallback_and_raw_harnesses_agree(tmp_path):
    config = PRESETS["tiny"]
    programs = kernel_programs(config, seed=23)
    names = ["conv3x3_s2", "maxpool3x3_s2"]
    prepared = [prepare(config, name, programs[name]) for name in names]
    # the raw C++ harness has no stall model: every harness runs the DRAM without stalls
    runs = [dataclasses.replace(p.run, dram_stall="none") for p in prepared]
    expected = [p.isa.dram[: p.guard.size] for p in prepared]

    spec = accelerator_spec(config)
    assert spec.clock == "clk"
    clocked = run_programs(config, runs, tmp_path / "clocked", model=build_accelerator(config))
    fallback_model = build(dataclasses.replace(spec, clock=None))
    fallback = run_programs(config, runs, tmp_path / "fallback", model=fallback_model)
    raw_model = build(raw_spec(spec))

    for n, name in enumerate(names):
        image_path, dump = tmp_path / f"{name}.bin", tmp_path / f"{name}.out"
        runs[n].image.tofile(image_path)
        raw = run_raw(raw_model.executable, image_path, runs[n].launch, config.dram_bytes, dump)
        raw_dram = np.fromfile(dump, dtype=np.uint8)
        assert clocked[n].done and fallback[n].done and raw["done"], name
        assert_guards(
            name, prepared[n].guard, clocked=clocked[n], fallback=fallback[n], raw=raw_dram
        )
        assert np.array_equal(clocked[n].dram, expected[n]), f"{name}: clocked run != ISA sim"
        assert np.array_equal(fallback[n].dram, clocked[n].dram), f"{name}: fallback != clocked"
        assert np.array_equal(raw_dram, clocked[n].dram), f"{name}: raw harness != clocked"
        assert fallback[n].perf == clocked[n].perf, name
        assert raw["perf"] == clocked[n].perf, name
        assert clocked[n].cycles > 0

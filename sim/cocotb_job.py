"""cocotb test module that runs accelerator programs on the RTL (loaded by sim/rtl_backend.py).

The job file (env ``COSIM_JOB``) lists runs; for each the DRAM image is copied into the DPI
DRAM, the launch registers are set, ``start`` is pulsed, and the test sleeps until ``done`` or
``error`` rises - no Python runs per cycle. Then the DRAM and the status/perf counters are saved.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, First, ReadOnly, RisingEdge, Timer

from hdl_gen import isa
from sim.dram import DpiDram

CLOCK_NS = 10
PROGRESS_CYCLES = 500_000  # how often a long run reports its progress


async def report_progress(dut, dram: DpiDram, run: dict, started: float) -> None:
    """Every PROGRESS_CYCLES cycles write {cycles, layers_done, wall_s} for the CLI to show.
    A layer is done when its PERF record (written at its end) has a non-zero cycle count."""
    path, base, count = Path(run["progress"]), run["perf_base"], run["perf_count"]
    size = isa.PERF_RECORD.nbytes
    cycles_offset = (
        next(leaf.offset for leaf in isa.PERF_RECORD.leaves if leaf.path == "cycles") // 8
    )
    while True:
        await Timer(PROGRESS_CYCLES * CLOCK_NS, unit="ns")
        records = dram.array[base : base + count * size].reshape(count, size)
        done = int(np.count_nonzero(records[:, cycles_offset : cycles_offset + 8].any(axis=1)))
        cycles = isa.decode_record(isa.PERF_RECORD, int(dut.perf.value))["cycles"]
        state = {"cycles": cycles, "layers_done": done, "wall_s": time.perf_counter() - started}
        path.write_text(json.dumps(state))


@cocotb.test()
async def run_job(dut):
    job = json.loads(Path(os.environ["COSIM_JOB"]).read_text())
    dram = DpiDram(job["dram_bytes"])
    Clock(dut.clk, CLOCK_NS, unit="ns").start()
    for run in job["runs"]:
        image = np.fromfile(run["image"], dtype=np.uint8)
        dram.load(image)
        dut.start.value = 0
        dut.insn_base.value = run["insn_base"]
        dut.desc_base.value = run["desc_base"]
        dut.desc_count.value = run["desc_count"]
        dut.rst.value = 1
        await ClockCycles(dut.clk, 4)
        dut.rst.value = 0
        await RisingEdge(dut.clk)
        dut.start.value = 1
        await RisingEdge(dut.clk)
        dut.start.value = 0
        wall = time.perf_counter()
        timeout = Timer(run["max_cycles"] * CLOCK_NS, unit="ns")
        reporter = (
            cocotb.start_soon(report_progress(dut, dram, run, wall))
            if run.get("progress")
            else None
        )
        await First(RisingEdge(dut.done), RisingEdge(dut.error), timeout)
        if reporter is not None:
            reporter.cancel()
        await ReadOnly()
        wall = time.perf_counter() - wall
        perf = isa.decode_record(isa.PERF_RECORD, int(dut.perf.value))
        done, error = bool(int(dut.done.value)), bool(int(dut.error.value))
        result = {
            "done": done,
            "error": error,
            "timeout": not done and not error,
            "error_code": isa.ErrorCode(int(dut.error_code.value)).name,
            "error_index": int(dut.error_index.value),
            "perf": {k: v for k, v in perf.items() if k not in ("tag", "reserved")},
            "sim_seconds": wall,
        }
        dram.read(run["dump_size"]).tofile(run["dump"])
        Path(run["result"]).write_text(json.dumps(result))
        await RisingEdge(dut.clk)

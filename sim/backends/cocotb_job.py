"""cocotb test module that runs accelerator programs on the RTL (loaded by sim/backends/rtl.py).

The job file (env ``COSIM_JOB``) lists runs; for each the DRAM image is copied into the DPI
DRAM, the start sequence of sim/backends/harness.py runs (launch registers, reset, ``start``
pulse), and the test sleeps until ``done`` or ``error`` rises - no Python runs per cycle. Then
the DRAM and the status/perf counters are saved.

The simulator normally generates ``clk`` itself (sim/csrc/cocotb_main.cpp; run_cocotb sets
``COSIM_HARNESS_CLOCK=clk``); a model built without that clock gets a cocotb ``Clock``.

The job file also carries the PERF record layout and the error-code names, so this module needs
neither numpy nor hdl_gen (amaranth): the simulator process starts in a fraction of a second.
"""

from __future__ import annotations

import ctypes
import json
import time
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, First, ReadOnly, RisingEdge, Timer
from cocotb.utils import get_sim_steps, get_sim_time

from sim import knobs
from sim.backends import dram_stall
from sim.backends.dram import DpiDram
from sim.backends.harness import LAUNCH_PORTS, START_SEQUENCE, layers_done
from sim.backends.hooks import HookContext, load, names, run_hook, time_bound

CLOCK_NS = int(knobs.CLOCK_PERIOD_NS.get())
PROGRESS_CYCLES = 500_000  # how often a long run reports its progress


def decode_perf(word: int, fields: list[list]) -> dict[str, int]:
    """The PERF record's fields ([name, bit offset, width] each) from its integer value."""
    return {name: (word >> offset) & ((1 << width) - 1) for name, offset, width in fields}


async def report_progress(dut, dram: DpiDram, job: dict, run: dict, started: float) -> None:
    """Every PROGRESS_CYCLES cycles write {cycles, layers_done, wall_s} for the CLI to show.
    A layer is done when its PERF record (written at its end) has a non-zero cycle count."""
    path, base, count = Path(run["progress"]), run["perf_base"], run["perf_count"]
    size = job["perf_bytes"]
    while True:
        await Timer(PROGRESS_CYCLES * CLOCK_NS, unit="ns")
        records = dram.read_bytes(base, count * size)
        done = layers_done(records, count, size, tuple(job["cycles_field"]))
        cycles = decode_perf(int(dut.perf.value), job["perf_fields"])["cycles"]
        state = {"cycles": cycles, "layers_done": done, "wall_s": time.perf_counter() - started}
        path.write_text(json.dumps(state))


async def time_of_rise(signal) -> int:
    """The simulation time (steps) at which ``signal`` rises. For ``running``: the cycle
    counter reads 0 at that edge and counts every edge after it (waveform markers)."""
    await RisingEdge(signal)
    return get_sim_time("step")


async def start(dut, run: dict) -> None:
    """The harness's start sequence (sim/backends/harness.py) on the cocotb handles."""
    for action, *args in START_SEQUENCE:
        if action == "set":
            getattr(dut, args[0]).value = args[1]
        elif action == "launch":
            for port in LAUNCH_PORTS:
                getattr(dut, port).value = run[port]
        else:
            await ClockCycles(dut.clk, args[0])


@cocotb.test()
async def run_job(dut):
    job = json.loads(Path(knobs.JOB.get()).read_text())
    dram = DpiDram(job["dram_bytes"])
    lib = ctypes.CDLL(None)  # the simulator executable: the DPI DRAM and its pauses
    if knobs.HARNESS_CLOCK.get() != "clk":
        Clock(dut.clk, CLOCK_NS, unit="ns").start()
    user_hooks = load(names())  # sim/backends/hooks.py: the user's cocotb coroutines
    hook_seconds = time_bound()
    for index, run in enumerate(job["runs"]):
        dram.load_file(run["image"])
        dram.watch(run["dump_size"])
        stalls = dram_stall.parse(run["dram_stall"])
        dram_stall.apply(lib, stalls)  # per run: a run's pauses do not depend on the batch
        contexts = [
            HookContext(index, run, dram, job["perf_bytes"], job["bus_bytes"]) for _ in user_hooks
        ]
        tasks = [
            cocotb.start_soon(run_hook(module, dut, ctx, hook_seconds))
            for module, ctx in zip(user_hooks, contexts, strict=True)
        ]
        await start(dut, run)
        wall, cpu = time.perf_counter(), time.process_time()
        cycle0 = cocotb.start_soon(time_of_rise(dut.running))
        timeout = Timer(run["max_cycles"] * CLOCK_NS, unit="ns")
        reporter = (
            cocotb.start_soon(report_progress(dut, dram, job, run, wall))
            if run.get("progress")
            else None
        )
        await First(RisingEdge(dut.done), RisingEdge(dut.error), timeout)
        cycle0_step = cycle0.result() if cycle0.done() else 0
        if not cycle0.done():
            cycle0.cancel()
        if reporter is not None:
            reporter.cancel()
        await ReadOnly()
        for task in tasks:
            if task.done():
                task.result()  # a hook that raised fails the run with its exception
            else:
                task.cancel()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        perf = decode_perf(int(dut.perf.value), job["perf_fields"])
        done, error = bool(int(dut.done.value)), bool(int(dut.error.value))
        code = int(dut.error_code.value)
        result = {
            "done": done,
            "error": error,
            "timeout": not done and not error,
            "error_code": job["error_codes"].get(str(code), f"UNKNOWN_{code}"),
            "error_index": int(dut.error_index.value),
            "perf": {k: v for k, v in perf.items() if k not in ("tag", "reserved")},
            "sim_seconds": wall,
            "sim_cpu_seconds": cpu,
            "cycle0_step": cycle0_step,
            "cycle_steps": get_sim_steps(CLOCK_NS, "ns"),
            "dram_stall": dram_stall.report(lib, stalls),
            "stray_writes": dram.stray(),
            "hooks": {m.__name__: c.result for m, c in zip(user_hooks, contexts, strict=True)},
        }
        dram.dump(run["dump"], run["dump_size"])
        Path(run["result"]).write_text(json.dumps(result))
        await RisingEdge(dut.clk)

"""The pyverilator backend: device programs on the Verilator RTL in this process.

The same model as the rtl backend (sim/backends/accelerator.py), built as a shared object
(sim/verilate/pyverilator_build.py) and driven with :class:`sim.verilate.block.Block` through the
harness's start sequence (sim/backends/harness.py), so DRAM, status and every performance
counter are the same as on the cocotb backend.

``stepping="chunk"`` (default) runs the clock in C++, many cycles per ctypes call;
``stepping="tick"`` ticks the clock from Python with pyverilator's own API (``sim.clock.tick()``)
and reads ``done``/``error`` after every cycle - the plain-pyverilator way, much slower.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from arch import isa
from arch.config import AccelConfig
from sim.backends import dram_stall, rtl_timeline
from sim.backends.accelerator import CYCLES_FIELD, accelerator_spec, decode_status, rtl_source
from sim.backends.base import DeviceResult, DeviceRun, RunOptions
from sim.backends.dram import DpiDram
from sim.backends.harness import LAUNCH_PORTS, START_SEQUENCE, layers_done
from sim.verilate.block import Block
from sim.verilate.build import BuiltModel
from sim.verilate.pyverilator_build import build_pyverilator

STEPPINGS = ("chunk", "tick")
CHUNK_CYCLES = 100_000  # cycles per C++ call: Ctrl-C and progress are seen between chunks
PROGRESS_SECONDS = 0.5


class PyverilatorBackend:
    """The RTL driven in this process; see :func:`run_programs`."""

    name = "pyverilator"
    runs_rtl = True
    own_process = False
    traces = False
    hooks = False
    writes_log = False

    def run(
        self, config: AccelConfig, runs: Sequence[DeviceRun], options: RunOptions
    ) -> list[DeviceResult]:
        if not options.timeline:
            return run_programs(config, runs, progress=options.progress)
        with tempfile.TemporaryDirectory(prefix="cosim-pyverilator-") as scratch:
            workdir = options.workdir or Path(scratch)  # the testbench's events: kept there
            workdir.mkdir(parents=True, exist_ok=True)
            events = workdir / "timeline.txt"
            return run_programs(config, runs, progress=options.progress, timeline=events)

    def rtl_dir(self, config: AccelConfig) -> Path:
        return rtl_source(config).parent

    def build(self, config: AccelConfig) -> str:
        return build_accelerator(config).key

    def wave_header(self, config: AccelConfig, fmt: str) -> Path | None:
        return None  # no waveforms


def build_accelerator(config: AccelConfig, waves: str | None = None) -> BuiltModel:
    """The accelerator of the rtl backend as a pyverilator model."""
    return build_pyverilator(accelerator_spec(config, waves))


def _run_chunked(
    dut: Block,
    dram: DpiDram,
    run: DeviceRun,
    started: float,
    progress: Callable[[dict[str, Any]], None] | None,
) -> None:
    cycles, last = 0, started
    field = (CYCLES_FIELD.offset, CYCLES_FIELD.width)
    while cycles < run.max_cycles:
        ran = dut.step(min(CHUNK_CYCLES, run.max_cycles - cycles), until=("done", "error"))
        cycles += ran
        if dut["done"] or dut["error"]:
            return
        now = time.perf_counter()
        if progress is not None and run.perf_records and now - last >= PROGRESS_SECONDS:
            last = now
            base, count = run.perf_records
            size = isa.PERF_RECORD.nbytes
            state = {
                "cycles": decode_status(dut["perf"], 0)[0]["cycles"],
                "layers_done": layers_done(dram.read_bytes(base, count * size), count, size, field),
                "wall_s": now - started,
            }
            progress(state)


def _run_ticks(dut: Block, run: DeviceRun) -> None:
    sim = dut.sim  # pyverilator's API: each tick is two writes, each write an eval()
    clock, done, error = sim.clock, sim.io.done.signal, sim.io.error.signal
    for _ in range(run.max_cycles):
        clock.tick()
        if done.value or error.value:
            return


def start(dut: Block, run: DeviceRun) -> None:
    """The harness's start sequence (sim/backends/harness.py) on a block handle."""
    for action, *args in START_SEQUENCE:
        if action == "set":
            dut[args[0]] = args[1]
        elif action == "launch":
            for port in LAUNCH_PORTS:
                dut[port] = getattr(run.launch, port)
        else:
            dut.step(args[0])


def run_programs(
    config: AccelConfig,
    runs: Sequence[DeviceRun],
    model: BuiltModel | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    stepping: str = "chunk",
    timeline: Path | None = None,
) -> list[DeviceResult]:
    """Run each program on the RTL in this process (one model for the batch, reset between
    runs), like :func:`sim.backends.rtl.run_programs`. ``progress`` is called about every half
    second with ``{cycles, layers_done, wall_s}`` for a run with ``perf_records`` (chunked
    stepping only). ``timeline``: the file the testbench writes its events to, read back into
    each result's spans and token moves (:mod:`sim.backends.rtl_timeline`)."""
    if stepping not in STEPPINGS:
        raise ValueError(f"unknown stepping {stepping!r}; choose one of {', '.join(STEPPINGS)}")
    model = model or build_accelerator(config)
    results = []
    plusargs = []
    if timeline is not None:
        timeline.unlink(missing_ok=True)
        plusargs.append(f"+{rtl_timeline.PLUSARG}={timeline}")
    with Block(model, plusargs=plusargs) as dut:
        dram = DpiDram(config.dram_bytes, lib=dut.lib)
        for run in runs:
            dram.load(run.image)
            dram.watch(run.dump_size or run.image.size)
            stalls = dram_stall.from_env(run.dram_stall)
            dram_stall.apply(dut.lib, stalls)
            start(dut, run)
            wall, cpu = time.perf_counter(), time.process_time()
            if stepping == "chunk":
                _run_chunked(dut, dram, run, wall, progress)
            else:
                _run_ticks(dut, run)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            results.append(_result(dut, dram, run, wall, cpu))
            results[-1].dram_stall = dram_stall.report(dut.lib, stalls)
    # The model is closed: the testbench's event file is complete.
    recorded = rtl_timeline.read(timeline) if timeline is not None else []
    for result, events in zip(results, recorded, strict=False):
        result.spans, result.tokens = events.spans, events.tokens
    return results


def _result(dut: Block, dram: DpiDram, run: DeviceRun, wall: float, cpu: float) -> DeviceResult:
    perf, code_name = decode_status(dut["perf"], dut["error_code"])
    done, error = bool(dut["done"]), bool(dut["error"])
    return DeviceResult(
        done=done,
        error=error,
        timeout=not done and not error,
        error_code=code_name,
        error_index=dut["error_index"],
        perf=perf,
        sim_seconds=wall,
        dram=dram.read(run.dump_size or run.image.size),
        sim_cpu_seconds=cpu,
        stray_writes=dram.stray(),
    )

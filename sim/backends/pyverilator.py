"""Run accelerator programs on the Verilator RTL in this process, through pyverilator.

The same model as the cocotb backend (sim/backends/rtl.py: sim/hdl/tb_top.v around the
config's sim_top, the DPI DRAM of sim/csrc/cosim_dram.cpp), built as a shared object
(sim/verilate/pyverilator_build.py) and driven with :class:`sim.verilate.block.Block`. Each run
repeats the cocotb job's sequence (sim/backends/cocotb_job.py): load the DRAM image, reset for 4
cycles, one cycle, pulse ``start`` for one cycle, then clock until ``done`` or ``error``
- so DRAM, status and every performance counter are the same as on the cocotb backend.

``stepping="chunk"`` (default) runs the clock in C++, many cycles per ctypes call;
``stepping="tick"`` ticks the clock from Python with pyverilator's own API (``sim.clock.tick()``)
and reads ``done``/``error`` after every cycle - the plain-pyverilator way, much slower.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from arch import isa
from arch.config import AccelConfig
from sim.backends.dram import DpiDram
from sim.backends.rtl import RtlResult, RtlRun, accelerator_spec
from sim.verilate.block import Block
from sim.verilate.build import BuiltModel
from sim.verilate.pyverilator_build import build_pyverilator

STEPPINGS = ("chunk", "tick")
CHUNK_CYCLES = 100_000  # cycles per C++ call: Ctrl-C and progress are seen between chunks
PROGRESS_SECONDS = 0.5
RESET_CYCLES = 4  # as sim/backends/cocotb_job.py
_CYCLES_FIELD = next(leaf for leaf in isa.PERF_RECORD.leaves if leaf.path == "cycles")


def build_accelerator(config: AccelConfig, waves: str | None = None) -> BuiltModel:
    """The accelerator of the cocotb backend (:func:`sim.backends.rtl.accelerator_spec`) as a
    pyverilator model."""
    return build_pyverilator(accelerator_spec(config, waves))


def _layers_done(dram: DpiDram, base: int, count: int) -> int:
    """PERF records written so far (a layer's record has a non-zero cycle count at its end)."""
    size = isa.PERF_RECORD.nbytes
    lo, hi = _CYCLES_FIELD.offset // 8, (_CYCLES_FIELD.offset + _CYCLES_FIELD.width) // 8
    records = dram.read_bytes(base, count * size)
    return sum(any(records[n * size + lo : n * size + hi]) for n in range(count))


def _run_chunked(
    dut: Block,
    dram: DpiDram,
    run: RtlRun,
    started: float,
    progress: Callable[[dict[str, Any]], None] | None,
) -> None:
    cycles, last = 0, started
    while cycles < run.max_cycles:
        ran = dut.step(min(CHUNK_CYCLES, run.max_cycles - cycles), until=("done", "error"))
        cycles += ran
        if dut["done"] or dut["error"]:
            return
        now = time.perf_counter()
        if progress is not None and run.perf_records and now - last >= PROGRESS_SECONDS:
            last = now
            perf = isa.decode_record(isa.PERF_RECORD, dut["perf"])
            state = {
                "cycles": perf["cycles"],
                "layers_done": _layers_done(dram, *run.perf_records),
                "wall_s": now - started,
            }
            progress(state)


def _run_ticks(dut: Block, run: RtlRun) -> None:
    sim = dut.sim  # pyverilator's API: each tick is two writes, each write an eval()
    clock, done, error = sim.clock, sim.io.done.signal, sim.io.error.signal
    for _ in range(run.max_cycles):
        clock.tick()
        if done.value or error.value:
            return


def run_programs(
    config: AccelConfig,
    runs: list[RtlRun],
    model: BuiltModel | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    stepping: str = "chunk",
) -> list[RtlResult]:
    """Run each program on the RTL in this process (one model for the batch, reset between
    runs), like :func:`sim.backends.rtl.run_programs`. ``progress`` is called about every half
    second with ``{cycles, layers_done, wall_s}`` for a run with ``perf_records`` (chunked
    stepping only)."""
    if stepping not in STEPPINGS:
        raise ValueError(f"unknown stepping {stepping!r}; choose one of {', '.join(STEPPINGS)}")
    model = model or build_accelerator(config)
    results = []
    with Block(model) as dut:
        dram = DpiDram(config.dram_bytes, lib=dut.lib)
        for run in runs:
            dram.load(run.image)
            dut["start"] = 0
            dut["insn_base"] = run.launch.insn_base
            dut["desc_base"] = run.launch.desc_base
            dut["desc_count"] = run.launch.desc_count
            dut.reset(RESET_CYCLES)
            dut.step()
            dut["start"] = 1
            dut.step()
            dut["start"] = 0
            wall, cpu = time.perf_counter(), time.process_time()
            if stepping == "chunk":
                _run_chunked(dut, dram, run, wall, progress)
            else:
                _run_ticks(dut, run)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            results.append(_result(dut, dram, run, wall, cpu))
    return results


def _result(dut: Block, dram: DpiDram, run: RtlRun, wall: float, cpu: float) -> RtlResult:
    perf = isa.decode_record(isa.PERF_RECORD, dut["perf"])
    done, error, code = bool(dut["done"]), bool(dut["error"]), dut["error_code"]
    try:
        code_name = isa.ErrorCode(code).name
    except ValueError:
        code_name = f"UNKNOWN_{code}"
    return RtlResult(
        done=done,
        error=error,
        timeout=not done and not error,
        error_code=code_name,
        error_index=dut["error_index"],
        perf={k: int(v) for k, v in perf.items() if k not in ("tag", "reserved")},
        sim_seconds=wall,
        dram=dram.read(run.dump_size or run.image.size),
        sim_cpu_seconds=cpu,
    )

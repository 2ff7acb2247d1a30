"""The isa backend: device programs on the numpy ISA simulator (the golden model, fast).

Its cycle counts are the ideal-overlap estimate of :class:`sim.backends.isa_machine.Stats`; its
counters are the simulator's statistics.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from arch.config import AccelConfig
from sim.backends.base import DeviceResult, DeviceRun, RunOptions
from sim.backends.isa_machine import IsaSimError, Machine


class IsaBackend:
    """One :class:`Machine` per program, DRAM the size of the config's."""

    name = "isa"
    runs_rtl = False
    own_process = False
    traces = False
    hooks = False
    writes_log = False

    def run(
        self, config: AccelConfig, runs: Sequence[DeviceRun], options: RunOptions
    ) -> list[DeviceResult]:
        # Its GEMMs are many and small: one BLAS thread runs them faster than several (on a
        # busy 2-core machine, ResNet-50 in a third of the wall time), and float64 sums of int8
        # products are exact in any order, so the results are the same.
        with threadpool_limits(limits=1, user_api="blas"):
            return [self._run(config, run) for run in runs]

    def rtl_dir(self, config: AccelConfig) -> Path | None:
        return None

    def build(self, config: AccelConfig) -> str | None:
        return None

    def wave_header(self, config: AccelConfig, fmt: str) -> Path | None:
        return None  # no waveforms

    def _run(self, config: AccelConfig, run: DeviceRun) -> DeviceResult:
        dram = np.zeros(config.dram_bytes, dtype=np.uint8)
        dram[: run.image.size] = run.image
        machine = Machine(config, dram)
        machine.watch_from = run.dump_size or config.dram_bytes
        started = time.perf_counter()
        code, index, message = "NONE", None, ""
        try:
            stats = machine.run(run.launch)
        except IsaSimError as exc:
            code, index, message = exc.code.name, exc.insn_index, str(exc)
            stats = machine.stats
        wall = time.perf_counter() - started
        failed = code != "NONE"
        return DeviceResult(
            done=not failed,
            error=failed,
            timeout=False,
            error_code=code,
            error_index=-1 if index is None else index,
            perf={**stats.as_dict(), "cycles": stats.ideal_cycles},
            sim_seconds=wall,
            dram=machine.dram[: run.dump_size or config.dram_bytes],
            sim_cpu_seconds=wall,
            message=message,
            stray_writes=machine.stray_writes,
            spans=stats.spans,
            tokens=stats.tokens,
        )

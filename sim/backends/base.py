"""The backend interface: what a backend is given (:class:`DeviceRun`, :class:`RunOptions`) and
what it returns (:class:`DeviceResult`) for each device program of an executable.

A backend runs a batch of device programs on one accelerator config - DRAM image in, DRAM image,
status and performance counters out - and knows nothing of models, layers or references; the
checking is :mod:`sim.runtime.execute`'s. What tells backends apart is a trait of the interface
(:class:`Backend`), set by each backend; names map to classes only in
:mod:`sim.backends.registry`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from arch.config import AccelConfig
from arch.isa import Launch
from sim.backends.isa_results import Span, TokenMove


@dataclass
class DeviceRun:
    """One program: a DRAM image (placed at address 0) and where the program is in it."""

    image: np.ndarray
    launch: Launch
    max_cycles: int = 50_000_000
    dump_size: int | None = None  # bytes of DRAM to read back (default: the image size)
    perf_records: tuple[int, int] | None = None  # (address, count) of PERF records: progress
    #: the testbench DRAM's stall profile, ``profile[:seed]`` (sim/backends/dram_stall.py; RTL
    #: backends); None: ``COSIM_DRAM_STALL`` (unset: none)
    dram_stall: str | None = None


@dataclass
class DeviceResult:
    """How a program ended: ``done``, or an ``error`` with its code and instruction, or a
    ``timeout``; the performance counters (``perf``) and the DRAM read back."""

    done: bool
    error: bool
    timeout: bool
    error_code: str
    error_index: int
    perf: dict[str, Any]
    sim_seconds: float  # wall time from start to done/error
    dram: np.ndarray = field(repr=False)
    sim_cpu_seconds: float = 0.0  # the simulator process's CPU time over the same span
    cycle0_step: int = 0  # simulation time (steps) where the cycle counter reads 0
    cycle_steps: int = 0  # simulation time steps per clock cycle
    message: str = ""  # the backend's own words on an error (ISA simulator)
    #: the testbench DRAM's profile and what it did: paused read/write cycles, delayed reads and
    #: their extra cycles (RTL backends; sim/backends/dram_stall.py)
    dram_stall: dict[str, Any] = field(default_factory=dict)
    hooks: dict[str, Any] = field(
        default_factory=dict
    )  # each user hook's result (sim/backends/hooks.py)
    #: (bytes, lowest address) written past the DRAM read back, when the backend tracks it (rtl,
    #: pyverilator: the testbench's DRAM model watches every write); None where it does not (isa)
    stray_writes: tuple[int, int] | None = None
    #: every instruction's span and every token's move (a backend that records them: isa)
    spans: list[Span] = field(default_factory=list, repr=False)
    tokens: list[TokenMove] = field(default_factory=list, repr=False)

    def cycle_time(self, cycle: int) -> int:
        """The simulation time (in the dump's time steps) at which the cycle counter reads
        ``cycle``."""
        return self.cycle0_step + cycle * self.cycle_steps

    @property
    def cycles(self) -> int:
        return int(self.perf["cycles"])


@dataclass
class RunOptions:
    """How to run: ``workdir`` for a simulator's files, ``progress`` called about every half
    second with ``{cycles, layers_done, wall_s}`` of a run with ``perf_records``, ``trace`` =
    (dump file, window plusargs, signal selection file or None for all) to trace a batch of
    one run (rtl only)."""

    workdir: Path | None = None
    progress: Callable[[dict[str, Any]], None] | None = None
    trace: tuple[Path, list[str], Path | None] | None = None
    timeline: bool = False  # rtl, pyverilator: record every instruction's span (isa: always)


class Backend(Protocol):
    """Runs device programs on one config; see the module docstring."""

    name: str
    #: Whether it runs the RTL: its cycles are the RTL's (else a model's ideal estimate), it
    #: reports progress, and the run records the Verilator version.
    runs_rtl: bool
    #: Whether the simulator runs in a process of its own (work of this process overlaps it).
    own_process: bool
    #: Whether ``RunOptions.trace`` is honoured (waveforms).
    traces: bool
    #: Whether user cocotb hooks (:mod:`sim.backends.hooks`) run with it.
    hooks: bool
    #: Whether it writes the simulator's log to ``sim.log`` in its ``workdir``.
    writes_log: bool

    def run(
        self, config: AccelConfig, runs: Sequence[DeviceRun], options: RunOptions
    ) -> list[DeviceResult]: ...

    def rtl_dir(self, config: AccelConfig) -> Path | None:
        """Where the RTL of ``config`` is (fsm_states.json for waveform save files), if any."""
        ...

    def build(self, config: AccelConfig) -> str | None:
        """Build (or find) what a run on ``config`` needs - a shard worker's warm-up - and
        return its cache key (a worker must run the client's build), None if nothing is built."""
        ...

    def wave_header(self, config: AccelConfig, fmt: str) -> Path | None:
        """A dump header naming every signal a traced run on ``config`` in ``fmt`` can write
        (what ``WAVE_SIGNALS`` is matched against); None if it does not trace."""
        ...

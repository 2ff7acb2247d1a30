"""What a run returns: each layer's result (:class:`LayerResult`), the run's
(:class:`RunResult`), and the error of an accelerator that stopped (:class:`RunError`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sim.runtime.timeline import ProgramTimeline


class RunError(RuntimeError):
    """The accelerator stopped with an error, timed out, or a backend is unknown.
    ``cycle`` is the cycle it stopped at (RTL runs), for a failure dump."""

    def __init__(self, message: str, cycle: int | None = None) -> None:
        super().__init__(message)
        self.cycle = cycle


@dataclass
class LayerResult:
    name: str
    op: str
    macs: int
    cycles: int
    cycle_window: tuple[int, int]
    dram_read_bytes: int
    dram_write_bytes: int
    bit_exact: bool
    mismatch: str | None = None
    insn_range: tuple[int, int] = (0, 0)
    tiling: str = ""
    counters: dict[str, int] = field(default_factory=dict)  # counter deltas over the layer
    device: str = "accel"  # or "host"
    host_s: float = 0.0  # wall time of a host step
    note: str = ""  # a host step's reason for being there
    mismatch_addr: int | None = None  # DRAM byte of the first differing value (accel layers)

    def utilization(self, macs_per_cycle: int) -> float:
        return self.macs / (macs_per_cycle * self.cycles) if self.cycles else 0.0


@dataclass
class RunResult:
    backend: str
    layers: list[LayerResult]
    cycles: int
    sim_wall_s: float
    outputs: dict[str, np.ndarray]  # graph outputs (fp32: dequantized, or a host step's)
    counters: dict[str, Any] = field(default_factory=dict)
    ideal_cycles: int | None = None
    waves: dict[str, Any] | None = None  # the traced window and its files (sim/waves/)
    shards: list[dict[str, Any]] = field(
        default_factory=list
    )  # sharded runs (sim/scaleout/shards.py)
    hooks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # sim/backends/hooks.py
    #: per device program: the testbench DRAM's stall profile and what it did (RTL backends;
    #: sim/backends/dram_stall.py)
    dram_stall: list[dict[str, Any]] = field(default_factory=list)
    #: each device program's instruction spans (backends that record them: isa) for timeline.json
    timeline: list[ProgramTimeline] = field(default_factory=list, repr=False)

    @property
    def bit_exact(self) -> bool:
        return all(layer.bit_exact for layer in self.layers)

    @property
    def first_mismatch(self) -> LayerResult | None:
        return next((layer for layer in self.layers if not layer.bit_exact), None)

"""Run programs on the RTL and on the ISA simulator and compare DRAM bit for bit."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arch.config import AccelConfig
from sim.backends.base import DeviceResult, DeviceRun
from sim.backends.isa_machine import IsaSimError, Machine
from sim.backends.rtl import run_programs
from tests.programs import Builder


@dataclass
class Outcome:
    name: str
    rtl: DeviceResult
    isa: Machine | None
    isa_error: IsaSimError | None
    image_size: int


def run_both(
    config: AccelConfig, programs: dict[str, Builder], tmp_path, max_cycles: int = 2_000_000
) -> list[Outcome]:
    runs, launches = [], {}
    for name, builder in programs.items():
        launch = builder.finish()
        launches[name] = launch
        runs.append(DeviceRun(builder.dram[: builder.top].copy(), launch, max_cycles=max_cycles))
    results = run_programs(config, runs, tmp_path)
    outcomes = []
    for (name, builder), rtl in zip(programs.items(), results, strict=True):
        machine, error = Machine(config, builder.dram.copy()), None
        try:
            machine.run(launches[name])
        except IsaSimError as exc:
            error = exc
        outcomes.append(Outcome(name, rtl, machine, error, builder.top))
    return outcomes


def assert_same_dram(outcome: Outcome) -> None:
    expected = outcome.isa.dram[: outcome.image_size]
    diff = np.flatnonzero(expected != outcome.rtl.dram)
    if diff.size:
        first = int(diff[0])
        raise AssertionError(
            f"{outcome.name}: {diff.size} DRAM bytes differ; first at 0x{first:x}: "
            f"expected {int(expected[first])} (ISA simulator), "
            f"got {int(outcome.rtl.dram[first])} (RTL)"
        )

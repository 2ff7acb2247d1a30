"""A hook (sim/backends/hooks.py) for tests: preset the accelerator's live PERF counters after
reset.

``PERF_PRESET`` in the environment is the hex value of the 1024-bit counter record to load (the
test encodes it with ``arch.isa``). A plain VPI deposit does not stick - the counter register
takes its next value, computed from the old one, at the next clock edge - so the hook forces
the register (the hook build makes it ``forceable``) for two clock edges, the first of which
recomputes its next value from the forced one and the second stores it, and releases it before
the program starts (``start`` rises one cycle after reset): the counters count on from the preset.
The test compares every count with a plain run's, so a lost or doubled count would show. This
module imports nothing heavy: the simulator process loads it.
"""

from __future__ import annotations

import os
from typing import Any

from cocotb.handle import Force, Release
from cocotb.triggers import ClockCycles, FallingEdge

ENV = "PERF_PRESET"


async def hook(dut: Any, ctx: Any) -> None:
    await FallingEdge(dut.rst)  # reset clears the counters; the program starts after it
    perf = dut.dut.accel.perf
    perf.value = Force(int(os.environ[ENV], 16))
    await ClockCycles(dut.clk, 2)
    perf.value = Release()
    ctx.result["preset"] = True

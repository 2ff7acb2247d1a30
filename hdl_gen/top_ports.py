"""The accelerator's top-level ports, written once.

:class:`~hdl_gen.accelerator.Accelerator` (which adds its DRAM links) and
:class:`~hdl_gen.sim_top.SimTop` take their signatures from :data:`TOP_PORTS`; the launch
registers are :attr:`arch.isa.Launch.FIELDS`. The hand-written copies - the testbench top
(sim/hdl/tb_top.v), its drivers' port names (sim/backends/harness.py, which imports nothing so
the cocotb process stays light) and the C++ bench main (sim/csrc/bench_main.cpp) - are checked
against it by tests/unit/test_top_ports.py; the pyverilator wrapper is generated from the
Verilog.
"""

from __future__ import annotations

from types import MappingProxyType

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from arch import isa

#: Name -> member, inputs first (the order of the generated top's connections). See
#: :class:`~hdl_gen.accelerator.Accelerator` for what each port means.
TOP_PORTS: MappingProxyType[str, wiring.Member] = MappingProxyType(
    {
        "start": In(1),
        **{name: In(isa.LAUNCH_BITS) for name in isa.Launch.FIELDS},
        "running": Out(1),
        "done": Out(1),
        "error": Out(1),
        "error_code": Out(isa.ErrorCode),
        "error_index": Out(isa.INSN_INDEX_BITS),
        "perf": Out(isa.PERF_RECORD.layout),
        "insn_started": Out(isa.INSN_INDEX_BITS),
        "insn_frontier": Out(isa.INSN_INDEX_BITS),
    }
)

#: Ports the testbench top keeps inside (they gate windowed waveforms, sim/waves/); it brings
#: every other one out, besides the clock and the reset.
INSIDE_TESTBENCH = ("insn_started", "insn_frontier")

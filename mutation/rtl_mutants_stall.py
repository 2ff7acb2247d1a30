"""Curated RTL mutants of the stall paths: what a requester does when the DRAM refuses a read
request or a write beat (``ready`` low). Only a testbench DRAM that stalls can see them
(sim/backends/dram_stall.py; tests/instruction/test_dram_stall_rtl.py kills them)."""

from __future__ import annotations

from mutation.table import Mutant

STALL: list[Mutant] = [
    Mutant(
        "load-skips-refused-beat",
        "hdl_gen/load_unit.py",
        "with m.If(data_port.addr.ready):",
        "with m.If(1):",
        "a load moves to its next beat or line when the DRAM refused the read: a beat dropped",
    ),
    Mutant(
        "read-port-takes-refused-address",
        "hdl_gen/read_port.py",
        "self.addr.ready.eq(self.bus.req.ready & (in_use < self.depth)),",
        "self.addr.ready.eq(in_use < self.depth),",
        "a read port takes an address the DRAM did not accept: its data never comes",
    ),
    Mutant(
        "arbiter-grants-refused-request",
        "hdl_gen/dram_arbiter.py",
        "with m.If(self.dram_req.ready):",
        "with m.If(1):",
        "the DRAM arbiter tells a client its read was taken while the DRAM refused it",
    ),
    Mutant(
        "fetch-skips-refused-request",
        "hdl_gen/fetch.py",
        "with m.If(port.addr.valid & port.addr.ready):",
        "with m.If(port.addr.valid):",
        "instruction fetch moves to the next address when the DRAM refused the read",
    ),
    Mutant(
        "desc-fetch-counts-refused-beat",
        "hdl_gen/desc_fetch.py",
        "with m.If(self.addr.valid & self.addr.ready):",
        "with m.If(self.addr.valid):",
        "a descriptor read counts a beat the DRAM refused as requested",
    ),
]

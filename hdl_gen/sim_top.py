"""Simulation top: the accelerator with its simulation-only DRAM model."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from arch.config import AccelConfig
from hdl_gen.accelerator import Accelerator
from hdl_gen.dram_model import DramModel
from hdl_gen.top_ports import TOP_PORTS

TOP_NAME = "sim_top"


class SimTop(wiring.Component):
    """What the testbench drives: start/done/error and the launch registers; the DRAM contents
    are loaded and read back through the DPI storage (sim/csrc/cosim_dram.cpp), never per cycle.
    """

    def __init__(self, config: AccelConfig, checks: bool = False) -> None:
        self.config = config
        self.checks = checks  # the accelerator's assertions (hdl_gen/checks.py)
        super().__init__(dict(TOP_PORTS))

    def elaborate(self, platform: object) -> Module:
        accel = Accelerator(self.config, self.checks)  # first: it may refuse the config
        m = Module()
        m.submodules.accel = accel
        m.submodules.dram = dram = DramModel(self.config, accel.tag_bits)
        wiring.connect(m, accel.dram_req, dram.rd_req)
        wiring.connect(m, dram.rd_resp, accel.dram_resp)
        wiring.connect(m, accel.dram_wr, dram.wr)
        for name, member in TOP_PORTS.items():
            if member.flow == In:
                m.d.comb += getattr(accel, name).eq(getattr(self, name))
            else:
                m.d.comb += getattr(self, name).eq(getattr(accel, name))
        return m

"""Simulation top: the accelerator with its simulation-only DRAM model."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from arch import isa
from arch.config import AccelConfig
from hdl_gen.accelerator import Accelerator
from hdl_gen.dram_model import DramModel

TOP_NAME = "sim_top"


class SimTop(wiring.Component):
    """What the testbench drives: start/done/error and the launch registers; the DRAM contents
    are loaded and read back through the DPI storage (sim/csrc/cosim_dram.cpp), never per cycle.
    """

    def __init__(self, config: AccelConfig, checks: bool = False) -> None:
        self.config = config
        self.checks = checks  # the accelerator's assertions (hdl_gen/checks.py)
        super().__init__(
            {
                "start": In(1),
                "insn_base": In(isa.LAUNCH_BITS),
                "desc_base": In(isa.LAUNCH_BITS),
                "desc_count": In(isa.LAUNCH_BITS),
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

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.submodules.accel = accel = Accelerator(self.config, self.checks)
        m.submodules.dram = dram = DramModel(self.config, accel.tag_bits)
        wiring.connect(m, accel.dram_req, dram.rd_req)
        wiring.connect(m, dram.rd_resp, accel.dram_resp)
        wiring.connect(m, accel.dram_wr, dram.wr)
        for name in ("start", "insn_base", "desc_base", "desc_count"):
            m.d.comb += getattr(accel, name).eq(getattr(self, name))
        outputs = ("running", "done", "error", "error_code", "error_index", "perf")
        for name in (*outputs, "insn_started", "insn_frontier"):
            m.d.comb += getattr(self, name).eq(getattr(accel, name))
        return m

"""Simulation-only DRAM with configurable bus width and read latency."""

from __future__ import annotations

from amaranth import ClockSignal, Instance, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from arch.config import AccelConfig
from arch.isa import DRAM_ADDR_BITS
from hdl_gen.dram_bus import read_request, read_response, write_signature


class DramModel(wiring.Component):
    """One read and one write beat of ``dram_bytes_per_cycle`` bytes per cycle; read data returns
    ``dram_latency`` cycles after the request, in order. The bytes are held by the DPI module
    ``cosim_dram_storage`` (sim/hdl/cosim_dram_storage.v).

    Attributes
    ----------
    rd_req : In(stream of {addr, tag})
        Always ready. Addresses are rounded down to the bus width.
    rd_resp : Out(stream of {data, tag})
        Never waits for the receiver.
    wr : In(stream of {addr, data, strb})
        Always ready; the write is visible to reads issued from the next cycle on.
    """

    def __init__(self, config: AccelConfig, tag_bits: int) -> None:
        self.config = config
        bus = config.dram_bytes_per_cycle
        super().__init__(
            {
                "rd_req": In(read_request(tag_bits)),
                "rd_resp": Out(read_response(bus, tag_bits)),
                "wr": In(write_signature(bus)),
            }
        )

    def elaborate(self, platform: object) -> Module:
        m = Module()
        bus = self.config.dram_bytes_per_cycle
        align = ~(bus - 1) & ((1 << DRAM_ADDR_BITS) - 1)
        m.d.comb += [self.rd_req.ready.eq(1), self.wr.ready.eq(1)]

        # Delay line: a request spends latency-1 cycles here, then one in the storage read.
        valid, addr, tag = self.rd_req.valid, self.rd_req.payload.addr, self.rd_req.payload.tag
        for stage in range(self.config.dram_latency - 1):
            next_valid = Signal(name=f"stage{stage}_valid")
            next_addr = Signal.like(addr, name=f"stage{stage}_addr")
            next_tag = Signal.like(tag, name=f"stage{stage}_tag")
            m.d.sync += [next_valid.eq(valid), next_addr.eq(addr), next_tag.eq(tag)]
            valid, addr, tag = next_valid, next_addr, next_tag

        read_data = Signal(bus * 8)
        m.submodules.storage = Instance(
            "cosim_dram_storage",
            p_BUS_BYTES=bus,
            i_clk=ClockSignal(),
            i_rd_en=valid,
            i_rd_addr=addr & align,
            o_rd_data=read_data,
            i_wr_en=self.wr.valid,
            i_wr_addr=self.wr.payload.addr & align,
            i_wr_data=self.wr.payload.data,
            i_wr_strb=self.wr.payload.strb,
        )
        m.d.sync += [self.rd_resp.valid.eq(valid), self.rd_resp.payload.tag.eq(tag)]
        m.d.comb += self.rd_resp.payload.data.eq(read_data)
        return m

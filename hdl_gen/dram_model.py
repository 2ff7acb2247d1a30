"""Simulation-only DRAM with configurable bus width and read latency, and a hostile mode."""

from __future__ import annotations

from amaranth import ClockSignal, Instance, Module, Mux, ResetSignal, Signal
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from arch.config import AccelConfig
from arch.isa import DRAM_ADDR_BITS
from hdl_gen.dram_bus import read_request, read_response, write_signature

EXTRA_BITS = 8  # extra read latency per request: 0..255 cycles (sim/csrc/cosim_dram_pause.cpp)


class DramModel(wiring.Component):
    """One read and one write beat of ``dram_bytes_per_cycle`` bytes per cycle; read data returns
    ``dram_latency`` cycles after the request, in order. The bytes are held by the DPI module
    ``cosim_dram_storage`` (sim/hdl/cosim_dram_storage.v).

    The testbench may make it hostile at run time (``DRAM_STALL``, sim/backends/dram_stall.py):
    the DPI module ``cosim_dram_pause`` (sim/hdl/cosim_dram_pause.v) drops ``rd_req.ready`` and
    ``wr.ready`` on seeded random cycles and in bursts, and adds a random extra latency to each
    read. Unconfigured (the ``none`` profile) it is always ready with the fixed latency.

    Attributes
    ----------
    rd_req : In(stream of {addr, tag})
        Ready unless paused or ``dram_latency`` + 1 reads are in flight (never, unpaused).
        Addresses are rounded down to the bus width.
    rd_resp : Out(stream of {data, tag})
        Never waits for the receiver.
    wr : In(stream of {addr, data, strb})
        Ready unless paused; the write is visible to reads issued from the next cycle on.
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
        latency = self.config.dram_latency
        align = ~(bus - 1) & ((1 << DRAM_ADDR_BITS) - 1)

        rd_ready, wr_ready, rd_extra = Signal(), Signal(), Signal(EXTRA_BITS)
        m.submodules.pause = Instance(
            "cosim_dram_pause",
            p_EXTRA_BITS=EXTRA_BITS,
            i_clk=ClockSignal(),
            i_rst=ResetSignal(),
            o_rd_ready=rd_ready,
            o_wr_ready=wr_ready,
            o_rd_extra=rd_extra,
        )

        # A request waits in order for its due cycle (accepted + latency - 1 + extra), then
        # spends one cycle in the storage read. Times wrap: a due time is at most 2**(bits-1)
        # cycles ahead or behind.
        depth = latency + 1
        time_bits = max(16, (2 * (latency + depth + (1 << EXTRA_BITS))).bit_length() + 1)
        now = Signal(time_bits)
        m.d.sync += now.eq(now + 1)
        tag = self.rd_req.payload.tag
        entry = data.StructLayout({"addr": DRAM_ADDR_BITS, "tag": len(tag), "due": time_bits})
        m.submodules.pending = pending = SyncFIFO(width=entry.size, depth=depth)
        head = data.View(entry, pending.r_data)
        incoming = self.rd_req.valid & self.rd_req.ready
        due = (now + latency - 1 + rd_extra)[:time_bits]
        head_due = pending.r_rdy & ~(now - head.due)[time_bits - 1]
        m.d.comb += [
            self.rd_req.ready.eq(rd_ready & pending.w_rdy),
            pending.r_en.eq(head_due),
        ]
        pushed = data.View(entry, pending.w_data)
        m.d.comb += [
            pushed.addr.eq(self.rd_req.payload.addr),
            pushed.tag.eq(tag),
            pushed.due.eq(due),
        ]
        issue, addr, issue_tag = Signal(), Signal(DRAM_ADDR_BITS), Signal.like(tag)
        if latency == 1:
            # No cycle in the queue: an unpaused request is read in the cycle it is made.
            bypass = incoming & ~pending.r_rdy & (rd_extra == 0)
            m.d.comb += [
                pending.w_en.eq(incoming & ~bypass),
                issue.eq(head_due | bypass),
                addr.eq(Mux(bypass, self.rd_req.payload.addr, head.addr)),
                issue_tag.eq(Mux(bypass, tag, head.tag)),
            ]
        else:
            m.d.comb += [
                pending.w_en.eq(incoming),
                issue.eq(head_due),
                addr.eq(head.addr),
                issue_tag.eq(head.tag),
            ]

        read_data = Signal(bus * 8)
        m.submodules.storage = Instance(
            "cosim_dram_storage",
            p_BUS_BYTES=bus,
            i_clk=ClockSignal(),
            i_rd_en=issue,
            i_rd_addr=addr & align,
            o_rd_data=read_data,
            i_wr_en=self.wr.valid & self.wr.ready,
            i_wr_addr=self.wr.payload.addr & align,
            i_wr_data=self.wr.payload.data,
            i_wr_strb=self.wr.payload.strb,
        )
        m.d.comb += self.wr.ready.eq(wr_ready)
        m.d.sync += [self.rd_resp.valid.eq(issue), self.rd_resp.payload.tag.eq(issue_tag)]
        m.d.comb += self.rd_resp.payload.data.eq(read_data)
        return m

"""A requester's end of a DRAM read link: never asks for more data than it has room for."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from arch.isa import DRAM_ADDR_BITS
from hdl_gen.dram_bus import read_signature


class ReadPort(wiring.Component):
    """Issues read requests while fewer than ``depth`` beats are outstanding or buffered, and
    buffers the responses in a FIFO, so responses (which cannot wait) always have room.

    Attributes
    ----------
    addr : In(stream of DRAM byte addresses)
        One request per accepted address.
    data : Out(stream of beats)
        The responses, in request order.
    bus : Out(read link)
        To the arbiter / DRAM.
    empty : Out(1)
        Nothing outstanding or buffered.
    """

    def __init__(self, bus_bytes: int, depth: int) -> None:
        self.bus_bytes, self.depth = bus_bytes, depth
        super().__init__(
            {
                "addr": In(stream.Signature(DRAM_ADDR_BITS)),
                "data": Out(stream.Signature(bus_bytes * 8)),
                "bus": Out(read_signature(bus_bytes)),
                "empty": Out(1),
            }
        )

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.submodules.buffer = buffer = fifo.SyncFIFOBuffered(
            width=self.bus_bytes * 8, depth=self.depth
        )
        in_use = Signal(range(self.depth + 1))  # requested and not yet taken out of the buffer
        issue = self.addr.valid & self.bus.req.ready & (in_use < self.depth)
        taken = self.data.valid & self.data.ready
        m.d.comb += [
            self.bus.req.valid.eq(self.addr.valid & (in_use < self.depth)),
            self.bus.req.payload.eq(self.addr.payload),
            self.addr.ready.eq(self.bus.req.ready & (in_use < self.depth)),
            buffer.w_en.eq(self.bus.resp.valid),
            buffer.w_data.eq(self.bus.resp.payload),
            self.data.valid.eq(buffer.r_rdy),
            self.data.payload.eq(buffer.r_data),
            buffer.r_en.eq(self.data.ready),
            self.empty.eq(in_use == 0),
        ]
        m.d.sync += in_use.eq(in_use + issue - taken)
        return m

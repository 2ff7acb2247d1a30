"""Reads one 64-byte DMA descriptor from the descriptor table in DRAM."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from arch import isa


def _members(bus_bytes: int, **extra: wiring.Member) -> dict[str, wiring.Member]:
    """A descriptor reader's ports: ``start`` with ``index``, the launch's table, its read
    port (``addr`` out, ``data`` in), ``desc`` with ``done``, the error; and ``extra``."""
    return {
        "start": In(1),
        "index": In(isa.DESC_INDEX_BITS),
        "desc_base": In(isa.LAUNCH_BITS),
        "desc_count": In(isa.LAUNCH_BITS),
        "addr": Out(stream.Signature(isa.DRAM_ADDR_BITS)),
        "data": In(stream.Signature(bus_bytes * 8)),
        "desc": Out(isa.DESCRIPTOR.layout),
        "done": Out(1),
        "error": Out(1),
        "error_code": Out(isa.ErrorCode),
        **extra,
    }


class DescriptorFetcher(wiring.Component):
    """On ``start``, checks ``index < desc_count`` (else BAD_DESCRIPTOR) and reads descriptor
    ``index`` from ``desc_base`` through its read port; ``desc`` is valid when ``done`` pulses.

    Attributes
    ----------
    addr : Out(stream of byte addresses), data : In(stream of beats)
        The read port it uses (a :class:`~hdl_gen.read_port.ReadPort`).
    """

    def __init__(self, bus_bytes: int) -> None:
        self.bus_bytes = bus_bytes
        super().__init__(_members(bus_bytes, busy=Out(1)))

    def elaborate(self, platform: object) -> Module:
        m = Module()
        bus_bits = self.bus_bytes * 8
        beats = max(1, isa.DESC_BYTES // self.bus_bytes)
        address = Signal(isa.DRAM_ADDR_BITS)
        requested = Signal(range(beats + 1))
        received = Signal(range(beats + 1))
        word = Signal(isa.DESC_BITS)
        m.d.comb += self.desc.as_value().eq(word)

        with m.FSM(name="fetch"):
            with m.State("IDLE"), m.If(self.start):
                with m.If(self.index >= self.desc_count):
                    m.d.sync += [
                        self.error.eq(1),
                        self.error_code.eq(isa.ErrorCode.BAD_DESCRIPTOR),
                    ]
                    m.next = "STOPPED"
                with m.Else():
                    m.d.sync += [
                        address.eq(self.desc_base + self.index * isa.DESC_BYTES),
                        requested.eq(0),
                        received.eq(0),
                    ]
                    m.next = "READ"
            with m.State("READ"):
                m.d.comb += [
                    self.busy.eq(1),
                    self.addr.valid.eq(requested < beats),
                    self.addr.payload.eq(address + requested * self.bus_bytes),
                    self.data.ready.eq(1),
                ]
                with m.If(self.addr.valid & self.addr.ready):
                    m.d.sync += requested.eq(requested + 1)
                with m.If(self.data.valid):
                    if self.bus_bytes >= isa.DESC_BYTES:
                        # One beat holds the whole descriptor (and maybe its neighbours).
                        offset = address & (self.bus_bytes - 1)
                        m.d.sync += word.eq(self.data.payload >> (offset * 8))
                    else:
                        m.d.sync += word.eq(
                            (word >> bus_bits) | (self.data.payload << (isa.DESC_BITS - bus_bits))
                        )
                    m.d.sync += received.eq(received + 1)
                    with m.If(received == beats - 1):
                        m.next = "DONE"
            with m.State("DONE"):
                m.d.comb += [self.done.eq(1), self.busy.eq(1)]
                m.next = "IDLE"
            with m.State("STOPPED"):
                m.d.comb += self.busy.eq(1)
        return m


class PrefetchingFetcher(wiring.Component):
    """A :class:`DescriptorFetcher` that reads the queue head's descriptor ahead, while the
    unit still runs the instruction before it: ``desc`` is the current instruction's (a
    register, so the next one can be fetched meanwhile), valid from ``done`` until the next
    ``start``.

    ``ahead`` says the queue head (not started yet) reads descriptor ``ahead_index``; it is
    fetched when the fetcher is free, and only an index below ``desc_count`` (a bad one is
    fetched, and refused, when its instruction starts, which is then the one named). On
    ``start`` (the current instruction, descriptor ``index``) ``done`` pulses the next cycle if
    its descriptor was read ahead, when it lands if it is on its way (never with ``start``),
    else after a fetch.

    Attributes
    ----------
    addr : Out(stream of byte addresses), data : In(stream of beats)
        The read port it uses.
    """

    def __init__(self, bus_bytes: int) -> None:
        self.bus_bytes = bus_bytes
        super().__init__(_members(bus_bytes, ahead=In(1), ahead_index=In(isa.DESC_INDEX_BITS)))

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.submodules.fetcher = fetcher = DescriptorFetcher(self.bus_bytes)
        wiring.connect(m, fetcher.addr, wiring.flipped(self.addr))
        wiring.connect(m, wiring.flipped(self.data), fetcher.data)
        current = Signal(isa.DESC_BITS)
        early = Signal()  # the head's descriptor is on its way
        held = Signal()  # the fetcher holds the head's descriptor
        waiting = Signal()  # the current instruction waits for the fetcher
        ready = Signal()  # the current instruction's descriptor is in `current`
        free = Signal()  # the fetcher takes a start
        m.d.comb += [
            free.eq(~fetcher.busy),
            fetcher.desc_base.eq(self.desc_base),
            fetcher.desc_count.eq(self.desc_count),
            self.error.eq(fetcher.error),
            self.error_code.eq(fetcher.error_code),
        ]
        fetched = fetcher.desc.as_value()
        go_ahead = self.ahead & ~self.start & ~early & ~held & free
        go_ahead &= self.ahead_index < self.desc_count
        with m.If(self.start):
            with m.If(held):
                m.d.sync += [current.eq(fetched), ready.eq(1), held.eq(0)]
            with m.Elif(early):
                m.d.sync += waiting.eq(1)
            with m.Else():
                m.d.comb += [fetcher.start.eq(1), fetcher.index.eq(self.index)]
                m.d.sync += waiting.eq(1)
        with m.Elif(go_ahead):
            m.d.comb += [fetcher.start.eq(1), fetcher.index.eq(self.ahead_index)]
            m.d.sync += early.eq(1)
        with m.If(ready):
            m.d.comb += self.done.eq(1)
            m.d.sync += ready.eq(0)
        with m.If(fetcher.done):
            m.d.sync += early.eq(0)
            with m.If(waiting):
                m.d.comb += self.done.eq(1)
                m.d.sync += [current.eq(fetched), waiting.eq(0)]
            with m.Elif(self.start):  # (early) it lands as its instruction starts: next cycle
                m.d.sync += [current.eq(fetched), ready.eq(1), waiting.eq(0)]
            with m.Else():
                m.d.sync += held.eq(1)
        m.d.comb += self.desc.as_value().eq(Mux(fetcher.done & waiting, fetched, current))
        return m

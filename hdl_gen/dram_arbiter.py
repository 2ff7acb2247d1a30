"""Round-robin arbiter sharing the DRAM read port among several requesters."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl_gen.dram_bus import read_request, read_response, read_signature


class ReadArbiter(wiring.Component):
    """Grants one request per cycle, round robin; tags requests with the requester's index and
    routes each response back by its tag.

    Attributes
    ----------
    clients : In(read link) x n
        ``clients[i].req`` / ``clients[i].resp``.
    dram_req : Out(stream of {addr, tag})
    dram_resp : In(stream of {data, tag})
    """

    def __init__(self, clients: int, bus_bytes: int) -> None:
        if not isinstance(clients, int) or clients < 1:
            raise TypeError(f"Clients must be a positive integer, not {clients!r}")
        self.n = clients
        self.tag_bits = max(1, (clients - 1).bit_length())
        members = {f"client{i}": In(read_signature(bus_bytes)) for i in range(clients)}
        members["dram_req"] = Out(read_request(self.tag_bits))
        members["dram_resp"] = In(read_response(bus_bytes, self.tag_bits))
        super().__init__(members)

    def client(self, index: int) -> wiring.PureInterface:
        return getattr(self, f"client{index}")

    def elaborate(self, platform: object) -> Module:
        m = Module()
        last = Signal(range(self.n), init=self.n - 1)  # index granted most recently
        clients = [self.client(i) for i in range(self.n)]
        # Priority order starts after `last`: for each rotation, pick the first valid requester.
        with m.Switch(last):
            for rotation in range(self.n):
                with m.Case(rotation):
                    order = [(rotation + 1 + k) % self.n for k in range(self.n)]
                    with m.If(self.dram_req.ready):
                        for position, index in enumerate(order):
                            earlier = [clients[j].req.valid for j in order[:position]]
                            chosen = clients[index].req.valid
                            for other in earlier:
                                chosen = chosen & ~other
                            with m.If(chosen):
                                m.d.comb += [
                                    self.dram_req.valid.eq(1),
                                    self.dram_req.payload.addr.eq(clients[index].req.payload),
                                    self.dram_req.payload.tag.eq(index),
                                    clients[index].req.ready.eq(1),
                                ]
                                m.d.sync += last.eq(index)
        for index, client in enumerate(clients):
            m.d.comb += [
                client.resp.valid.eq(self.dram_resp.valid & (self.dram_resp.payload.tag == index)),
                client.resp.payload.eq(self.dram_resp.payload.data),
            ]
        return m

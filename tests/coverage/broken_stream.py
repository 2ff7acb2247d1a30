"""A test-only stream link with a deliberately broken source, under the assertions of
hdl_gen/checks.py: ``valid`` drops after one cycle when ``ready`` is low (a broken handshake),
so ``link.valid_held`` must fire; with ``broken=False`` the source keeps the rules."""

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hdl_gen import checks


class BrokenSource(wiring.Component):
    """A counter source: offers ``payload`` whenever ``go`` is high; the sink's ``ready`` is an
    input. ``broken``: withdraw the offer after one waiting cycle."""

    go: In(1)
    ready: In(1)
    valid: Out(1)
    payload: Out(8)

    def __init__(self, broken: bool) -> None:
        self.broken = broken
        super().__init__()

    def elaborate(self, platform: object) -> Module:
        m = Module()
        waited = Signal()
        with m.If(self.valid & self.ready):
            m.d.sync += [self.valid.eq(0), self.payload.eq(self.payload + 1), waited.eq(0)]
        with m.Elif(self.valid):
            m.d.sync += waited.eq(1)
            if self.broken:
                with m.If(waited):
                    m.d.sync += self.valid.eq(0)  # the bug: gives up without a transfer
        with m.Elif(self.go):
            m.d.sync += self.valid.eq(1)
        checks.stream_rules(m, "link", self.valid, self.ready, self.payload)
        return m

"""DMA address generator: walks a descriptor's 4-level loop nest, one line per cycle."""

from __future__ import annotations

from amaranth import Module, Signal, Value, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from arch import isa
from hdl_gen.local_ports import POINTER_BITS

LOOP_COUNT_BITS = isa.LOOP.leaf_by_path["count"].width  # a loop index counts below its count

LINE = data.StructLayout(
    {
        "local": unsigned(isa.LOCAL_ADDR_BITS),
        "dram": unsigned(isa.DRAM_ADDR_BITS),
        "valid": unsigned(1),  # inside the height/width bounds (else padding / skipped)
        "index": data.ArrayLayout(unsigned(LOOP_COUNT_BITS), isa.DESC_LOOPS),
        "last": unsigned(1),
    }
)


class AddressGenerator(wiring.Component):
    """Emits every line of a descriptor in loop order with its local and DRAM addresses and
    whether it lies inside the bounds, checking each line as the ISA requires.

    Attributes
    ----------
    desc : In(descriptor layout)
        Held stable from ``start`` until ``busy`` falls.
    start : In(1)
        Begin walking ``desc``.
    line_bytes, lines_in_mem, align : In
        Bytes per line, local memory size in lines, required DRAM alignment (power of two).
    every_line : In(1)
        Check the DRAM address of every line, not only of those inside the bounds (a
        transposing store writes them all).
    lines : Out(stream of LINE)
    busy : Out(1)
    error : Out(1), error_code : Out(ErrorCode)
        A zero count (BAD_FIELD), a local address outside the memory (LOCAL_RANGE) or an
        in-bounds line (any line with ``every_line``) outside DRAM or misaligned (DRAM_RANGE);
        the walk stops.
    """

    def __init__(self, dram_bytes: int) -> None:
        self.dram_bytes = dram_bytes
        super().__init__(
            {
                "desc": In(isa.DESCRIPTOR.layout),
                "start": In(1),
                "line_bytes": In(16),
                "lines_in_mem": In(POINTER_BITS),
                "align": In(16),
                "every_line": In(1),
                "lines": Out(stream.Signature(LINE)),
                "busy": Out(1),
                "error": Out(1),
                "error_code": Out(isa.ErrorCode),
            }
        )

    def elaborate(self, platform: object) -> Module:
        m = Module()
        desc, levels = self.desc, isa.DESC_LOOPS
        loops = [desc.loops[level] for level in range(levels)]
        count = [Signal(LOOP_COUNT_BITS, name=f"i{level}") for level in range(levels)]
        # acc[q][l]: quantity q at the start of the current iteration of level l.
        # DRAM addresses wrap modulo 2**DRAM_ADDR_BITS, as the ISA says; the local address (checked
        # against the memory size) and the y/x coordinates are kept in 32 signed bits.
        quantities = {
            "local": signed(32),
            "dram": unsigned(isa.DRAM_ADDR_BITS),
            "y": signed(32),
            "x": signed(32),
        }
        acc = {
            q: [Signal(shape, name=f"{q}{lv}") for lv in range(levels)]
            for q, shape in quantities.items()
        }
        stride = {
            "local": [lp.local_stride for lp in loops],
            "dram": [lp.dram_stride for lp in loops],
            "y": [lp.ystep for lp in loops],
            "x": [lp.xstep for lp in loops],
        }
        base = {"local": desc.local_base, "dram": desc.dram_base, "y": desc.y0, "x": desc.x0}
        inner = {q: acc[q][levels - 1] for q in quantities}

        at_end = [count[lv] == loops[lv].count - 1 for lv in range(levels)]
        last = Signal()
        m.d.comb += last.eq(at_end[0] & at_end[1] & at_end[2] & at_end[3])
        y, x = inner["y"], inner["x"]
        inside_y = (desc.height == 0) | ((y >= 0) & (y < desc.height))
        inside_x = (desc.width == 0) | ((x >= 0) & (x < desc.width))
        valid = inside_y & inside_x
        local_ok = (inner["local"] >= 0) & (inner["local"] < self.lines_in_mem)
        dram_end = inner["dram"] + self.line_bytes  # a bit wider than an address: no wrap
        dram_ok = (dram_end <= self.dram_bytes) & ((inner["dram"] & (self.align - 1)) == 0)

        m.d.comb += [
            self.lines.payload.local.eq(inner["local"]),
            self.lines.payload.dram.eq(inner["dram"]),
            self.lines.payload.valid.eq(valid),
            self.lines.payload.last.eq(last),
        ]
        for lv in range(levels):
            m.d.comb += self.lines.payload.index[lv].eq(count[lv])

        with m.FSM(name="walk"):
            with m.State("IDLE"), m.If(self.start):
                zero = (
                    (loops[0].count == 0)
                    | (loops[1].count == 0)
                    | (loops[2].count == 0)
                    | (loops[3].count == 0)
                )
                with m.If(zero):
                    m.d.sync += [self.error.eq(1), self.error_code.eq(isa.ErrorCode.BAD_FIELD)]
                    m.next = "STOPPED"
                with m.Else():
                    for q in quantities:
                        for lv in range(levels):
                            m.d.sync += acc[q][lv].eq(base[q])
                    for lv in range(levels):
                        m.d.sync += count[lv].eq(0)
                    m.next = "WALK"
            with m.State("WALK"):
                m.d.comb += self.busy.eq(1)
                with m.If(~local_ok):
                    m.d.sync += [self.error.eq(1), self.error_code.eq(isa.ErrorCode.LOCAL_RANGE)]
                    m.next = "STOPPED"
                with m.Elif((valid | self.every_line) & ~dram_ok):
                    m.d.sync += [self.error.eq(1), self.error_code.eq(isa.ErrorCode.DRAM_RANGE)]
                    m.next = "STOPPED"
                with m.Else():
                    m.d.comb += self.lines.valid.eq(1)
                    with m.If(self.lines.ready):
                        with m.If(last):
                            m.next = "IDLE"
                        _advance(m, count, acc, stride, at_end)
            with m.State("STOPPED"):
                m.d.comb += self.busy.eq(1)
        return m


def _advance(
    m: Module,
    count: list[Signal],
    acc: dict[str, list[Signal]],
    stride: dict[str, list[Value]],
    at_end: list[Value],
) -> None:
    """Advance the innermost loop level that is not at its end (its index and, from it inwards,
    every quantity by its stride); restart the levels inside it."""
    levels = len(count)
    for lv in reversed(range(levels)):
        outer_done = at_end[lv + 1 :]
        cond = ~at_end[lv]
        for done in outer_done:
            cond = cond & done
        with m.If(cond):
            m.d.sync += count[lv].eq(count[lv] + 1)
            for q in acc:
                stepped = acc[q][lv] + stride[q][lv]
                for k in range(lv, levels):
                    m.d.sync += acc[q][k].eq(stepped)
            for k in range(lv + 1, levels):
                m.d.sync += count[k].eq(0)

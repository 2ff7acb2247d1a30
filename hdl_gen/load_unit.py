"""Load unit: executes LOAD - DMA from DRAM into the ACT, WGT or PARAM memory - and SYNC."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, fifo, wiring
from amaranth.lib.wiring import In, Out

from arch import isa
from arch.config import AccelConfig
from hdl_gen.addrgen import AddressGenerator
from hdl_gen.desc_fetch import PrefetchingFetcher
from hdl_gen.dram_bus import read_signature
from hdl_gen.local_ports import POINTER_BITS, param_line_bits, write_port
from hdl_gen.read_port import ReadPort
from hdl_gen.tokens import ErrorLatch, UnitFrame, unit_signature


class LoadUnit(wiring.Component):
    """Fetches the descriptor, walks it, reads DRAM with up to ``inflight`` beats outstanding
    and writes one local line per beat (lines wider than the bus take several beats; padding
    lines are written without reading DRAM).

    A LOAD retires once its last line is requested, so the next instruction's requests overlap
    the data still on its way; the next LOAD's descriptor is read while this one walks (the
    queue head's, :class:`~hdl_gen.desc_fetch.PrefetchingFetcher`). Lines land in order, each
    carrying what its write needs (memory, pad value); a LOAD's token to COMPUTE rides on its
    last line and is pushed when that line is written (waiting there for room). A SYNC first
    waits until every line has landed, so a token from this queue still means: everything
    before it is in. At most ``inflight`` lines and ``push_records`` LOADs' tokens are on their
    way at once.

    Attributes
    ----------
    desc_bus, data_bus : Out(read link)
    act, wgt, param : Out(write port)
    dram_wait : Out(1)
        A line is due but its data has not arrived.
    landing : Out(1)
        Lines are on their way and none waits for room to push a token: the unit is not
        blocked, whatever its next instruction waits for.
    """

    def __init__(self, config: AccelConfig, inflight: int = 64, push_records: int = 4) -> None:
        self.config = c = config
        self.inflight = inflight
        self.push_records = push_records
        bus = c.dram_bytes_per_cycle
        super().__init__(
            unit_signature(
                {
                    "desc_base": In(isa.LAUNCH_BITS),
                    "desc_count": In(isa.LAUNCH_BITS),
                    "desc_bus": Out(read_signature(bus)),
                    "data_bus": Out(read_signature(bus)),
                    "act": Out(write_port(c.act_line_bytes * 8)),
                    "wgt": Out(write_port(c.wgt_line_bytes * 8)),
                    "param": Out(write_port(param_line_bits(c))),
                    "dram_wait": Out(1),
                    "landing": Out(1),
                }
            )
        )

    def elaborate(self, platform: object) -> Module:
        m = Module()
        bus = self.config.dram_bytes_per_cycle
        frame = UnitFrame(self, m)
        errors = ErrorLatch(self, m)
        fetcher, addrgen, data_port = self._walker(m, frame, errors)
        desc = fetcher.desc
        beats = self._line_geometry(m, desc, addrgen)

        # Lines whose data is on the way, in order: local address, padding flag, byte offset,
        # the memory and pad value of their LOAD, and whether the LOAD's token rides on it.
        entry = data.StructLayout(
            {
                "local": isa.LOCAL_ADDR_BITS,
                "valid": 1,
                "offset": range(bus),
                "mem": isa.Mem,
                "pad": 8,
                "push": 1,
            }
        )
        m.submodules.pending = pending = fifo.SyncFIFOBuffered(
            width=entry.size, depth=self.inflight
        )
        # Program indexes of the LOADs whose token rides on a line still on the way (for the
        # DEADLOCK error while such a line waits for room to push).
        m.submodules.pushes = pushes = fifo.SyncFIFOBuffered(
            width=isa.INSN_INDEX_BITS, depth=self.push_records
        )
        walking = Signal()
        # Lines queued and not yet written. (The FIFO's r_rdy lags w_en, so it cannot tell when
        # the last line has landed.)
        in_flight = Signal(range(self.inflight + 2))
        m.d.sync += in_flight.eq(in_flight + pending.w_en - pending.r_en)
        m.d.comb += frame.deferred.eq(frame.insn.load.opcode == isa.Opcode.LOAD)

        with m.FSM(name="load"):
            with m.State("IDLE"), m.If(frame.start):
                m.next = "BEGIN"
            with m.State("BEGIN"):
                with m.If(frame.insn.load.opcode == isa.Opcode.SYNC):
                    # Tokens only, once every line has landed.
                    with m.If(in_flight == 0):
                        m.d.comb += frame.done.eq(1)
                        m.next = "IDLE"
                with m.Else():
                    m.d.comb += fetcher.start.eq(1)
                    m.next = "DESCRIPTOR"
            with m.State("DESCRIPTOR"), m.If(fetcher.done):
                with m.If(desc.mem == isa.Mem.ACC):
                    errors.raise_(1, isa.ErrorCode.BAD_FIELD)
                    m.next = "STOPPED"
                with m.Else():
                    m.d.comb += addrgen.start.eq(1)
                    m.d.sync += walking.eq(1)
                    m.next = "MOVE"
            with m.State("MOVE"), m.If(~walking & ~addrgen.busy):
                m.d.comb += frame.done.eq(1)
                m.next = "IDLE"
            with m.State("STOPPED"):
                pass

        queued = data.View(entry, pending.w_data)
        m.d.comb += [queued.mem.eq(desc.mem), queued.pad.eq(desc.pad_value.as_unsigned())]
        push = frame.insn.load.deps.push_next
        self._issue(m, addrgen, data_port, (pending, queued, pushes), beats, walking, push)
        blocked = self._write(m, data_port, data.View(entry, pending.r_data), pending, pushes)
        m.d.comb += self.landing.eq((in_flight != 0) & ~blocked)
        with m.If(in_flight != 0):  # not idle while lines are on the way (END waits for them)
            m.d.comb += self.idle.eq(0)
        return m

    def _walker(
        self, m: Module, frame: UnitFrame, errors: ErrorLatch
    ) -> tuple[PrefetchingFetcher, AddressGenerator, ReadPort]:
        """The descriptor fetcher - reading the next LOAD's descriptor while this one walks -
        and the address generator that walks the descriptor's lines, and the read port for the
        lines' data (each on its own DRAM read link)."""
        bus = self.config.dram_bytes_per_cycle
        m.submodules.desc_port = desc_port = ReadPort(bus, max(4, isa.DESC_BYTES // bus))
        m.submodules.data_port = data_port = ReadPort(bus, self.inflight)
        m.submodules.fetcher = fetcher = PrefetchingFetcher(bus)
        m.submodules.addrgen = addrgen = AddressGenerator(self.config.dram_bytes)
        wiring.connect(m, wiring.flipped(self.desc_bus), desc_port.bus)
        wiring.connect(m, wiring.flipped(self.data_bus), data_port.bus)
        wiring.connect(m, fetcher.addr, desc_port.addr)
        wiring.connect(m, desc_port.data, fetcher.data)
        head = frame.start_insn.load
        m.d.comb += [
            fetcher.index.eq(frame.insn.load.desc),
            fetcher.ahead.eq(self.queue.valid & (head.opcode == isa.Opcode.LOAD) & ~self.halt),
            fetcher.ahead_index.eq(head.desc),
            fetcher.desc_base.eq(self.desc_base),
            fetcher.desc_count.eq(self.desc_count),
            addrgen.desc.eq(fetcher.desc),
        ]
        errors.raise_(fetcher.error, isa.ErrorCode.BAD_DESCRIPTOR)
        errors.raise_(addrgen.error, addrgen.error_code)
        return fetcher, addrgen, data_port

    def _geometry(self) -> dict[isa.Mem, tuple[int, int]]:
        """Bytes and lines of a line of each memory a LOAD can fill."""
        c = self.config
        return {
            isa.Mem.ACT: (c.act_line_bytes, c.act_lines),
            isa.Mem.WGT: (c.wgt_line_bytes, c.wgt_lines),
            isa.Mem.PARAM: (c.cols * isa.PARAM_ENTRY_BYTES, c.param_lines),
        }

    def _line_geometry(self, m: Module, desc: data.View, addrgen: AddressGenerator) -> Signal:
        """The walked memory's line geometry, selected by the descriptor's ``mem``, for the
        address generator; returns the bus beats of a line."""
        bus = self.config.dram_bytes_per_cycle
        # (Bytes of a line are config sizes, far below 2**16.)
        line_bytes, lines_in_mem = Signal(16), Signal(POINTER_BITS)
        with m.Switch(desc.mem):
            for mem, (nbytes, nlines) in self._geometry().items():
                with m.Case(mem):
                    m.d.comb += [line_bytes.eq(nbytes), lines_in_mem.eq(nlines)]
        m.d.comb += [
            addrgen.line_bytes.eq(line_bytes),
            addrgen.lines_in_mem.eq(lines_in_mem),
            addrgen.align.eq(Mux(line_bytes < bus, line_bytes, bus)),
        ]
        return self._beats(m, desc.mem)

    def _beats(self, m: Module, mem: data.View) -> Signal:
        """Bus beats of a line of ``mem``."""
        bus = self.config.dram_bytes_per_cycle
        beats = Signal(16)
        with m.Switch(mem):
            for name, (nbytes, _) in self._geometry().items():
                with m.Case(name):
                    m.d.comb += beats.eq(max(1, nbytes // bus))
        return beats

    def _issue(
        self,
        m: Module,
        addrgen: AddressGenerator,
        data_port: ReadPort,
        queued: tuple[fifo.SyncFIFOBuffered, data.View, fifo.SyncFIFOBuffered],
        beats: Signal,
        walking: Signal,
        push: Signal,
    ) -> None:
        """Issue: one DRAM request per beat of each in-bounds line, then queue the line
        (padding lines are queued at once); the last line carries the LOAD's token (``push``)
        and its program index goes to ``pushes``."""
        pending, entry, pushes = queued
        bus = self.config.dram_bytes_per_cycle
        issued = Signal(16)
        line = addrgen.lines.payload
        aligned = line.dram & ~(bus - 1)
        carries = line.last & push
        room = pending.w_rdy & (~carries | pushes.w_rdy)
        with m.If(addrgen.lines.valid & room & ~self.halt):
            with m.If(line.valid):
                m.d.comb += [
                    data_port.addr.valid.eq(1),
                    data_port.addr.payload.eq(aligned + issued * bus),
                ]
                with m.If(data_port.addr.ready):
                    with m.If(issued == beats - 1):
                        m.d.sync += issued.eq(0)
                        m.d.comb += [addrgen.lines.ready.eq(1), pending.w_en.eq(1)]
                    with m.Else():
                        m.d.sync += issued.eq(issued + 1)
            with m.Else():
                m.d.comb += [addrgen.lines.ready.eq(1), pending.w_en.eq(1)]
        m.d.comb += [
            entry.local.eq(line.local),
            entry.valid.eq(line.valid),
            entry.offset.eq(line.dram[: (bus - 1).bit_length()]),
            entry.push.eq(carries),
            pushes.w_en.eq(pending.w_en & carries),
            pushes.w_data.eq(self.index),
        ]
        with m.If(addrgen.lines.valid & addrgen.lines.ready & line.last):
            m.d.sync += walking.eq(0)

    def _write(
        self,
        m: Module,
        data_port: ReadPort,
        head: data.View,
        pending: fifo.SyncFIFOBuffered,
        pushes: fifo.SyncFIFOBuffered,
    ) -> Signal:
        """Write the line at the queue's ``head``: a padding line at once, a data line when its
        beats are in; a line that carries its LOAD's token waits for room and pushes it.
        Returns whether it waits for that room."""
        bus = self.config.dram_bytes_per_cycle
        widest = max(nbytes for nbytes, _ in self._geometry().values()) * 8
        beats = self._beats(m, head.mem)
        assembled = Signal(max(widest, bus * 8))
        received = Signal(16)
        line_data = Signal(widest)
        write = Signal()
        blocked = Signal()
        pad = head.pad
        room = ~head.push | self.deps.room_next
        last_beat = (beats == 1) | (received == beats - 1)
        with m.If(pending.r_rdy & ~self.halt):
            with m.If(~head.valid):
                with m.If(room):
                    m.d.comb += [
                        line_data.eq(Cat(*[pad] * (widest // 8))),
                        write.eq(1),
                        pending.r_en.eq(1),
                    ]
            with m.Else():
                m.d.comb += [
                    data_port.data.ready.eq(~last_beat | room),
                    self.dram_wait.eq(~data_port.data.valid),
                ]
                with m.If(data_port.data.valid & (~last_beat | room)):
                    with m.If(beats == 1):
                        # The whole line is in this beat (possibly a part of it).
                        m.d.comb += [
                            line_data.eq(data_port.data.payload >> (head.offset * 8)),
                            write.eq(1),
                            pending.r_en.eq(1),
                        ]
                    with m.Elif(received == beats - 1):
                        whole = Signal.like(assembled)
                        m.d.comb += whole.eq(assembled)
                        m.d.comb += whole.word_select(received, bus * 8).eq(data_port.data.payload)
                        m.d.comb += [line_data.eq(whole), write.eq(1), pending.r_en.eq(1)]
                        m.d.sync += received.eq(0)
                    with m.Else():
                        m.d.sync += [
                            assembled.word_select(received, bus * 8).eq(data_port.data.payload),
                            received.eq(received + 1),
                        ]
            ready = ~head.valid | (data_port.data.valid & last_beat)
            with m.If(head.push & ~room & ready):
                # Waiting to push the token of the LOAD that issued this line.
                m.d.comb += [
                    blocked.eq(1),
                    self.token_wait.eq(1),
                    self.pending.eq(1),
                    self.pending_index.eq(pushes.r_data),
                ]
        with m.If(write & head.push):
            m.d.comb += [self.deps.push_next.eq(1), pushes.r_en.eq(1)]
        for port, mem in (
            (self.act, isa.Mem.ACT),
            (self.wgt, isa.Mem.WGT),
            (self.param, isa.Mem.PARAM),
        ):
            m.d.comb += [
                port.addr.eq(head.local),
                port.data.eq(line_data),
                port.en.eq(write & (head.mem == mem)),
            ]
        return blocked

"""Instruction fetch and dispatch: reads the program from DRAM and routes each instruction to
the load, compute or store queue, in program order."""

from __future__ import annotations

from amaranth import Module, Mux, Shape, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from arch import isa
from arch.config import AccelConfig
from hdl_gen.dram_bus import read_signature
from hdl_gen.read_port import ReadPort
from hdl_gen.tokens import QUEUE_ENTRY


class Fetch(wiring.Component):
    """Prefetches up to ``prefetch`` beats ahead and dispatches one instruction per cycle.

    Checks what the ISA simulator checks at dispatch: a legal opcode (else ILLEGAL_OPCODE), a
    legal SYNC queue and dependency flags that name an existing neighbour queue, none on END
    (else BAD_FIELD), and that the program does not run off the end of DRAM (DRAM_RANGE).
    After END it stops and drops what it prefetched.

    Attributes
    ----------
    start : In(1)
    insn_base : In(LAUNCH_BITS)
    bus : Out(read link)
    load_q, compute_q, store_q : Out(stream of QUEUE_ENTRY)
    ended : Out(1)
        END was dispatched.
    stalled : Out(1)
        An instruction waits for room in its queue.
    pc : Out(INSN_INDEX_BITS)
        Index of the next instruction to dispatch.
    """

    def __init__(self, config: AccelConfig, prefetch: int = 16) -> None:
        self.config = config
        self.prefetch = prefetch
        bus = config.dram_bytes_per_cycle
        entry = stream.Signature(QUEUE_ENTRY)
        super().__init__(
            {
                "start": In(1),
                "insn_base": In(isa.LAUNCH_BITS),
                "halt": In(1),
                "bus": Out(read_signature(bus)),
                "load_q": Out(entry),
                "compute_q": Out(entry),
                "store_q": Out(entry),
                "ended": Out(1),
                "stalled": Out(1),
                "pc": Out(isa.INSN_INDEX_BITS),
                "error": Out(1),
                "error_code": Out(isa.ErrorCode),
            }
        )

    def elaborate(self, platform: object) -> Module:
        m = Module()
        bus = self.config.dram_bytes_per_cycle
        step = min(isa.INSN_BYTES, bus)  # bytes each request contributes to an instruction
        beats = isa.INSN_BYTES // step
        m.submodules.port = port = ReadPort(bus, self.prefetch)
        wiring.connect(m, wiring.flipped(self.bus), port.bus)

        running = Signal()
        with m.If(self.start):
            m.d.sync += running.eq(1)

        # Issue side: consecutive addresses until END or the end of DRAM.
        next_addr = Signal(isa.DRAM_ADDR_BITS + 1)  # a carry bit: the end of a full DRAM
        out_of_dram = next_addr + step > self.config.dram_bytes
        with m.If(self.start):
            m.d.sync += next_addr.eq(self.insn_base)
        m.d.comb += [
            port.addr.valid.eq(running & ~self.ended & ~out_of_dram & ~self.halt & ~self.error),
            port.addr.payload.eq(next_addr),
        ]
        with m.If(port.addr.valid & port.addr.ready):
            m.d.sync += next_addr.eq(next_addr + step)

        # Assemble instructions from beats.
        word = Signal(isa.INSN_BITS)
        have = Signal(range(beats + 1))
        insn_addr = Signal(isa.DRAM_ADDR_BITS)  # DRAM address of the instruction being assembled
        with m.If(self.start):
            m.d.sync += [insn_addr.eq(self.insn_base), have.eq(0)]
        complete = have == beats
        m.d.comb += port.data.ready.eq(~complete | self.ended)
        with m.If(port.data.valid & port.data.ready & ~self.ended):
            if bus >= isa.INSN_BYTES:
                slot = (insn_addr & (bus - 1)) * 8
                m.d.sync += [word.eq(port.data.payload >> slot), have.eq(1)]
            else:
                shifted = (word >> (step * 8)) | (port.data.payload << (isa.INSN_BITS - step * 8))
                m.d.sync += [word.eq(shifted), have.eq(have + 1)]

        # Dispatch.
        queues = {
            isa.Queue.LOAD: self.load_q,
            isa.Queue.COMPUTE: self.compute_q,
            isa.Queue.STORE: self.store_q,
        }
        target, legal, bad, is_end = self._decode(m, word)

        for port_q in queues.values():
            m.d.comb += [port_q.payload.insn.eq(word), port_q.payload.index.eq(self.pc)]
        room = Signal()
        with m.Switch(target):
            for queue, port_q in queues.items():
                with m.Case(queue):
                    m.d.comb += room.eq(port_q.ready)

        active = running & complete & ~self.ended & ~self.halt & ~self.error
        with m.If(active):
            with m.If(~legal):
                m.d.sync += [self.error.eq(1), self.error_code.eq(isa.ErrorCode.ILLEGAL_OPCODE)]
            with m.Elif(bad):
                m.d.sync += [self.error.eq(1), self.error_code.eq(isa.ErrorCode.BAD_FIELD)]
            with m.Elif(is_end):
                m.d.sync += self.ended.eq(1)
            with m.Else():
                for queue, port_q in queues.items():
                    m.d.comb += port_q.valid.eq(target == queue)
                m.d.comb += self.stalled.eq(~room)
                with m.If(room):
                    m.d.sync += [
                        self.pc.eq(self.pc + 1),
                        have.eq(0),
                        insn_addr.eq(insn_addr + isa.INSN_BYTES),
                    ]
        # Ran off the end of DRAM: nothing more can arrive for the instruction at `pc`.
        starved = running & ~complete & ~self.ended & out_of_dram & port.empty & ~port.data.valid
        with m.If(starved & ~self.error):
            m.d.sync += [self.error.eq(1), self.error_code.eq(isa.ErrorCode.DRAM_RANGE)]
        return m

    def _decode(self, m: Module, word: Signal) -> tuple[Signal, Signal, Value, Signal]:
        """The instruction's queue, and whether its opcode is legal, its fields are bad (a SYNC
        queue or a token flag to a missing neighbour, any on END) and it is END."""
        insn = data.View(isa.INSTRUCTION, word)
        opcode_raw = word[: Shape.cast(isa.Opcode).width]
        deps = insn.load.deps
        target = Signal(isa.Queue)
        legal, bad_field, is_end = Signal(), Signal(), Signal()
        with m.Switch(opcode_raw):
            for opcode, fmt in isa.FORMATS.items():
                if opcode is isa.Opcode.NORM and not self.config.norm_unit:
                    continue  # no norm unit: NORM stays ILLEGAL_OPCODE
                with m.Case(opcode.value):
                    m.d.comb += legal.eq(1)
                    if opcode is isa.Opcode.END:
                        m.d.comb += is_end.eq(1)
                    elif opcode is isa.Opcode.SYNC:
                        m.d.comb += [
                            target.eq(insn.sync.queue),
                            bad_field.eq(insn.sync.queue.as_value() == 3),
                        ]
                    else:
                        m.d.comb += target.eq(fmt.queue)
        no_prev = (target == isa.Queue.LOAD) & (deps.pop_prev | deps.push_prev)
        no_next = (target == isa.Queue.STORE) & (deps.pop_next | deps.push_next)
        any_dep = deps.pop_prev | deps.pop_next | deps.push_prev | deps.push_next
        bad = bad_field | Mux(is_end, any_dep, no_prev | no_next)  # END carries no tokens
        return target, legal, bad, is_end

"""Dependency tokens between the load, compute and store queues, and the frame every unit
runs its instructions in: take the queue head, pop its tokens, execute, push its tokens."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from arch import isa

QUEUE_ENTRY = data.StructLayout({"insn": isa.INSN_BITS, "index": isa.INSN_INDEX_BITS})
"""An instruction in a queue, with its program index (for errors, counters and waveforms)."""

DEPS = wiring.Signature(
    {
        "pop_prev": Out(1),
        "pop_next": Out(1),
        "push_prev": Out(1),
        "push_next": Out(1),
        "has_prev": In(1),
        "has_next": In(1),
        "room_prev": In(1),
        "room_next": In(1),
    }
)
"""A unit's side of its token counters (strobes out, counter state in)."""


class TokenCounter(wiring.Component):
    """Tokens pushed and not yet popped between two queues, at most ``depth``."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        super().__init__(
            {
                "push": In(1),
                "pop": In(1),
                "has": Out(1),
                "room": Out(1),
                "count": Out(range(depth + 1)),
            }
        )

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.d.comb += [self.has.eq(self.count > 0), self.room.eq(self.count < self.depth)]
        with m.If(self.push & ~self.pop):
            m.d.sync += self.count.eq(self.count + 1)
        with m.Elif(self.pop & ~self.push):
            m.d.sync += self.count.eq(self.count - 1)
        return m


def unit_signature(extra: dict | None = None) -> dict:
    """Members every unit has: its queue, its tokens, halt, and status outputs."""
    return {
        "queue": In(stream.Signature(QUEUE_ENTRY)),
        "deps": Out(DEPS),
        "halt": In(1),
        "idle": Out(1),  # nothing started and the queue is empty
        "busy": Out(1),  # executing an instruction
        "token_wait": Out(1),  # waiting to pop or push a token
        "retired": Out(1),  # strobe: an instruction finished
        "index": Out(isa.INSN_INDEX_BITS),  # program index of the current instruction
        "pending": Out(1),  # an instruction is taken or waiting at the queue head
        # The pending instruction's program index (the oldest this unit has not retired).
        "pending_index": Out(isa.INSN_INDEX_BITS),
        "error": Out(1),
        "error_code": Out(isa.ErrorCode),
        **(extra or {}),
    }


class UnitFrame:
    """Adds the shared instruction sequence to a unit's module.

    ``start`` pulses for one cycle when an instruction has its tokens and begins; the unit then
    runs it and raises ``done`` (for one cycle) when finished; the frame pushes the tokens and
    takes the next instruction. ``insn`` is the current instruction (a view of the union of all
    formats) and stays stable from ``start`` until the next one begins. While ``deferred`` is
    high the frame pushes no tokens when the instruction is done: the unit pushes them itself
    later (the load unit, when a LOAD's last line has landed); while ``defer_next`` is high it
    pushes the previous queue's token but not the next's (the compute unit's GEMM, whose token
    to STORE rides on its last row into ACC).
    """

    def __init__(self, unit: wiring.Component, m: Module) -> None:
        self.start = Signal()
        self.deferred = Signal()
        self.defer_next = Signal()
        self.done = Signal()
        self.running = Signal()
        word = Signal(isa.INSN_BITS)
        self.insn = data.View(isa.INSTRUCTION, word)
        head = data.View(isa.INSTRUCTION, unit.queue.payload.insn)
        # Named for waveforms: the current instruction's opcode (shown as a name in GTKWave).
        self.opcode = Signal(isa.Opcode, init=isa.Opcode.END)
        m.d.comb += self.opcode.eq(self.insn.load.opcode)
        deps = self.insn.load.deps  # every format starts with the same header
        head_deps = head.load.deps

        # The oldest instruction this unit has not retired: the queue head until it starts, then
        # the current one until it retires (overridden in RUN and RELEASE below).
        m.d.comb += [
            unit.pending.eq(unit.queue.valid),
            unit.pending_index.eq(unit.queue.payload.index),
        ]
        with m.FSM(name="frame"):
            with m.State("IDLE"):
                m.d.comb += unit.idle.eq(~unit.queue.valid)
                with m.If(unit.queue.valid & ~unit.halt):
                    m.next = "ACQUIRE"
            with m.State("ACQUIRE"):
                ready = (~head_deps.pop_prev | unit.deps.has_prev) & (
                    ~head_deps.pop_next | unit.deps.has_next
                )
                m.d.comb += unit.token_wait.eq(~ready)
                with m.If(ready & ~unit.halt):
                    m.d.comb += [
                        unit.deps.pop_prev.eq(head_deps.pop_prev),
                        unit.deps.pop_next.eq(head_deps.pop_next),
                        unit.queue.ready.eq(1),
                        self.start.eq(1),
                    ]
                    m.d.sync += [
                        word.eq(unit.queue.payload.insn),
                        unit.index.eq(unit.queue.payload.index),
                    ]
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.comb += [unit.busy.eq(1), self.running.eq(1)]
                m.d.comb += [unit.pending.eq(1), unit.pending_index.eq(unit.index)]
                with m.If(self.done):
                    m.next = "RELEASE"
            with m.State("RELEASE"):
                m.d.comb += [unit.pending.eq(1), unit.pending_index.eq(unit.index)]
                push_prev = deps.push_prev & ~self.deferred
                push_next = deps.push_next & ~self.deferred & ~self.defer_next
                room = (~push_prev | unit.deps.room_prev) & (~push_next | unit.deps.room_next)
                m.d.comb += unit.token_wait.eq(~room)
                with m.If(room & ~unit.halt):
                    m.d.comb += [
                        unit.deps.push_prev.eq(push_prev),
                        unit.deps.push_next.eq(push_next),
                        unit.retired.eq(1),
                    ]
                    m.next = "IDLE"
        # `start` reads the head directly: expose the head as the instruction in that cycle.
        self.start_insn = head


class ErrorLatch:
    """First error a unit detects: code held until reset."""

    def __init__(self, unit: wiring.Component, m: Module) -> None:
        self.unit, self.m = unit, m

    def raise_(self, condition, code: isa.ErrorCode) -> None:
        with self.m.If(condition & ~self.unit.error):
            self.m.d.sync += [self.unit.error.eq(1), self.unit.error_code.eq(code)]

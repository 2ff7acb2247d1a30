"""The ISA simulator's dispatch: the LOAD, COMPUTE and STORE queues in dataflow order, each in
program order, an instruction running when the tokens it pops are there; an ideal timing model
alongside (each queue busy for its instructions' ideal durations, tokens carrying completion
times). A LOAD or STORE waits for its descriptor, which its unit reads ahead from when it
became the queue's head. A LOAD holds its queue only while it requests its lines (its DRAM
latency overlaps the next instruction, as in the RTL's load unit); its token leaves when its
last line lands, and a SYNC in the LOAD queue waits until every line has landed. Likewise a
GEMM or CONV holds the COMPUTE queue only until its rows are read; its token to STORE leaves
when its last row is in ACC (``isa.gemm_drain_cycles``), and any other compute instruction
waits for that."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

from arch import isa
from arch.isa import ErrorCode, Opcode, Queue
from sim.backends.isa_results import IsaSimError, Span, TokenMove

if TYPE_CHECKING:
    from sim.backends.isa_machine import Machine

_PREV = {Queue.COMPUTE: Queue.LOAD, Queue.STORE: Queue.COMPUTE}
_NEXT = {Queue.LOAD: Queue.COMPUTE, Queue.COMPUTE: Queue.STORE}


class QueueScheduler:
    """Runs the three queues in dataflow order with dependency tokens and ideal timing."""

    def __init__(
        self, machine: Machine, program: Iterator[isa.Instruction], descs: list[bytes]
    ) -> None:
        self.machine = machine
        self.descs = descs
        self.source = program
        self.pending: isa.Instruction | None = None  # fetched, waiting for room in its queue
        self.ended = False  # END was dispatched
        self.fetched = 0  # instructions dispatched so far (in program order)
        self.queues: dict[Queue, deque[tuple[int, isa.Instruction]]] = {q: deque() for q in Queue}
        # tokens[(src, dst)]: completion times of pushed, not yet popped tokens
        self.tokens: dict[tuple[Queue, Queue], deque[int]] = {
            pair: deque() for q, n in _NEXT.items() for pair in ((q, n), (n, q))
        }
        self.clock = dict.fromkeys(Queue, 0)
        # A unit reads its queue head's descriptor ahead (hdl_gen/desc_fetch.py): from when the
        # instruction before it started, once the last descriptor has landed.
        self.head_at = dict.fromkeys(Queue, 0)  # when the queue's head became its head
        self.desc_free = dict.fromkeys(Queue, 0)  # when the queue's descriptor reader is free
        self.landed = 0  # when the last line of the LOADs so far has landed
        self.drained = 0  # when the last row of the GEMMs and CONVs so far has reached ACC
        self.retired = 0

    def _dispatch(self) -> bool:
        """Move instructions into their queues in program order while the target queue has room
        (config.queue_depth instructions not yet started, as in the RTL). Each instruction is
        decoded and checked when dispatch reaches it, before it waits for room."""
        moved = False
        while not self.ended:
            if self.pending is None:
                insn = next(self.source)  # decode errors of this instruction are raised here
                self._check_deps(self.fetched, insn, insn.queue)
                if insn.opcode is Opcode.END:
                    self.ended, self.fetched, moved = True, self.fetched + 1, True
                    break
                self.pending = insn
            queue = self.pending.queue
            assert queue is not None
            if len(self.queues[queue]) >= self.machine.config.queue_depth:
                break
            self.queues[queue].append((self.fetched, self.pending))
            self.pending = None
            self.fetched += 1
            moved = True
        return moved

    @staticmethod
    def _check_deps(index: int, insn: isa.Instruction, queue: Queue | None) -> None:
        for flag, table in (("prev", _PREV), ("next", _NEXT)):
            for action in ("pop", "push"):
                if not insn[f"deps.{action}_{flag}"]:
                    continue
                if queue is None:
                    raise IsaSimError(
                        ErrorCode.BAD_FIELD,
                        f"{insn.format.name} has {action}_{flag} set, but it runs in no queue "
                        "and carries no tokens",
                        index,
                    )
                if queue not in table:
                    raise IsaSimError(
                        ErrorCode.BAD_FIELD,
                        f"{insn.format.name} in the {queue.name} queue has {action}_{flag} set, "
                        f"but that queue has no {flag} queue",
                        index,
                    )

    def _channels(self, insn: isa.Instruction, queue: Queue) -> tuple[list, list]:
        pops, pushes = [], []
        for flag, table in (("prev", _PREV), ("next", _NEXT)):
            if insn[f"deps.pop_{flag}"]:
                pops.append((table[queue], queue))
            if insn[f"deps.push_{flag}"]:
                pushes.append((queue, table[queue]))
        return pops, pushes

    def _ready(self, queue: Queue) -> bool:
        _, insn = self.queues[queue][0]
        pops, pushes = self._channels(insn, queue)
        depth = self.machine.config.token_depth
        return all(self.tokens[p] for p in pops) and all(
            len(self.tokens[p]) < depth for p in pushes
        )

    def run(self) -> None:
        while True:
            moved = self._dispatch()
            progressed = False
            for queue in Queue:
                while self.queues[queue] and self._ready(queue):
                    self._step(queue)
                    progressed = True
            if self.ended and not any(self.queues.values()):
                break
            if not moved and not progressed:
                raise self._deadlock()
        stats = self.machine.stats
        stats.ideal_cycles = max(self.landed, self.drained, *self.clock.values())

    def _step(self, queue: Queue) -> None:
        index, insn = self.queues[queue].popleft()
        pops, pushes = self._channels(insn, queue)
        start = max([self.clock[queue], *(self.tokens[p].popleft() for p in pops)])
        if queue is Queue.LOAD and insn.opcode is Opcode.SYNC:
            start = max(start, self.landed)
        self.machine.counters = {
            "cycles": start,
            "insns_retired": self.retired,
            "dram_read_bytes": self.machine.stats.dram_read_bytes,
            "dram_write_bytes": self.machine.stats.store_bytes,
            "macs": self.machine.stats.macs,
        }
        stats = self.machine.stats
        moved = stats.dram_read_bytes + stats.store_bytes
        duration = self.machine.execute(index, insn, self.descs)
        moved = stats.dram_read_bytes + stats.store_bytes - moved
        if insn.opcode in (Opcode.LOAD, Opcode.STORE):
            duration += self._descriptor_wait(queue, start)
        done = next_done = start + duration
        if queue is Queue.COMPUTE:
            duration, done, next_done = self._drain(insn, start, duration)
        if insn.opcode is Opcode.LOAD:
            self.landed = max(self.landed, done)
            duration -= self.machine.config.dram_latency  # requesting its lines
        self.head_at[queue] = start
        self.clock[queue] = start + duration
        stats.busy[queue.name] += duration
        self.retired += 1
        for p in pushes:
            self.tokens[p].append(next_done if p[1] is Queue.STORE else done)
        unit = queue.name.lower()
        stats.spans.append(Span(index, unit, insn.opcode, start, duration, moved))
        stats.tokens += [TokenMove(start, src.name, dst.name, -1) for src, dst in pops]
        stats.tokens += [
            TokenMove(next_done if dst is Queue.STORE else done, src.name, dst.name, 1)
            for src, dst in pushes
        ]

    def _descriptor_wait(self, queue: Queue, start: int) -> int:
        """A LOAD's or STORE's cycles for its descriptor: the unit reads it ahead, from when
        the instruction became the queue's head (the one before it started) and the reader is
        free, for the DRAM latency and the descriptor's beats (``isa.descriptor_read_cycles``);
        the instruction waits for what is left of that, and for the beats that fell while
        the instruction before it ran (they took the bus from its lines)."""
        c = self.machine.config
        ready = max(self.head_at[queue], self.desc_free[queue])
        ready += isa.descriptor_read_cycles(c.dram_latency, c.dram_bytes_per_cycle)
        self.desc_free[queue] = ready
        beats = isa.descriptor_beats(c.dram_bytes_per_cycle)
        shared = min(ready, self.clock[queue]) - max(ready - beats, self.head_at[queue])
        return max(ready - start, shared, 0)

    def _drain(self, insn: isa.Instruction, start: int, duration: int) -> tuple[int, int, int]:
        """A compute instruction's duration, completion and token to STORE's time with the GEMM
        engine's drain: a GEMM or CONV retires once its rows are read, the next GEMM or CONV
        starting while they drain, and its token to STORE leaves with its last row; any other
        instruction waits until they have drained."""
        if insn.opcode in (Opcode.GEMM, Opcode.CONV):
            drained = start + duration
            self.drained = max(self.drained, drained)
            c = self.machine.config
            duration -= isa.gemm_drain_cycles(c.rows, c.cols)
            return duration, start + duration, drained
        # (the unit's cycles between instructions and its first overlap the drain)
        duration += max(0, self.drained - start - isa.FRAME_CYCLES - 1)
        return duration, start + duration, start + duration

    def _deadlock(self) -> IsaSimError:
        """DEADLOCK at the instruction the RTL names: the head of the first of LOAD, COMPUTE,
        STORE that waits for a token, else the instruction dispatch waits to place."""
        waits = []
        first = None
        for queue, pending in self.queues.items():
            if not pending:
                continue
            index, insn = pending[0]
            first = index if first is None else first
            pops, pushes = self._channels(insn, queue)
            need = [f"a token from {src.name}" for src, _ in pops if not self.tokens[(src, queue)]]
            depth = self.machine.config.token_depth
            full = [
                f"room to push to {dst.name}"
                for p, dst in ((p, p[1]) for p in pushes)
                if len(self.tokens[p]) >= depth
            ]
            reason = ", ".join(need) or ", ".join(full)
            waits.append(
                f"{queue.name} waits at instruction {index} ({insn.format.name}) for {reason}"
            )
        if self.pending is not None:
            blocked = self.pending
            assert blocked.queue is not None
            waits.append(
                f"dispatch waits at instruction {self.fetched} ({blocked.format.name}): "
                f"the {blocked.queue.name} queue is full ({self.machine.config.queue_depth})"
            )
            # never None here: the full queue dispatch waits for has a waiting head (first)
            first = self.fetched if first is None else first  # pragma: no mutate
        return IsaSimError(ErrorCode.DEADLOCK, "token deadlock: " + "; ".join(waits), first)

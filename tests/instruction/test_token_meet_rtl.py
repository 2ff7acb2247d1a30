"""A push and a pop on one token counter in the same cycle leave its count unchanged.

A consumer that pops when its producer is a token ahead meets the producer's next push in one
cycle: "push, push, pop, pop" makes the second push and the first pop coincide (fetch dispatches
an instruction every 3 cycles on tiny, a SYNC pops 3 cycles and pushes 5 cycles after its
dispatch). A counter that counted that cycle as a push would let one pop too many through
(`make mutate`'s rtl/token-push-and-pop survived every other test: there each pop waited for its
push). Every counter (load->compute, compute->load, compute->store, store->compute), on the RTL
and the ISA simulator alike; a second test simulates the generator's own design (Amaranth's
simulator, no Verilator) to show that these programs really make a push and a pop meet.
"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth import Module, ResetInserter, Signal
from amaranth.lib import memory, wiring
from amaranth.sim import Simulator

from arch import isa
from arch.config import PRESETS
from hdl_gen import accelerator
from hdl_gen.tokens import TokenCounter
from sim.backends.rtl import run_programs
from tests.instruction.bad_programs import (
    END,
    PROGRAM_AT,
    Case,
    device_run,
    isa_outcome,
    rtl_outcome,
    word,
)

TINY = PRESETS["tiny"]
SLOT = 0x200  # DRAM bytes per program in the Amaranth simulation
# counter -> (producer queue, its push flag), (consumer queue, its pop flag)
COUNTERS = {
    "l2c": (("LOAD", "push_next"), ("COMPUTE", "pop_prev")),
    "c2l": (("COMPUTE", "push_prev"), ("LOAD", "pop_next")),
    "c2s": (("COMPUTE", "push_next"), ("STORE", "pop_prev")),
    "s2c": (("STORE", "push_prev"), ("COMPUTE", "pop_next")),
}
# P = push, p = pop; "PPpPpPpp": the consumer keeps one token behind for three pushes.
PATTERNS = {"PPpp": True, "PPpPpPpp": True, "PPpPpp": False}  # True: one pop too many after


def cases() -> dict[str, tuple[str, Case, tuple[str, int | None]]]:
    """name -> (counter, case, the outcome both simulators must give)."""
    out = {}
    for counter, ((push_q, push_flag), (pop_q, pop_flag)) in COUNTERS.items():
        push, pop = word("sync", push_flag, queue=push_q), word("sync", pop_flag, queue=pop_q)
        for seed, (pattern, extra_pop) in enumerate(PATTERNS.items()):
            words = [push if ch == "P" else pop for ch in pattern]
            name = f"{counter}_{pattern}" + ("_pop_too_many" if extra_pop else "")
            expected = ("DEADLOCK", len(words)) if extra_pop else ("done", None)
            words += [pop] * extra_pop + [END]
            out[name] = (counter, Case(name, words, seed=seed), expected)
    return out


@pytest.mark.simulator
def test_push_and_pop_in_one_cycle_keep_the_count(tmp_path):
    chosen = cases()
    results = run_programs(TINY, [device_run(case) for _, case, _ in chosen.values()], tmp_path)
    for (name, (_, case, expected)), result in zip(chosen.items(), results, strict=True):
        assert isa_outcome(TINY, case) == expected, f"{name}: ISA simulator"
        assert rtl_outcome(result) == expected, f"{name}: RTL"


class _Top(wiring.Component):
    """The accelerator with a DRAM of the same timing as hdl_gen/dram_model.py (read data
    ``dram_latency`` cycles after the request), its bytes in an Amaranth memory."""

    def __init__(self, lines: list[int]) -> None:
        self.lines = lines
        self.accel = accelerator.Accelerator(TINY)
        super().__init__({})

    def elaborate(self, platform: object) -> Module:
        m = Module()
        m.submodules.accel = accel = self.accel
        bus = TINY.dram_bytes_per_cycle
        m.submodules.dram = dram = memory.Memory(
            shape=bus * 8, depth=len(self.lines), init=self.lines
        )
        read = dram.read_port()
        req, resp = accel.dram_req, accel.dram_resp
        m.d.comb += [req.ready.eq(1), accel.dram_wr.ready.eq(1)]
        valid, addr, tag = req.valid, req.payload.addr, req.payload.tag
        for _ in range(TINY.dram_latency - 1):
            valid, addr, tag = _delay(m, valid), _delay(m, addr), _delay(m, tag)
        m.d.comb += [read.addr.eq(addr // bus), read.en.eq(valid), resp.payload.data.eq(read.data)]
        m.d.sync += [resp.valid.eq(valid), resp.payload.tag.eq(tag)]
        return m


def _delay(m: Module, value):
    out = Signal.like(value)
    m.d.sync += out.eq(value)
    return out


def _simulator(top: _Top, reset: Signal) -> tuple[Simulator, list[TokenCounter]]:
    """A simulator of ``top`` (``reset`` resets it all, DRAM pipeline included) and the
    accelerator's token counters (l2c, c2l, c2s, s2c: the order accelerator.py makes them in),
    recorded as the design is elaborated."""
    made: list[TokenCounter] = []

    class Recorded(TokenCounter):
        def __init__(self, depth: int) -> None:
            super().__init__(depth)
            made.append(self)

    original = accelerator.TokenCounter
    accelerator.TokenCounter = Recorded  # type: ignore[misc]
    try:
        sim = Simulator(ResetInserter(reset)(top))
    finally:
        accelerator.TokenCounter = original  # type: ignore[misc]
    assert len(made) == len(COUNTERS)
    return sim, made


def meetings(chosen: list[Case], max_cycles: int = 400) -> list[dict[str, list[tuple[int, int]]]]:
    """Per case: counter name -> [(count before, count after)] of every cycle with a push and a
    pop. One simulator for all: case k's program sits at ``k * SLOT + PROGRAM_AT`` (aligned as
    in its own image, which is all fetch's timing depends on), reset between the runs."""
    image = np.zeros(SLOT * len(chosen), dtype=np.uint8)
    for k, case in enumerate(chosen):
        code = np.frombuffer(isa.words_to_bytes(case.words, isa.INSN_BYTES), np.uint8)
        assert PROGRAM_AT + code.size <= SLOT, case.name
        image[k * SLOT + PROGRAM_AT :][: code.size] = code
    bus = TINY.dram_bytes_per_cycle
    lines = [
        int.from_bytes(image[i : i + bus].tobytes(), "little") for i in range(0, image.size, bus)
    ]
    top, reset = _Top(lines), Signal()
    sim, counters = _simulator(top, reset)
    sim.add_clock(1e-8)
    seen: list[dict[str, list[tuple[int, int]]]] = []

    async def bench(ctx) -> None:
        accel = top.accel
        named = dict(zip(COUNTERS, counters, strict=True))
        for k, case in enumerate(chosen):
            seen.append({name: [] for name in COUNTERS})
            ctx.set(reset, 1)
            await ctx.tick()
            ctx.set(reset, 0)
            ctx.set(accel.insn_base, k * SLOT + PROGRAM_AT)
            ctx.set(accel.start, 1)
            await ctx.tick()
            ctx.set(accel.start, 0)
            for _ in range(max_cycles):
                both = [n for n, c in named.items() if ctx.get(c.push) and ctx.get(c.pop)]
                before = {n: ctx.get(named[n].count) for n in both}
                if ctx.get(accel.done) or ctx.get(accel.error):
                    break
                await ctx.tick()
                for n in both:
                    seen[-1][n].append((before[n], ctx.get(named[n].count)))
            else:
                raise AssertionError(
                    f"{case.name}: neither done nor stopped in {max_cycles} cycles"
                )

    sim.add_testbench(bench)
    sim.run()
    return seen


def test_the_programs_meet_a_push_and_a_pop_in_one_cycle():
    chosen = {name: v for name, v in cases().items() if v[2][0] != "done"}
    found = meetings([case for _, case, _ in chosen.values()])
    for (name, (counter, _, _)), seen in zip(chosen.items(), found, strict=True):
        assert seen[counter], f"{name}: no push and pop on {counter} in one cycle"
        assert all(before == after for before, after in seen[counter]), f"{name}: {seen}"
        assert not any(v for n, v in seen.items() if n != counter), f"{name}: {seen}"

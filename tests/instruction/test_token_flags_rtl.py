"""A token flag naming a neighbour queue that does not exist (LOAD has no previous queue, STORE
no next one) stops dispatch with BAD_FIELD at that instruction - every such flag on every opcode
of those queues, on the RTL and the ISA simulator alike. (`make mutate`'s rtl/fetch-load-push-prev,
a LOAD-queue push_prev let through, was found only by the hypothesis bad-program test, after
minutes; the directed cases held only pop_prev.) The same flags on COMPUTE, which has both
neighbours, run."""

from __future__ import annotations

import pytest

from arch.config import PRESETS
from sim.backends.rtl import run_programs
from tests.instruction.bad_programs import (
    END,
    Case,
    act_load,
    device_run,
    isa_outcome,
    rtl_outcome,
    with_flag,
    word,
)

pytestmark = pytest.mark.simulator

TINY = PRESETS["tiny"]


def cases() -> dict[str, tuple[Case, tuple[str, int | None]]]:
    first = word("sync", queue="COMPUTE")  # the bad instruction is number 1, not 0
    missing = {
        "load_sync": (word("sync", queue="LOAD"), ("pop_prev", "push_prev")),
        "load": (word("load", desc=0), ("pop_prev", "push_prev")),
        "store_sync": (word("sync", queue="STORE"), ("pop_next", "push_next")),
        "store": (word("store", desc=0, clamp_lo=-128, clamp_hi=127), ("pop_next", "push_next")),
        "perf": (word("perf", dram_addr=0x2000), ("pop_next", "push_next")),
    }
    descs = [act_load(TINY, 1)]
    out = {}
    for name, (insn, flags) in missing.items():
        for flag in flags:
            case = Case(f"{name}_{flag}", [first, with_flag(insn, flag), END], descs)
            out[case.name] = (case, ("BAD_FIELD", 1))
    for flag in ("push_prev", "push_next"):  # COMPUTE has both neighbours
        case = Case(f"compute_sync_{flag}", [first, word("sync", flag, queue="COMPUTE"), END])
        out[case.name] = (case, ("done", None))
    return out


def test_flags_without_a_neighbour_stop_dispatch(tmp_path):
    chosen = cases()
    results = run_programs(TINY, [device_run(case) for case, _ in chosen.values()], tmp_path)
    for (name, (case, expected)), result in zip(chosen.items(), results, strict=True):
        assert isa_outcome(TINY, case) == expected, f"{name}: ISA simulator"
        assert rtl_outcome(result) == expected, f"{name}: RTL"

"""Accesses that end exactly at the edge of a memory, and token_depth unpopped pushes, run; one
past stops - on the RTL and on the ISA simulator alike (off-by-one mutants of these checks
survived the other tests: `make mutate`). One simulator run on tiny for every case."""

from __future__ import annotations

import numpy as np
import pytest

from arch import isa
from arch.config import PRESETS
from arch.isa import Launch
from sim.backends.base import DeviceRun
from sim.backends.isa_machine import Machine
from sim.backends.rtl import run_programs
from tests.instruction.bad_programs import (
    END,
    Case,
    act_load,
    device_run,
    isa_outcome,
    rtl_outcome,
    word,
)

pytestmark = pytest.mark.simulator

TINY = PRESETS["tiny"]


def gemm(act_addr: int) -> int:
    """Two ACT rows from ``act_addr`` through one weight tile."""
    return word("gemm", act_addr=act_addr, m=2, k_iter=1, n_iter=1)


def accum(param_addr: int) -> int:
    """One ACC line plus the bias of PARAM line ``param_addr``."""
    return word("accum", param_addr=param_addr, m=1, n_iter=1, use_bias=1)


def edge_cases(config) -> dict[str, tuple[Case, tuple[str, int | None]]]:
    c = config
    last_lines = c.dram_bytes - 2 * c.act_line_bytes  # two ACT lines that end DRAM
    perf_last = c.dram_bytes - isa.PERF_RECORD.nbytes
    load = word("load", desc=0)
    push = word("sync", "push_next", queue="LOAD")  # a token nobody pops
    pop = word("sync", "pop_prev", queue="COMPUTE")
    # The same with 0-2 token-less SYNCs before each push and pop (seeded). Each pop here
    # waits for its push, so no push and pop meet in one cycle: test_token_meet_rtl.py does.
    rng = np.random.default_rng(22)
    fillers = [word("sync", queue="LOAD"), word("sync", queue="COMPUTE")]
    staggered = []
    for _ in range(24):
        staggered += [fillers[0]] * int(rng.integers(0, 3)) + [push]
        staggered += [fillers[1]] * int(rng.integers(0, 3)) + [pop]
    cases = [
        # Pushes and pops interleaved: one pop too many waits.
        (Case("pops_match_pushes", [push, pop] * 12 + [END]), ("done", None)),
        (Case("one_pop_too_many", [push, pop] * 12 + [pop, END]), ("DEADLOCK", 24)),
        (Case("shifted_pops_too_many", staggered + [pop, END]), ("DEADLOCK", len(staggered))),
        (Case("zero_inner_count", [load, END], [act_load(c, 0)]), ("BAD_FIELD", 0)),
        (Case("tokens_fill_depth", [push] * c.token_depth + [END]), ("done", None)),
        (
            Case("tokens_past_depth", [push] * (c.token_depth + 1) + [END]),
            ("DEADLOCK", c.token_depth),
        ),
        (Case("load_ends_dram", [load, END], [act_load(c, 2, dram=last_lines)]), ("done", None)),
        (
            Case("load_past_dram", [load, END], [act_load(c, 2, dram=last_lines + 8)]),
            ("DRAM_RANGE", 0),
        ),
        (
            Case("load_misaligned", [load, END], [act_load(c, 1, dram=last_lines - 2)]),
            ("DRAM_RANGE", 0),
        ),
        (Case("load_ends_act", [load, END], [act_load(c, 2, c.act_lines - 2)]), ("done", None)),
        (
            Case("load_past_act", [load, END], [act_load(c, 2, c.act_lines - 1)]),
            ("LOCAL_RANGE", 0),
        ),
        (
            Case("desc_index_is_count", [word("load", desc=1), END], [act_load(c, 1)]),
            ("BAD_DESCRIPTOR", 0),
        ),
        (
            Case(
                "descriptor_table_ends_dram",
                [word("sync", queue="STORE"), END],
                desc_base=c.dram_bytes - isa.DESC_BYTES,
                desc_count=1,
            ),
            ("done", None),
        ),
        (Case("gemm_ends_act", [gemm(c.act_lines - 2), END]), ("done", None)),
        (Case("gemm_past_act", [gemm(c.act_lines - 1), END]), ("LOCAL_RANGE", 0)),
        (Case("accum_ends_param", [accum(c.param_lines - 1), END]), ("done", None)),
        (Case("accum_past_param", [accum(c.param_lines), END]), ("LOCAL_RANGE", 0)),
        (Case("perf_ends_dram", [word("perf", dram_addr=perf_last), END]), ("done", None)),
        (
            Case("perf_past_dram", [word("perf", dram_addr=c.dram_bytes), END]),
            ("DRAM_RANGE", 0),
        ),
    ]
    return {case.name: (case, expected) for case, expected in cases}


def program_at_dram_end(config) -> DeviceRun:
    """SYNC, END in the last 32 bytes of DRAM (the image is the whole DRAM)."""
    image = np.zeros(config.dram_bytes, dtype=np.uint8)
    code = isa.words_to_bytes([word("sync", queue="STORE"), END], isa.INSN_BYTES)
    at = config.dram_bytes - len(code)
    image[at:] = np.frombuffer(code, np.uint8)
    return DeviceRun(image, Launch(at, 0, 0), max_cycles=20_000, dump_size=4096)


def test_edges_pass_and_one_past_stops(tmp_path):
    cases = edge_cases(TINY)
    at_end = program_at_dram_end(TINY)
    runs = [device_run(case) for case, _ in cases.values()] + [at_end]
    *results, end_result = run_programs(TINY, runs, tmp_path)
    for (name, (case, expected)), result in zip(cases.items(), results, strict=True):
        assert isa_outcome(TINY, case) == expected, f"{name}: ISA simulator"
        assert rtl_outcome(result) == expected, f"{name}: RTL"
    Machine(TINY, at_end.image.copy()).run(at_end.launch)  # raises if it stops
    assert rtl_outcome(end_result) == ("done", None), "a program ending DRAM: RTL"

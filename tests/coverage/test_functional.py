"""Functional coverage (sim/coverage/functional.py): the bins are the ISA's, and sampling the
directed bad programs (run on the ISA simulator, whose codes the RTL tests hold the RTL to) hits
exactly the end codes and failing opcodes those cases expect; the merged export round-trips."""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter

import numpy as np

from arch import isa
from arch.config import PRESETS
from sim.backends.base import DeviceRun, RunOptions
from sim.backends.isa import IsaBackend
from sim.coverage import functional
from sim.verilate.instrument import COVERAGE_ENV
from tests.instruction.bad_programs import directed


def hits(name: str) -> Counter:
    from cocotb_coverage.coverage import coverage_db

    return Counter(dict(coverage_db[name].detailed_coverage)) if name in coverage_db else Counter()


def test_bins_come_from_the_isa():
    assert [op.name for op in isa.Opcode] == functional.OPCODES
    assert [code.name for code in isa.ErrorCode] == functional.ERRORS
    assert len(functional.FLAGS) == 16 and len(set(functional.FLAGS)) == 16


def test_directed_bad_programs_hit_their_codes(monkeypatch, tmp_path):
    monkeypatch.setenv(COVERAGE_ENV, str(tmp_path))
    config = PRESETS["tiny"]
    cases = directed(config)
    runs, expected = [], []
    for case, outcome in cases.values():
        image, launch = case.image()
        runs.append(DeviceRun(image, launch, max_cycles=20_000))
        expected.append(outcome)
    results = IsaBackend().run(config, runs, RunOptions())
    functional._samplers()  # define the coverpoints before taking the "before" counts
    before_status, before_cross = hits("top.status.error"), hits("top.status.opcode_x_error")
    for run, result in zip(runs, results, strict=True):
        functional.sample(config, run.image, run.launch, result)
    status = hits("top.status.error") - before_status
    cross = hits("top.status.opcode_x_error") - before_cross

    want = Counter("NONE" if code == "done" else code for code, _ in expected)
    assert status == want
    want_cross: Counter = Counter()
    for (case, _), (code, index) in zip(cases.values(), expected, strict=True):
        if code == "done":
            continue
        op = "-"  # nothing fetched: a misaligned program, or one outside DRAM
        placed = not case.insn_offset and case.insn_base is None
        if placed and index is not None and index < len(case.words):
            try:
                op = isa.decode_insn(case.words[index]).opcode.name
            except isa.IsaError:
                op = "ILLEGAL"
        want_cross[(op, code)] += 1
    assert cross == want_cross

    functional._export()
    [xml] = list((tmp_path / "functional").glob("*.xml"))
    points = functional.load([xml])
    assert points["top.status.error"]["DEADLOCK"] >= want["DEADLOCK"]
    summary = functional.summary(points)
    assert summary["top.insn.opcode"]["bins"] == len(isa.Opcode) + 1
    cross_bins = (len(functional.OPCODES) + 2) * (len(functional.ERRORS) - 1)
    ignored = len(functional.IMPOSSIBLE_OP_ERRORS)
    assert summary["top.status.opcode_x_error"]["bins"] == cross_bins - ignored
    assert "bins ignored as impossible" in functional.to_html(points)


def test_no_known_program_stops_at_a_pair_called_impossible():
    """The directed bad programs and each opcode's own error cases (their outcomes on the ISA
    simulator, which the RTL tests hold the RTL to) never stop at an ignored (opcode, code)."""
    import numpy as np

    from tests.instruction.bad_programs import isa_outcome
    from tests.instruction.test_error_per_opcode import SEED, TINY, cases

    programs = [c for c, _ in directed(TINY).values()]
    programs += [c for c, _ in cases(np.random.default_rng(SEED)).values()]
    seen = set()
    for case in programs:
        code, index = isa_outcome(TINY, case)
        if (
            code != "done"
            and not case.insn_offset
            and index is not None
            and index < len(case.words)
        ):
            with contextlib.suppress(isa.IsaError):
                seen.add((isa.decode_insn(case.words[index]).opcode.name, code))
    assert len(seen) >= 8
    assert not seen & set(functional.IMPOSSIBLE_OP_ERRORS), seen & set(
        functional.IMPOSSIBLE_OP_ERRORS
    )


def stopped_program(config, rng):
    """LOAD (ACT, one loop), a POOL with m = 0 that stops the program (BAD_FIELD), then a
    STORE (ACC, two loops) and END that never run; a WGT descriptor no instruction names."""
    from tests.programs import Builder

    d = config.rows
    b = Builder(config)
    src = b.put(rng.integers(-128, 128, (4, d), dtype=np.int8))
    b.load_lines("ACT", 0, src, 4, d, deps="push_next")
    b.emit("pool", "pop_prev,push_next", act_addr=0, acc_addr=0, m=0, window=1, n_iter=1)
    out = b.empty(2, 2, d)
    store = b.desc("ACC", 0, out.addr, [(2, 2 * d, 2), (2, d, 1)])
    b.emit("store", "pop_prev", desc=store, param_addr=0, clamp_lo=-128, clamp_hi=127)
    b.desc("WGT", 0, src, [(4, d, 1)])  # in the table, named by nothing
    launch = b.finish()
    return DeviceRun(b.dram[: b.top].copy(), launch, max_cycles=20_000)


def test_only_what_ran_fills_bins(monkeypatch, tmp_path):
    """Instructions after the one that stopped the program, and descriptors no instruction that
    ran named, fill no bin; the same program counted whole when done."""
    monkeypatch.setenv(COVERAGE_ENV, str(tmp_path))
    config = PRESETS["tiny"]
    run = stopped_program(config, np.random.default_rng(41))
    [result] = IsaBackend().run(config, [run], RunOptions())
    assert result.error and result.error_code == "BAD_FIELD" and result.error_index == 1
    functional._samplers()
    names = ("top.insn.opcode", "top.desc.mem", "top.desc.loops_used", "top.status.error")
    before = {name: hits(name) for name in names}
    functional.sample(config, run.image, run.launch, result)
    got = {name: +(hits(name) - before[name]) for name in names}
    assert got["top.insn.opcode"] == Counter({"LOAD": 1, "POOL": 1})
    assert got["top.desc.mem"] == Counter({"ACT": 1})
    assert got["top.desc.loops_used"] == Counter({"1": 1})
    assert got["top.status.error"] == Counter({"BAD_FIELD": 1})
    # A timeout: nothing is known to have run, only its status counts.
    timed_out = dataclasses.replace(result, error=False, timeout=True, error_code="NONE")
    before = {name: hits(name) for name in names}
    functional.sample(config, run.image, run.launch, timed_out)
    got = {name: +(hits(name) - before[name]) for name in names}
    assert got == {**{name: Counter() for name in names}, "top.status.error": Counter({"NONE": 1})}
    # Done: every instruction up to END and the two descriptors named, not the third.
    done = dataclasses.replace(result, done=True, error=False, error_code="NONE")
    before = {name: hits(name) for name in names}
    functional.sample(config, run.image, run.launch, done)
    got = {name: +(hits(name) - before[name]) for name in names}
    assert got["top.insn.opcode"] == Counter({"LOAD": 1, "POOL": 1, "STORE": 1, "END": 1})
    assert got["top.desc.mem"] == Counter({"ACT": 1, "ACC": 1})
    assert got["top.desc.loops_used"] == Counter({"1": 1, "2": 1})

"""Functional coverage (sim/coverage/functional.py): the bins are the ISA's, and sampling the
directed bad programs (run on the ISA simulator, whose codes the RTL tests hold the RTL to) hits
exactly the end codes and failing opcodes those cases expect; the merged export round-trips."""

from __future__ import annotations

import contextlib
from collections import Counter

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

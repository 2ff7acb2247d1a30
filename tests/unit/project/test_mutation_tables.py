"""The mutation tables stay applicable and the runner's inputs and outputs hold their contract
(``make mutate`` itself runs the mutants; these tests need no simulator)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mutation import python_set, python_verdicts
from mutation.harness_mutants import HARNESS_MUTANTS, KILLERS_OF
from mutation.report import Result, SetReport, failures, write
from mutation.rtl_mutants import KILLERS, RTL_MUTANTS
from mutation.rtl_mutants_norm import NORM, NORM_KILLERS
from mutation.table import Mutant, MutantError, select

ROOT = Path(__file__).resolve().parents[3]
ALL = RTL_MUTANTS + HARNESS_MUTANTS + NORM


def test_every_snippet_occurs_exactly_once_and_changes_its_file(tmp_path):
    for mutant in ALL:
        text = (ROOT / mutant.file).read_text()
        assert text.count(mutant.original) == 1, mutant.id
        assert mutant.replacement != mutant.original, mutant.id
        target = tmp_path / mutant.file
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        mutant.apply(tmp_path)
        assert target.read_text() != text, mutant.id


def test_the_sets_are_as_the_issue_asks():
    ids = [m.id for m in ALL]
    assert len(ids) == len(set(ids))
    assert len(RTL_MUTANTS) >= 40
    assert all(m.file.startswith("hdl_gen/") for m in RTL_MUTANTS)
    # The three gaps issue #22 names: tie rule, zero executed tests, a store out of its region.
    for named in ("requant-neg-tie-away", "store-past-line", "cocotb-zero-tests-pass"):
        assert named in ids
    assert all(m.why for m in ALL)
    assert set(KILLERS_OF) == {m.id for m in HARNESS_MUTANTS}
    assert NORM and all(m.file.startswith("hdl_gen/norm_") for m in NORM)
    assert not [m for m in RTL_MUTANTS if m.file.startswith("hdl_gen/norm_")]  # not in tiny
    for node in [*KILLERS, *NORM_KILLERS, *(k for ks in KILLERS_OF.values() for k in ks)]:
        assert (ROOT / node.split("::")[0]).is_file(), node


def test_a_missing_or_repeated_snippet_and_an_unknown_id_are_errors(tmp_path):
    (tmp_path / "f.py").write_text("a = 1\na = 1\n")
    with pytest.raises(MutantError, match="occurs 2 times"):
        Mutant("m", "f.py", "a = 1", "a = 2", "why").apply(tmp_path)
    with pytest.raises(MutantError, match="occurs 0 times"):
        Mutant("m", "f.py", "b = 1", "b = 2", "why").apply(tmp_path)
    with pytest.raises(MutantError, match="unknown mutant id nope"):
        select(RTL_MUTANTS, ["requant-truncate", "nope"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--only", "no-such-mutant"], "unknown mutant id no-such-mutant"),
        (["--sets", "rtl,nope"], "unknown set nope"),
        (["--slice", "--seed", "x1"], "MUTATE_SEED must be a non-negative integer"),
        (["--jobs", "0"], "--jobs must be at least 1"),
    ],
)
def test_bad_arguments_give_one_line_and_exit_2(args, message):
    done = subprocess.run(
        [sys.executable, "-m", "mutation", *args], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and message in line


def test_report_counts_survivors_and_names_each(tmp_path):
    curated = SetReport(
        "rtl",
        [
            Result("a", "x.py: a", "killed", killed_by="t::k", seconds=3),
            Result("b", "x.py: b", "timeout", seconds=9),
            Result("c", "x.py: c", "survived", why_equivalent="same value"),
            Result("d", "x.py: d", "survived"),
            Result("e", "x.py: e", "not_run"),
        ],
    )
    summary = write(tmp_path / "report.json", [curated], {"mode": "full"})
    data = json.loads((tmp_path / "report.json").read_text())
    s = data["sets"]["rtl"]
    assert (s["total"], s["killed"], s["not_run"]) == (4, 2, ["e"])
    assert s["survived"] == [
        {"id": "c", "where": "x.py: c", "why_equivalent": "same value"},
        {"id": "d", "where": "x.py: d", "why_equivalent": None},
    ]
    assert curated.unjustified() == ["d"]
    assert "survivor rtl/d (x.py: d): NOT JUSTIFIED" in summary.read_text()
    python = SetReport(
        "python:m.py", [Result("m.x_f__mutmut_1", "m.py", "survived")], curated=False
    )
    assert python.unjustified() == []


def test_python_modules_are_mutmuts_and_their_function_patterns_exist():
    modules = python_set.modules()
    assert "sim/backends/isa_machine.py" in modules and "arch/reference_ops.py" in modules
    patterns = python_set.functions("sim/backends/isa_machine.py")
    assert "sim.backends.isa_machine.x_requantize__mutmut_*" in patterns
    assert "sim.backends.isa_machine.x\u01c1Machine\u01c1run__mutmut_*" in patterns
    # a function of only a docstring has no mutants: a slice must not draw it
    assert "compiler.quantizers.x_keep_params__mutmut_*" not in python_set.functions(
        "compiler/quantizers.py"
    )
    assert "compiler.quantizers.x_norm__mutmut_*" in python_set.functions("compiler/quantizers.py")


def test_changed_test_files_measure_the_python_survivors_again(tmp_path, monkeypatch):
    """mutmut keeps a verdict while its function is unchanged; a test added for a survivor
    must re-measure it (and the "no tests" and error verdicts), never the killed ones."""
    monkeypatch.setattr(python_set, "WORK", tmp_path)
    module = python_set.modules()[0]
    meta = tmp_path / "mutants" / f"{module}.meta"
    meta.parent.mkdir(parents=True)
    codes = {"m_1": 1, "m_2": 0, "m_3": 33, "m_4": None, "m_5": 3, "m_6": 5}
    meta.write_text(json.dumps({"exit_code_by_key": codes, "durations_by_key": {"m_1": 0.5}}))
    stats = tmp_path / "mutants" / "mutmut-stats.json"  # mutmut's test -> function map
    stats.write_text("{}")
    assert python_set.retry_survivors() == 4  # m_2, m_3, m_6 and m_5 (a pytest error, no kill)
    assert not stats.exists()  # collected again: a changed test may call other functions now
    stats.write_text("{}")
    kept = json.loads(meta.read_text())
    reset = {"m_2": None, "m_3": None, "m_5": None, "m_6": None}
    assert kept["exit_code_by_key"] == {**codes, **reset}
    assert kept["durations_by_key"] == {"m_1": 0.5}
    meta.write_text(json.dumps({"exit_code_by_key": {"m_2": 0}}))
    assert python_set.retry_survivors() == 0  # the same test files: verdicts stand
    assert stats.exists()
    stamp = tmp_path / "tests.sha256"
    stamp.write_text("another set of tests")
    assert python_set.retry_survivors() == 1
    assert all(p.is_file() for p in python_set.test_files())
    assert ROOT / "tests/unit/arch/test_reference_ops.py" in python_set.test_files()


def test_python_verdicts_survive_a_fresh_clone(tmp_path, monkeypatch):
    """A full run's decided verdicts are kept in the checkout and seed a fresh clone's missing
    mutmut meta files (in mutmut's own format, which it then merges by function hash); verdicts
    not yet decided are not kept, and an existing meta file is never overwritten."""
    monkeypatch.setattr(python_verdicts, "FILE", tmp_path / "verdicts.json")
    module = "sim/backends/isa_machine.py"
    name = "sim.backends.isa_machine.x\u01c1Machine\u01c1run__mutmut_"
    codes = {
        f"{name}1": 1,
        f"{name}2": 0,
        f"{name}3": None,
        "sim.backends.isa_machine.x_f__mutmut_7": 3,
    }
    hashes = {"x\u01c1Machine\u01c1run": "a1b2", "x_f": "c3d4", "x_g": "e5f6"}
    old = tmp_path / "old" / "mutants" / f"{module}.meta"
    old.parent.mkdir(parents=True)
    old.write_text(json.dumps({"exit_code_by_key": codes, "hash_by_function_name": hashes}))
    assert python_verdicts.save(tmp_path / "old", [module, "arch/absent.py"]) == 3

    fresh = tmp_path / "fresh"
    assert python_verdicts.restore(fresh, [module]) == 3
    seeded = json.loads((fresh / "mutants" / f"{module}.meta").read_text())
    assert seeded["exit_code_by_key"] == {k: c for k, c in codes.items() if c is not None}
    assert seeded["hash_by_function_name"] == {k: h for k, h in hashes.items() if k != "x_g"}
    assert {"durations_by_key", "estimated_durations_by_key", "type_check_error_by_key"} <= set(
        seeded
    )  # mutmut's SourceFileMutationData.load() pops these
    assert python_verdicts.restore(fresh, [module]) == 0  # there now: left alone
    assert python_verdicts.restore(tmp_path / "other", ["arch/absent.py"]) == 0


def test_the_slice_warns_on_an_rtl_survivor_and_fails_on_the_rest():
    """``make mutate`` fails on every unjustified survivor; the CI slice only warns about a
    sampled RTL survivor (judged by the full run) but still fails on a harness survivor, on an
    RTL mutant that no longer applies, and never on a justified one."""
    rtl = SetReport(
        "rtl",
        [
            Result("a", "x.py", "survived"),
            Result("b", "x.py", "invalid"),
            Result("c", "x.py", "survived", why_equivalent="same outputs"),
            Result("d", "x.py", "survived", known_gap="needs a test"),
            Result("e", "x.py", "killed"),
        ],
    )
    harness = SetReport("harness", [Result("h", "y.py", "survived")])
    assert failures([rtl, harness], slice_mode=False) == (
        ["rtl/a", "rtl/d", "rtl/b", "harness/h"],
        [],
    )
    assert failures([rtl, harness], slice_mode=True) == (["rtl/b", "harness/h"], ["rtl/a"])

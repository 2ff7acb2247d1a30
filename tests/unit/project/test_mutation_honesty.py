"""Mutation verdicts that can fall (issue #41): a stale verdict is not a kill, a share of kept
kills is measured again and a flip fails the run, the killers run on the unmutated tree, an
ERROR is not a kill, and a module below its score floor fails ``make mutate``. Small synthetic
cases: the tool is under test here, not the simulator."""

import json
import random
import sys
import time

from mutation import cache, curated, floors, python_set, python_stamps
from mutation.curated import CuratedSet, Outcome, control, run_set, verdict
from mutation.report import Result, SetReport, failures
from mutation.table import Mutant

MUTANT = Mutant("m", "f.py", "a = 1", "a = 2", "why")


def test_a_pytest_error_or_the_harness_timeout_is_an_error_not_a_kill():
    failed = "FAILED tests/t.py::test_a - assert 1 == 2\n1 failed"
    assert verdict(MUTANT, 1, failed, 1.0).status == "killed"
    assert verdict(MUTANT, 1, failed, 1.0).killed_by == "tests/t.py::test_a"
    errored = "ERROR tests/t.py::test_b - RuntimeError: build failed\n" + failed
    assert (verdict(MUTANT, 1, errored, 1.0).status, "ERROR tests/t.py::test_b") == (
        "error",
        verdict(MUTANT, 1, errored, 1.0).detail.split(": ", 1)[1],
    )
    assert verdict(MUTANT, 2, "ERROR collecting tests/t.py", 1.0).status == "error"
    assert verdict(MUTANT, None, "", 1.0).status == "error"
    assert verdict(MUTANT, 0, "1 passed", 1.0).status == "survived"
    # mutmut's codes: a pytest internal error (3) and an interruption (2) are errors too
    assert [python_set.status_of(c) for c in (1, 3, 2, 0, 33, 36, None)] == [
        "killed",
        "error",
        "error",
        "survived",
        "no_tests",
        "timeout",
        "not_run",
    ]
    report = SetReport("rtl", [Result("m", "f.py", "error", detail="pytest exit 2")])
    assert report.as_json()["killed"] == 0 and report.as_json()["total"] == 0
    assert failures([report], slice_mode=True)[0] == ["rtl/m (error: pytest exit 2)"]


def test_a_killer_that_fails_on_the_unmutated_tree_makes_its_kill_an_error(tmp_path):
    (tmp_path / "test_k.py").write_text(
        "def test_good():\n    assert 1 + 1 == 2\n\ndef test_broken():\n    assert 1 + 1 == 3\n"
    )
    good = Outcome(MUTANT, "killed", killed_by="test_k.py::test_good")
    other = Mutant("n", "f.py", "b = 1", "b = 2", "why")
    bad = Outcome(other, "killed", killed_by="test_k.py::test_broken")
    said: list[str] = []
    out = control([good, bad], said.append, root=tmp_path)
    assert [o.status for o in out] == ["killed", "error"]
    assert "test_k.py::test_broken fails unmutated" in out[1].detail
    assert "FAILS on the unmutated tree" in said[0]


def test_a_killer_whose_id_holds_spaces_is_named_whole_and_runs_again(tmp_path):
    """A parametrized killer's id is its values, spaces and all: its kill names the whole id,
    and the control run finds that test again (CI once cut it at the first space, and the
    control run, given a test that does not exist, called a good kill an error)."""
    test = tmp_path / "test_k.py"
    source = (
        "import pytest\n\n@pytest.mark.parametrize('where', ['0 bytes past (a) - b', 'x'])\n"
        "def test_p(where):\n    assert {}\n"
    )
    test.write_text(source.format("where == 'x'"))  # the "mutant": the first case fails
    code, out = curated._run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "test_k.py"],
        tmp_path,
        60,
    )
    killed = verdict(MUTANT, code, out, 1.0)
    assert killed.killed_by == "test_k.py::test_p[0 bytes past (a) - b]"
    test.write_text(source.format("where"))  # the unmutated tree: both pass
    said: list[str] = []
    assert [o.status for o in control([killed], said.append, root=tmp_path)] == ["killed"]
    assert "pass on the unmutated tree" in said[0]


def _fake_set(tmp_path, monkeypatch, measured: str):
    monkeypatch.setattr(cache, "RESULTS", tmp_path / "results")
    design = ["d1"]
    monkeypatch.setattr(cache, "design_hash", lambda: design[0])
    monkeypatch.setattr(cache, "tests_hash", lambda nodes: "t1")
    runs: list[str] = []

    def run_mutant(cset, mutant, keep=False):
        runs.append(mutant.id)
        return Outcome(mutant, measured, killed_by="t.py::test_k" if measured == "killed" else "")

    monkeypatch.setattr(curated, "run_mutant", run_mutant)
    return CuratedSet("fake", [MUTANT], ("t.py",)), design, runs


def test_a_kept_verdict_on_changed_code_is_measured_again_or_reported_stale(tmp_path, monkeypatch):
    cset, design, runs = _fake_set(tmp_path, monkeypatch, "killed")
    cache.store("fake", MUTANT, "d1", cset.killers, Outcome(MUTANT, "killed", "t.py::test_k"))
    future = time.monotonic() + 60
    assert run_set(cset, [MUTANT], 1, future, progress=print)[0].detail == "kept"
    assert runs == []
    design[0] = "d2"  # the design changed since it was measured
    [stale] = run_set(cset, [MUTANT], 1, time.monotonic() - 1, progress=print)
    assert stale.status == "stale" and runs == []
    report = SetReport("fake", [Result("m", "f.py", "stale")])
    assert report.as_json()["killed"] == 0 and report.as_json()["stale"][0]["id"] == "m"
    [again] = run_set(cset, [MUTANT], 1, future, progress=print)
    assert again.status == "killed" and runs == ["m"]


def test_a_share_of_kept_kills_is_measured_again_and_a_flip_fails(tmp_path, monkeypatch):
    cset, _design, runs = _fake_set(tmp_path, monkeypatch, "survived")
    cache.store("fake", MUTANT, "d1", cset.killers, Outcome(MUTANT, "killed", "t.py::test_k"))
    future = time.monotonic() + 60
    [kept] = run_set(cset, [MUTANT], 1, future, progress=print, recheck=0.0)
    assert kept.status == "killed" and runs == []
    [flipped] = run_set(cset, [MUTANT], 1, future, progress=print, recheck=1.0)
    assert (flipped.status, flipped.was, runs) == ("survived", "killed", ["m"])
    result = Result("m", "f.py", "survived", why_equivalent="x", was="killed")
    bad, _ = failures([SetReport("fake", [result])], slice_mode=False)
    assert bad == ["fake/m (flipped: was killed, now survived)"]


def test_a_run_fails_when_a_killer_fails_on_the_unmutated_tree(tmp_path, monkeypatch):
    import mutation.__main__ as cli

    cset, _design, _runs = _fake_set(tmp_path, monkeypatch, "killed")
    monkeypatch.setattr(cli, "CURATED", {"fake": cset})
    monkeypatch.setattr(cli, "SETS", ("fake", "python"))
    monkeypatch.setattr(cli, "OUT", tmp_path / "out")
    monkeypatch.setattr(cli, "REPO", tmp_path)
    monkeypatch.setattr(cli, "control", lambda outs: curated.control(outs, root=tmp_path))
    (tmp_path / "t.py").write_text("def test_k():\n    assert 1 + 1 == 3\n")
    assert cli.main(["--sets", "fake", "--recheck", "0"]) == 1
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["sets"]["fake"]["killed"] == 0
    assert data["sets"]["fake"]["errors"][0]["id"] == "m"


def _python_work(tmp_path):
    repo, work = tmp_path / "repo", tmp_path / "work"
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pkg/m.py").write_text("def f(x):\n    return x + 1\n")
    (repo / "tests/test_f.py").write_text("def test_f(): ...\n")
    (repo / "tests/test_other.py").write_text("def test_o(): ...\n")
    (work / "mutants/pkg").mkdir(parents=True)
    codes = {"pkg.m.x_f__mutmut_1": 1, "pkg.m.x_f__mutmut_2": 1, "pkg.m.x_g__mutmut_1": None}
    (work / "mutants/pkg/m.py.meta").write_text(json.dumps({"exit_code_by_key": codes}))
    stats = {"tests_by_mangled_function_name": {"pkg.m.x_f": ["tests/test_f.py::test_f"]}}
    (work / "mutants/mutmut-stats.json").write_text(json.dumps(stats))
    return repo, work


def test_a_python_verdict_goes_stale_when_its_module_or_its_tests_change(tmp_path):
    repo, work = _python_work(tmp_path)
    assert python_stamps.now(work, repo, "pkg/m.py", []) is not None
    today = python_stamps.now(work, repo, "pkg/m.py", [])
    assert python_stamps.stale(work, "pkg/m.py", today) == {
        "pkg.m.x_f__mutmut_1",
        "pkg.m.x_f__mutmut_2",
    }  # never stamped: measured on unknown code
    assert python_stamps.mark(work, "pkg/m.py", {}, today) == 2
    assert python_stamps.stale(work, "pkg/m.py", today) == set()
    (repo / "tests/test_other.py").write_text("def test_o(): assert 0\n")  # calls no f
    assert not python_stamps.stale(work, "pkg/m.py", python_stamps.now(work, repo, "pkg/m.py", []))
    (repo / "tests/test_f.py").write_text("def test_f(): assert 1\n")  # f's test changed
    assert (
        len(python_stamps.stale(work, "pkg/m.py", python_stamps.now(work, repo, "pkg/m.py", [])))
        == 2
    )
    python_stamps.mark(work, "pkg/m.py", {}, python_stamps.now(work, repo, "pkg/m.py", []))
    (repo / "pkg/m.py").write_text("C = 2\n\ndef f(x):\n    return x + 1\n")  # the module
    assert (
        len(python_stamps.stale(work, "pkg/m.py", python_stamps.now(work, repo, "pkg/m.py", [])))
        == 2
    )
    old = python_stamps.reset(work, "pkg/m.py", {"pkg.m.x_f__mutmut_1"})
    assert old == {"pkg.m.x_f__mutmut_1": 1}
    meta = json.loads((work / "mutants/pkg/m.py.meta").read_text())
    assert meta["exit_code_by_key"]["pkg.m.x_f__mutmut_1"] is None  # measured again


def test_a_drawn_share_of_python_kills_is_reset_for_remeasure(tmp_path):
    _repo, work = _python_work(tmp_path)
    rng = random.Random(1)
    assert python_stamps.draw(work, "pkg/m.py", 1.0, rng, set()) == {
        "pkg.m.x_f__mutmut_1",
        "pkg.m.x_f__mutmut_2",
    }
    assert python_stamps.draw(work, "pkg/m.py", 0.0, rng, set()) == set()
    assert python_stamps.draw(work, "pkg/m.py", 1.0, rng, {"pkg.m.x_f__mutmut_1"}) == {
        "pkg.m.x_f__mutmut_2"
    }


def test_a_module_below_its_score_floor_fails():
    results = [Result(f"k{i}", "m.py", "killed") for i in range(9)]
    results.append(Result("s", "m.py", "survived"))
    report = SetReport("python:m.py", results, curated=False)  # 0.9
    assert floors.below([report], {"m.py": 0.9}) == []
    assert floors.below([report], {"m.py": 0.95}) == [
        "python:m.py scores 0.9000, below its floor 0.95"
    ]
    results[0] = Result("k0", "m.py", "stale")  # a stale kill counts against the floor
    assert floors.below([report], {"m.py": 0.9})
    assert set(floors.floors()) <= set(python_set.modules())


def test_a_verdict_file_cut_short_is_dropped_and_resumed_from_the_kept_verdicts(
    tmp_path, monkeypatch
):
    """A run killed while it wrote a meta file left it empty, and the next run crashed reading
    it (a JSONDecodeError traceback); now the file is dropped and its verdicts seeded again
    from the checkout's kept ones. A whole file is left alone."""
    from mutation import python_verdicts

    monkeypatch.setattr(python_verdicts, "FILE", tmp_path / "verdicts.json")
    module = "pkg/m.py"
    key = "pkg.m.x_f__mutmut_1"
    whole = tmp_path / "old" / "mutants" / f"{module}.meta"
    whole.parent.mkdir(parents=True)
    whole.write_text(
        json.dumps({"exit_code_by_key": {key: 1}, "hash_by_function_name": {"x_f": "h"}})
    )
    assert not python_stamps.drop_unreadable(tmp_path / "old", module) and whole.is_file()
    assert python_verdicts.save(tmp_path / "old", [module]) == 1
    work = tmp_path / "work"
    for text in ("", '{"exit_code_by_key": {"pkg.m.x_f__mutmut_1": 1', "[1, 2]"):
        cut = work / "mutants" / f"{module}.meta"
        cut.parent.mkdir(parents=True, exist_ok=True)
        cut.write_text(text)
        assert python_stamps.drop_unreadable(work, module) and not cut.exists()
        assert python_verdicts.restore(work, [module]) == 1
        assert python_stamps.meta_of(work, module)["exit_code_by_key"] == {key: 1}
    assert not python_stamps.drop_unreadable(work, "pkg/absent.py")


def test_files_are_written_whole(tmp_path):
    path = tmp_path / "stamps.json"
    path.write_text("old")
    python_stamps.write_atomically(path, "new")
    assert path.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["stamps.json"]


def test_a_signal_or_the_deadline_stops_mutmut_and_says_why():
    """SIGTERM (a kill) or SIGINT (Ctrl-C) while mutmut runs ends its process group and the
    run goes on to stamp and keep what was measured (killed outright, a run left every verdict
    it measured unstamped - 1,577 measured again - and a file cut short); so does the deadline.
    The signal handlers are put back."""
    import os
    import signal
    import subprocess
    import sys
    import threading

    def sleeper() -> subprocess.Popen:
        code = "import time; time.sleep(120)"
        return subprocess.Popen([sys.executable, "-c", code], start_new_session=True)

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    for number, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")):
        proc = sleeper()
        timer = threading.Timer(0.5, os.kill, (os.getpid(), number))
        timer.start()
        try:
            assert python_set.wait_or_stop(proc, time.monotonic() + 100) == f"stopped by {name}"
        finally:
            timer.cancel()
        assert proc.poll() is not None
        assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    proc = sleeper()
    assert python_set.wait_or_stop(proc, time.monotonic()) == "time budget spent"
    assert proc.poll() is not None
    done = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    assert python_set.wait_or_stop(done, time.monotonic() + 100) == ""


def test_a_report_only_run_leaves_the_kept_verdicts_alone(tmp_path, monkeypatch):
    """``--report-only`` measures nothing: it must not overwrite the checkout's kept verdicts
    with its work tree's (it did: a report-only run in a checkout whose work tree held only a
    slice replaced 5,434 lines of verdicts by 10)."""
    from mutation import python_verdicts

    kept = tmp_path / "verdicts.json"
    kept.write_text('{"arch/reference_ops.py": {}}\n')
    monkeypatch.setattr(python_verdicts, "FILE", kept)
    monkeypatch.setattr(python_set, "WORK", tmp_path / "work")
    monkeypatch.setattr(python_set, "sync", lambda: None)
    python_set.run(time.monotonic() - 1, 1)
    assert kept.read_text() == '{"arch/reference_ops.py": {}}\n'

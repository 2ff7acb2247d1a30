"""The Python numeric code, mutated by mutmut (``[tool.mutmut]`` in pyproject.toml names the
modules and the fast unit tests that cover them; mutmut runs each mutant against the tests
that call its function). One set per module: ``python:<path>``.

mutmut works in ``build/mutation/python/`` (a synced copy of the checkout, so its ``mutants/``
tree and its results survive between runs: a budget-cut run goes on where it stopped). A mutant
whose function no selected test calls ("no tests") counts as a survivor. mutmut keeps a verdict
while its function is unchanged, so when the selected test files change (a test added for a
survivor) the survivors and "no tests" mutants are measured again (:func:`retry_survivors`).
A full run resumes from and keeps its verdicts in the checkout (:mod:`mutation.python_verdicts`).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import tomllib

from mutation import python_stamps, python_verdicts
from mutation.report import Result, SetReport
from mutation.trees import REPO, source_files

WORK = REPO / "build" / "mutation" / "python"
KILLED = {1: "killed"}
ERRORS = {2: "interrupted", 3: "pytest internal error", 4: "pytest usage error"}
NO_TESTS = (5, 33)
TIMEOUTS = {36, 24, -24, 152, 255}
SLICE_FUNCTIONS = 2  # functions (all their mutants) a slice samples


def modules() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return list(config["tool"]["mutmut"]["only_mutate"])


def helper_files() -> list[Path]:
    """The test helpers (``tests/*.py``) every selected test may import."""
    return sorted((REPO / "tests").glob("*.py"))


def test_files() -> list[Path]:
    """The test files of ``[tool.mutmut]``'s selection and the test helpers they import."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    selected = {
        arg.split("::")[0] for arg in config["tool"]["mutmut"]["pytest_add_cli_args_test_selection"]
    }
    helpers = {str(p.relative_to(REPO)) for p in (REPO / "tests").glob("*.py")}
    return [REPO / name for name in sorted(selected | helpers) if (REPO / name).is_file()]


def retry_survivors() -> int:
    """Reset the survivors' and "no tests" verdicts when the selected test files changed since
    the verdicts were measured (mutmut itself would keep them); returns how many were reset.
    mutmut's map of which test calls which function is dropped too: it maps only new tests, so
    a changed test that now calls a survivor's function would never be run against it."""
    digest = hashlib.sha256()
    for test in test_files():
        digest.update(test.relative_to(REPO).as_posix().encode() + b"\0" + test.read_bytes())
    stamp = WORK / "tests.sha256"
    now = digest.hexdigest()
    if stamp.is_file() and stamp.read_text() == now:
        return 0
    (WORK / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
    reset = 0
    for path in modules():
        meta_path = WORK / "mutants" / f"{path}.meta"
        if not meta_path.is_file():
            continue
        meta = json.loads(meta_path.read_text())
        codes = meta["exit_code_by_key"]
        for key, code in codes.items():
            if code is not None and code not in KILLED and code not in TIMEOUTS:
                codes[key] = None
                reset += 1
        python_stamps.write_atomically(meta_path, json.dumps(meta, indent=4))
    python_stamps.write_atomically(stamp, now)
    return reset


def sync() -> Path:
    """Copy changed source files into the work tree (mutmut's own files stay)."""
    for name in source_files():
        src, dest = REPO / name, WORK / name
        if not dest.is_file() or dest.read_bytes() != src.read_bytes():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
    return WORK


def functions(path: str) -> list[str]:
    """mutmut's name patterns for the functions and methods of module ``path``."""
    module = path.removesuffix(".py").replace("/", ".")
    tree = ast.parse((REPO / path).read_text())
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _has_code(node):
            names.append(f"{module}.x_{node.name}__mutmut_*")
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and _has_code(item):
                    names.append(f"{module}.x\u01c1{node.name}\u01c1{item.name}__mutmut_*")
    return names


def _has_code(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """More than a docstring or ``pass``: mutmut makes no mutant of such a function (a slice
    that drew one measured nothing)."""
    return any(
        not isinstance(stmt, ast.Pass)
        and not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant))
        for stmt in function.body
    )


def _mutmut(patterns: list[str], jobs: int, deadline: float) -> str:
    """Run mutmut until it finishes or ``deadline``; '' or why it stopped early."""
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(jobs), *patterns]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    log = (WORK / "mutmut.log").open("w")
    proc = subprocess.Popen(
        cmd, cwd=WORK, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    try:
        stopped = wait_or_stop(proc, deadline)
    finally:
        log.close()
    if stopped:
        return stopped
    return "" if proc.returncode == 0 else f"mutmut exited {proc.returncode}: see {WORK}/mutmut.log"


class _Signalled(Exception):
    """SIGTERM or SIGINT came while mutmut ran."""


def _signalled(signum: int, _frame: object) -> None:
    raise _Signalled(signal.Signals(signum).name)


def wait_or_stop(proc: subprocess.Popen, deadline: float) -> str:
    """Wait for ``proc`` (a process group of its own) until ``deadline``; at the deadline, or
    when this process gets SIGTERM or SIGINT (a kill, Ctrl-C), end the group and say why - so
    that the run goes on to stamp and keep what was measured (a run killed outright left every
    verdict it measured unstamped, so stale, and a truncated file the next run could not read).
    '' when ``proc`` ended by itself."""
    handlers = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    for number in handlers:
        signal.signal(number, _signalled)
    try:
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        return ""
    except subprocess.TimeoutExpired:
        why = "time budget spent"
    except _Signalled as got:
        why = f"stopped by {got.args[0]}"
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait()
    return why


def status_of(code: int | None) -> str:
    """The report's status of a mutmut exit code (mutmut counts a pytest internal error, 3,
    as a kill; here it is an error)."""
    if code is None:
        return "not_run"
    if code in KILLED:
        return "killed"
    if code in ERRORS:
        return "error"
    if code in TIMEOUTS:
        return "timeout"
    return "no_tests" if code in NO_TESTS else "survived"  # survived (0), suspicious, ...


def _results(path: str, wanted: list[str] | None, stale: set[str], was: dict) -> list[Result]:
    meta = python_stamps.meta_of(WORK, path)
    codes = meta["exit_code_by_key"]
    durations = meta.get("durations_by_key", {})
    results = []
    for key, code in codes.items():
        if wanted is not None and not any(_matches(key, p) for p in wanted):
            continue
        status = "stale" if key in stale else status_of(code)
        detail = {
            "no_tests": "no test calls this function",
            "error": ERRORS.get(code or 0, ""),
            "stale": f"{status_of(code)} on older code or tests, not measured again",
        }.get(status, "")
        old = status_of(was[key]) if key in was else status
        results.append(
            Result(
                key,
                path,
                status,
                seconds=durations.get(key) or 0.0,
                detail=detail,
                was=old if old != status else "",
            )
        )
    return results


def _matches(key: str, pattern: str) -> bool:
    return key.startswith(pattern.removesuffix("*"))


def _today(paths: list[str]) -> dict[str, dict[str, str] | None]:
    return {p: python_stamps.now(WORK, REPO, p, helper_files()) for p in paths}


def _codes(paths: list[str]) -> dict[str, dict]:
    return {p: dict(python_stamps.meta_of(WORK, p)["exit_code_by_key"]) for p in paths}


def _measure(wanted, paths, jobs, deadline, recheck, seed) -> tuple[str, dict]:
    """mutmut over ``wanted`` (every module when None: a full run) until ``deadline``. A full
    run first resets the stale verdicts and a ``recheck`` share of the kills drawn with
    ``seed``, and when mutmut's test map was new, a second pass measures what it shows stale.
    Returns '' or why mutmut stopped, and the rechecked verdicts' old codes."""
    if time.monotonic() >= deadline:
        return "no time", {}  # --report-only: stale verdicts are reported stale
    rng = random.Random(seed)
    was: dict[str, int] = {}
    stopped = ""
    for second in (False, True):
        today, again = _today(paths), 0
        for path in paths if wanted is None else ():
            stale = python_stamps.stale(WORK, path, today[path]) if today[path] else set()
            again += len(python_stamps.reset(WORK, path, stale))
            if not second:
                drawn = python_stamps.draw(WORK, path, recheck, rng, stale)
                was |= python_stamps.reset(WORK, path, drawn)
        if second and not again:
            break
        if again or was:
            print(f"python: {again} stale verdicts and {len(was)} kills measured again")
        before = _codes(paths)
        left = time.monotonic() < deadline
        stopped = _mutmut(wanted or [], jobs, deadline) if left else "no time"
        today = _today(paths)
        for path in paths:
            python_stamps.mark(WORK, path, before[path], today[path])
        if stopped or wanted is not None:
            break
    return stopped, was


def run(
    deadline: float, jobs: int, sample: bool = False, seed: int | None = None, recheck=0.0
) -> list:
    """Mutate every module (or, with ``sample``, ``SLICE_FUNCTIONS`` functions drawn with
    ``seed``) until ``deadline``; one :class:`SetReport` per module, and ``python:control``
    when mutmut's run of the tests on the unmutated code failed."""
    started = time.monotonic()
    sync()
    paths = modules()
    for path in paths:
        if python_stamps.drop_unreadable(WORK, path):
            print(
                f"python: the work tree's verdicts of {path} were unreadable (a run ended while "
                f"writing them): removed, resumed from {python_verdicts.FILE.name} below"
            )
    if not sample:  # a slice measures its mutants afresh
        seeded = python_verdicts.restore(WORK, paths)
        if seeded:
            print(f"python: {seeded} verdicts resumed from {python_verdicts.FILE.name}")
    reset = retry_survivors() if time.monotonic() < deadline else 0  # not for --report-only
    if reset:
        print(f"python: test files changed: {reset} surviving mutants measured again")
    wanted = None
    if sample:
        rng = random.Random(seed)
        every = [name for path in paths for name in functions(path)]
        wanted = rng.sample(every, min(SLICE_FUNCTIONS, len(every)))
        print(f"python: mutants of {', '.join(w.removesuffix('__mutmut_*') for w in wanted)}")
    else:
        print(f"python: mutmut on {', '.join(paths)}")
    stopped, was = _measure(wanted, paths, jobs, deadline, recheck, seed)
    if stopped:
        print(f"python: mutmut stopped: {stopped}")
    if not sample and stopped != "no time":  # (--report-only measured nothing: keep the file)
        kept = python_verdicts.save(WORK, paths)
        print(f"python: {kept} verdicts kept in mutation/{python_verdicts.FILE.name} (commit it)")
    seconds = time.monotonic() - started
    today = _today(paths)
    reports = []
    for path in paths:
        stale = python_stamps.stale(WORK, path, today[path])
        if sample:  # the slice's fresh verdicts against the committed ones of the same code
            was = was | python_verdicts.committed(WORK, path, today[path])
        results = _results(path, wanted, stale, was)
        if wanted is not None and not results:
            mine = [w for w in wanted if w.startswith(path.removesuffix(".py").replace("/", "."))]
            if not mine:
                continue  # a sampled function whose mutants never ran is listed as not run
            results = [Result(w, path, "not_run", detail=stopped or "no mutants") for w in mine]
        reports.append(SetReport(f"python:{path}", results, seconds, curated=False))
    if stopped.startswith("mutmut exited"):  # e.g. its clean run of the tests failed
        control = Result("mutmut", "pyproject.toml [tool.mutmut]", "error", detail=stopped)
        reports.append(SetReport("python:control", [control], seconds, curated=False))
    return reports

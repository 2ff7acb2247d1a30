"""Run curated mutant sets: each mutant in its own copy of the checkout, against its killers,
``jobs`` at a time, within a time budget."""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from mutation import cache
from mutation.table import Mutant, MutantError
from mutation.trees import REPO, copy_tree

TREES = REPO / "build" / "mutation" / "trees"
MUTANT_TIMEOUT_S = 1200  # one mutant's generation + build + tests; past it: "timeout"


@dataclass(frozen=True)
class CuratedSet:
    """A named table of mutants and the pytest node ids that should kill them.

    ``regenerate``: a preset whose ``rtl/<name>/`` is regenerated from the mutated generator
    before the tests run (RTL mutants), or ``None``. ``killers_of`` overrides ``killers`` for
    single mutants (by id).
    """

    name: str
    mutants: list[Mutant]
    killers: tuple[str, ...]
    regenerate: str | None = None
    killers_of: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass
class Outcome:
    """What happened to one mutant. ``status``: killed (a test failed), survived, error (pytest
    could not decide: a collection, fixture or build error, or the harness's own timeout - no
    kill), not_run (out of budget), stale (its kept verdict no longer holds and the budget is
    spent), or invalid (the mutant did not apply or changed nothing). ``was``: a re-measured
    verdict's kept status when the new one differs."""

    mutant: Mutant
    status: str
    killed_by: str = ""
    seconds: float = 0.0
    detail: str = ""
    was: str = ""


def _run(cmd: list[str], cwd: Path, timeout: float) -> tuple[int | None, str]:
    try:
        done = subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        return None, out
    return done.returncode, done.stdout + done.stderr


def _regenerate(tree: Path, config: str, timeout: float) -> str:
    """Regenerate ``rtl/<config>/`` in ``tree``; an error message, or '' when it changed."""
    top = tree / "rtl" / config / "sim_top.v"
    before = top.read_text()
    code, out = _run([sys.executable, "-m", "hdl_gen.generate", config], tree, timeout)
    if code != 0:
        tail = out.strip().splitlines()[-1:] or ["timed out"]
        return f"generation failed: {tail[0]}"
    if top.read_text() == before:
        return "the generated RTL did not change"
    return ""


# A pytest summary line: ``FAILED <node id> - <message>``. A parametrized test's id is its
# values in brackets and may hold spaces, even " - ": the id is a path::name and, if any, the
# bracket that closes before the message or the line's end.
_SUMMARY = r"^{} ([^\s\[]+(?:\[.*?\])?)(?= - |$)"


def _summary_ids(kind: str, out: str) -> list[str]:
    """The node ids of pytest's short summary lines of ``kind`` (FAILED or ERROR)."""
    return re.findall(_SUMMARY.format(kind), out, re.M)


def verdict(mutant: Mutant, code: int | None, out: str, seconds: float) -> Outcome:
    """A pytest run's verdict: killed only by a test that FAILED (pytest exit 1, no ERROR);
    a test's own timeout (pytest-timeout) fails it, the harness's timeout is an error."""
    if code is None:
        return Outcome(mutant, "error", seconds=seconds, detail="the harness timed out")
    if code == 0:
        return Outcome(mutant, "survived", seconds=seconds)
    failed = _summary_ids("FAILED", out)
    errors = _summary_ids("ERROR", out)
    if code == 1 and failed and not errors:
        return Outcome(mutant, "killed", killed_by=failed[0], seconds=seconds)
    what = f"ERROR {errors[0]}" if errors else " / ".join(out.strip().splitlines()[-2:])
    return Outcome(mutant, "error", seconds=seconds, detail=f"pytest exit {code}: {what}")


def run_mutant(cset: CuratedSet, mutant: Mutant, keep: bool = False) -> Outcome:
    started = time.perf_counter()
    tree = copy_tree(TREES / f"{cset.name}-{mutant.id}")
    try:
        try:
            mutant.apply(tree)
        except MutantError as exc:
            return Outcome(mutant, "invalid", detail=str(exc))
        if cset.regenerate:
            problem = _regenerate(tree, cset.regenerate, MUTANT_TIMEOUT_S)
            if problem:
                return Outcome(mutant, "invalid", detail=problem)
        killers = cset.killers_of.get(mutant.id, cset.killers)
        left = MUTANT_TIMEOUT_S - (time.perf_counter() - started)
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *killers]
        code, out = _run(cmd, tree, left)
        return verdict(mutant, code, out, time.perf_counter() - started)
    finally:
        if not keep:
            shutil.rmtree(tree, ignore_errors=True)


def run_set(
    cset: CuratedSet,
    mutants: list[Mutant],
    jobs: int,
    deadline: float,
    progress=print,
    recheck: float = 0.0,
    seed: int = 0,
) -> list[Outcome]:
    """Run ``mutants`` of ``cset``; those not started by ``deadline`` (time.monotonic) are
    ``not_run``, or ``stale`` when a kept verdict no longer holds. A kept verdict stands, but
    a ``recheck`` share of the kept kills, drawn with ``seed``, is measured again. The kills
    are trusted only after :func:`control`."""

    design = cache.design_hash()
    rng = random.Random(seed)
    again = {m.id for m in mutants if rng.random() < recheck}

    def one(mutant: Mutant) -> Outcome:
        killers = cset.killers_of.get(mutant.id, cset.killers)
        kept = cache.load(cset.name, mutant, design, killers)
        if kept is not None and not (mutant.id in again and kept["status"] == "killed"):
            return Outcome(mutant, kept["status"], kept["killed_by"], kept["seconds"], "kept")
        if time.monotonic() >= deadline:
            old = cache.kept_status(cset.name, mutant)
            if kept is None and old:
                return Outcome(mutant, "stale", detail=f"{old} on older code, not measured again")
            return Outcome(mutant, "not_run", detail="time budget spent")
        outcome = run_mutant(cset, mutant)
        if kept is not None and outcome.status != kept["status"]:
            outcome.was = kept["status"]
        if outcome.status in ("killed", "survived"):
            cache.store(cset.name, mutant, design, killers, outcome)
        extra = f" by {outcome.killed_by}" if outcome.killed_by else ""
        detail = f" ({outcome.detail})" if outcome.detail else ""
        flip = f" (FLIPPED: was {outcome.was})" if outcome.was else ""
        progress(
            f"  {cset.name}/{mutant.id}: {outcome.status}{extra}{detail}{flip}"
            f" [{outcome.seconds:.0f} s]"
        )
        return outcome

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, mutants))


def control(outcomes: list[Outcome], progress=print, root: Path = REPO) -> list[Outcome]:
    """The control run: every test that killed a mutant runs on the unmutated tree (``root``,
    the checkout); a kill by a test that fails there too becomes an ``error``."""
    killers = sorted({o.killed_by for o in outcomes if o.status == "killed"})
    if not killers:
        return outcomes
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *killers]
    code, out = _run(cmd, root, MUTANT_TIMEOUT_S)
    if code == 0:
        progress(f"  control: {len(killers)} killing test(s) pass on the unmutated tree")
        return outcomes
    broken = set(_summary_ids("FAILED", out) + _summary_ids("ERROR", out)) or set(killers)
    progress(f"  control: FAILS on the unmutated tree: {', '.join(sorted(broken))}")
    for o in outcomes:
        if o.status == "killed" and o.killed_by in broken:
            o.status, o.detail = "error", f"its killer {o.killed_by} fails unmutated too"
    return outcomes

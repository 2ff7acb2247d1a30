"""``python -m mutation``: run the mutant sets and write build/mutation/report.json.

    python -m mutation                       # every set, whole (make mutate)
    python -m mutation --slice               # a seeded sample within a small budget (.ci/run)
    python -m mutation --sets rtl --only requant-truncate,store-past-line
    python -m mutation --list

The slice's seed comes from ``MUTATE_SEED`` (or ``--seed``), else a fresh one; it is printed so
that ``MUTATE_SEED=<seed> make mutate-slice`` reruns the same sample.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from mutation import floors, python_set
from mutation.curated import Outcome, control, run_set
from mutation.report import Result, SetReport, failures, write
from mutation.sets import CURATED
from mutation.table import MutantError, select
from mutation.trees import REPO
from sim import knobs

OUT = REPO / "build" / "mutation"
SETS = (*CURATED, "python")
# The CI slice: a few mutants of each set within a few minutes.
SLICE = {"rtl": 2, "harness": 1, "norm": 0}  # (norm: its killers build a config of their own)
SLICE_BUDGET_S = 300
# The slice's Python set measures first, on a budget of its own: on a fresh clone mutmut first
# runs every selected test once to map tests to functions (about 300 s here), which the
# curated sets' budget never left room for (the slice then measured no Python mutant).
SLICE_PYTHON_BUDGET_S = 360
FULL_BUDGET_S = 4 * 3600


def _seed(text: str | None) -> int:
    if text is None or text == "":
        return random.SystemRandom().randrange(1, 10**6)
    if not text.isdigit():
        raise MutantError(f"MUTATE_SEED must be a non-negative integer, not {text!r}")
    return int(text)


def _result(outcome: Outcome) -> Result:
    m, o = outcome.mutant, outcome
    return Result(
        m.id, m.where, o.status, m.equivalent, m.known_gap, o.killed_by, o.seconds, o.detail, o.was
    )


def _is_share(text: str) -> bool:
    try:
        return 0.0 <= float(text) <= 1.0
    except ValueError:
        return False


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m mutation", description=__doc__.splitlines()[0])
    p.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, of {', '.join(SETS)}")
    p.add_argument("--only", default="", help="comma-separated mutant ids of the curated sets")
    p.add_argument("--slice", action="store_true", help="a seeded sample (the CI slice)")
    p.add_argument("--seed", default=knobs.MUTATE_SEED.get() or None, help="the slice's seed")
    p.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2)")
    p.add_argument("--budget", type=float, default=None, help="seconds for the whole run")
    p.add_argument(
        "--recheck",
        default=knobs.MUTATE_RECHECK.get(),
        help="share of kept kills measured again (MUTATE_RECHECK, default 0.1)",
    )
    p.add_argument("--list", action="store_true", help="list the curated mutants and exit")
    p.add_argument(
        "--report-only", action="store_true", help="write the report from kept results, run none"
    )
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    try:
        names = [n for n in args.sets.split(",") if n]
        unknown = [n for n in names if n not in SETS]
        if unknown:
            raise MutantError(f"unknown set {', '.join(unknown)}; sets: {', '.join(SETS)}")
        if args.jobs < 1:
            raise MutantError(f"--jobs must be at least 1, not {args.jobs}")
        seed = _seed(args.seed)
        if not _is_share(args.recheck):
            raise MutantError(f"MUTATE_RECHECK must be a share from 0 to 1, not {args.recheck!r}")
        only = [i for i in args.only.split(",") if i]
        curated = [n for n in names if n != "python"]
        select([m for n in curated for m in CURATED[n].mutants], only)  # unknown ids: an error
        chosen = {n: [m for m in CURATED[n].mutants if not only or m.id in only] for n in curated}
    except MutantError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    if args.list:
        for name in CURATED:
            for m in CURATED[name].mutants:
                note = f"  [equivalent: {m.equivalent}]" if m.equivalent else ""
                print(f"{name}/{m.id}  {m.where}  - {m.why}{note}")
        return 0

    reports, meta = _run(args, chosen, names, only, seed)
    path = OUT / ("slice-report.json" if args.slice else "report.json")
    summary = write(path, reports, meta)
    print(summary.read_text(), end="")
    print(f"report: {path.relative_to(REPO)}, summary: {summary.relative_to(REPO)}")
    bad, warn = failures(reports, slice_mode=args.slice)
    for name in warn:
        print(f"warning: {name} survived the slice: judge it with `make mutate MUTANTS={name[4:]}`")
    low = [] if args.slice or only else floors.below(reports, floors.floors())
    for line in low:
        print(f"error: {line} (pyproject.toml [tool.mutation.score_floor])", file=sys.stderr)
    if bad:
        print(f"error: mutants not killed and not justified: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad or low else 0


def _run(args, chosen: dict, names: list[str], only: list[str], seed: int) -> tuple[list, dict]:
    """Run the chosen curated mutants and the Python set: the reports and the run's facts."""
    budget = args.budget or (SLICE_BUDGET_S if args.slice else FULL_BUDGET_S)
    if args.report_only:
        budget = 0
    started = time.monotonic()
    deadline = started + budget
    recheck = 0.0 if args.slice else float(args.recheck)  # a slice measures afresh anyway
    meta = {"mode": "slice" if args.slice else "full", "seed": seed, "budget_s": budget}
    meta["recheck"] = recheck
    rng = random.Random(seed)
    if args.slice:
        print(f"mutation slice seed {seed} (rerun it: MUTATE_SEED={seed} make mutate-slice)")
        for name, mutants in chosen.items():
            chosen[name] = rng.sample(mutants, min(SLICE[name], len(mutants)))
    else:
        print(f"mutation seed {seed}: {recheck:.0%} of the kept kills measured again")
    python = []
    if args.slice and "python" in names and not only:
        python = python_set.run(
            started + SLICE_PYTHON_BUDGET_S, args.jobs, sample=True, seed=seed, recheck=recheck
        )
        deadline = time.monotonic() + budget
        meta["python_budget_s"] = SLICE_PYTHON_BUDGET_S
    done: list[tuple[str, list, float]] = []
    with ThreadPoolExecutor(max_workers=1) as controls:  # beside the next sets, off the budget
        checks = []
        for name, mutants in chosen.items():
            print(f"{name}: {len(mutants)} mutants, {args.jobs} at a time")
            t0 = time.monotonic()
            outcomes = run_set(
                CURATED[name], mutants, args.jobs, deadline, recheck=recheck, seed=seed
            )
            done.append((name, outcomes, time.monotonic() - t0))
            checks.append(controls.submit(control, outcomes))
        if "python" in names and not only and not args.slice:
            python = python_set.run(
                deadline, args.jobs, sample=args.slice, seed=seed, recheck=recheck
            )
        for check in checks:
            check.result()  # a kill whose test fails unmutated too is now an error
    reports = [SetReport(n, [_result(o) for o in outs], sec) for n, outs, sec in done]
    meta["seconds"] = round(time.monotonic() - started, 1)
    return reports + python, meta


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

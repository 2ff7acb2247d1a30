"""``build/mutation/report.json`` and its text summary, from every set's outcomes.

Each set: ``{"total", "killed", "survived": [{"id", "where", "why_equivalent"}], ...}`` where
``killed`` counts timeouts too, ``total`` counts the mutants run, and mutants the time budget
left out are listed under ``not_run``. Never counted as kills: ``stale`` verdicts (measured on a
mutated file or killing tests that changed since, and not measured again), ``error`` (pytest
could not run: a collection error, a failed build or fixture, the harness's own timeout, a
killer that fails on the unmutated tree too) and ``no_tests`` (no selected test calls the
mutated function: a survivor). ``flipped``: re-measured verdicts that differ from the kept
ones."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Result:
    """One mutant's result in a set, whatever tool produced it."""

    id: str
    where: str
    status: str  # killed | timeout | survived | no_tests | not_run | invalid | stale | error
    why_equivalent: str = ""
    known_gap: str = ""
    killed_by: str = ""
    seconds: float = 0.0
    detail: str = ""
    was: str = ""  # a re-measured verdict's kept status, when it differs (a flip)


#: Statuses of a decided mutant, and the kills among them.
DECIDED = ("killed", "timeout", "survived", "no_tests")
KILLS = ("killed", "timeout")


@dataclass
class SetReport:
    name: str
    results: list[Result] = field(default_factory=list)
    seconds: float = 0.0
    curated: bool = True  # every survivor needs a justification (else: a score to reach)

    def as_json(self) -> dict:
        ran = [r for r in self.results if r.status in DECIDED]
        killed = [r for r in ran if r.status in KILLS]
        survived = [r for r in ran if r.status in ("survived", "no_tests")]
        slowest = sorted(ran, key=lambda r: -r.seconds)[:5]
        return {
            "total": len(ran),
            "killed": len(killed),
            "score": round(len(killed) / len(ran), 4) if ran else None,
            "survived": [
                {"id": r.id, "where": r.where, "why_equivalent": r.why_equivalent or None}
                | ({"known_gap": r.known_gap} if r.known_gap else {})
                for r in survived
            ],
            "timeouts": [r.id for r in ran if r.status == "timeout"],
            "not_run": [r.id for r in self.results if r.status == "not_run"],
            "no_tests": [r.id for r in ran if r.status == "no_tests"],
            "stale": [{"id": r.id, "detail": r.detail} for r in self.of("stale")],
            "errors": [{"id": r.id, "detail": r.detail} for r in self.of("error")],
            "flipped": [{"id": r.id, "was": r.was, "now": r.status} for r in self.results if r.was],
            "score_of_all": round(len(killed) / len(self.results), 4) if self.results else None,
            "invalid": [
                {"id": r.id, "detail": r.detail} for r in self.results if r.status == "invalid"
            ],
            "killed_by": {r.id: r.killed_by for r in killed if r.killed_by},
            "slowest": [{"id": r.id, "seconds": round(r.seconds, 1)} for r in slowest if r.seconds],
            "seconds": round(self.seconds, 1),
        }

    def of(self, status: str) -> list[Result]:
        return [r for r in self.results if r.status == status]

    def unjustified(self, strict: bool = True) -> list[str]:
        """Survivors with no equivalence argument (``strict=False``: nor a known gap), and
        mutants that could not run."""
        if not self.curated:
            return []
        bad = [
            r.id
            for r in self.results
            if r.status == "survived" and not r.why_equivalent and (strict or not r.known_gap)
        ]
        return bad + [r.id for r in self.results if r.status == "invalid"]


def failures(sets: list[SetReport], slice_mode: bool) -> tuple[list[str], list[str]]:
    """(``set/id`` of the mutants that fail the run, of those only warned about).

    ``make mutate`` fails on every curated survivor without a justification and on every
    mutant that no longer applies. The CI slice fails on the same but for the RTL set, whose
    sampled survivors (not every RTL mutant has had a full run's verdict) are warned about, and
    known gaps: ``make mutate`` is where those are judged. Every run fails on an ``error`` (a
    kill that cannot be trusted) and on a kill that flipped when measured again."""
    bad: list[str] = []
    warn: list[str] = []
    for report in sets:
        bad += [f"{report.name}/{r.id} (error: {r.detail})" for r in report.of("error")]
        bad += [
            f"{report.name}/{r.id} (flipped: was {r.was}, now {r.status})"
            for r in report.results
            if r.was in KILLS and r.status not in KILLS
        ]
        invalid = {r.id for r in report.results if r.status == "invalid"}
        for mutant in report.unjustified(strict=not slice_mode):
            key = f"{report.name}/{mutant}"
            soft = slice_mode and report.name == "rtl" and mutant not in invalid
            (warn if soft else bad).append(key)
    return bad, warn


def write(path: Path, sets: list[SetReport], meta: dict) -> Path:
    """Write ``path`` (JSON) and ``path`` with suffix .txt (the summary); return the summary's."""
    data = {**meta, "sets": {s.name: s.as_json() for s in sets}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    summary = path.with_suffix(".txt")
    summary.write_text(summary_text(data))
    return summary


def summary_text(data: dict) -> str:
    head = f"{'set':<40} {'killed':>6} {'total':>6} {'score':>7} {'no tests':>8} {'stale':>5}"
    lines = [f"{head} {'error':>5} {'flipped':>7}  not run"]
    for name, s in data["sets"].items():
        score = "-" if s["score"] is None else f"{100 * s['score']:.1f}%"
        counts = [len(s.get(k, ())) for k in ("no_tests", "stale", "errors", "flipped")]
        lines.append(
            f"{name:<40} {s['killed']:>6} {s['total']:>6} {score:>7} {counts[0]:>8} "
            f"{counts[1]:>5} {counts[2]:>5} {counts[3]:>7}  {len(s['not_run'])}"
        )
    for name, s in data["sets"].items():
        for r in s["survived"]:
            if not name.startswith("python:"):
                gap = f"KNOWN GAP, needs a test: {r['known_gap']}" if "known_gap" in r else ""
                why = r["why_equivalent"] or gap or "NOT JUSTIFIED: needs a test"
                lines.append(f"survivor {name}/{r['id']} ({r['where']}): {why}")
        for r in s["invalid"]:
            lines.append(f"invalid {name}/{r['id']}: {r['detail']}")
        for key, what in (("errors", "ERROR (no kill)"), ("stale", "stale (no current kill)")):
            lines += [f"{what} {name}/{r['id']}: {r['detail']}" for r in s.get(key, ())]
        for r in s.get("flipped", ()):
            lines.append(f"FLIPPED {name}/{r['id']}: was {r['was']}, now {r['now']}")
    return "\n".join(lines) + "\n"

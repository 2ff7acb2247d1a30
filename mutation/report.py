"""``build/mutation/report.json`` and its text summary, from every set's outcomes.

Each set: ``{"total", "killed", "survived": [{"id", "where", "why_equivalent"}], ...}`` where
``killed`` counts timeouts too, ``total`` counts the mutants run, and mutants the time budget
left out are listed under ``not_run``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Result:
    """One mutant's result in a set, whatever tool produced it."""

    id: str
    where: str
    status: str  # killed | timeout | survived | not_run | invalid
    why_equivalent: str = ""
    known_gap: str = ""
    killed_by: str = ""
    seconds: float = 0.0
    detail: str = ""


@dataclass
class SetReport:
    name: str
    results: list[Result] = field(default_factory=list)
    seconds: float = 0.0
    curated: bool = True  # every survivor needs a justification (else: a score to reach)

    def as_json(self) -> dict:
        ran = [r for r in self.results if r.status in ("killed", "timeout", "survived")]
        killed = [r for r in ran if r.status != "survived"]
        survived = [r for r in ran if r.status == "survived"]
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
            "invalid": [
                {"id": r.id, "detail": r.detail} for r in self.results if r.status == "invalid"
            ],
            "killed_by": {r.id: r.killed_by for r in killed if r.killed_by},
            "slowest": [{"id": r.id, "seconds": round(r.seconds, 1)} for r in slowest if r.seconds],
            "seconds": round(self.seconds, 1),
        }

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
    known gaps: ``make mutate`` is where those are judged."""
    bad: list[str] = []
    warn: list[str] = []
    for report in sets:
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
    lines = [f"{'set':<44} {'killed':>7} {'total':>6} {'score':>7}  not run"]
    for name, s in data["sets"].items():
        score = "-" if s["score"] is None else f"{100 * s['score']:.1f}%"
        lines.append(f"{name:<44} {s['killed']:>7} {s['total']:>6} {score:>7}  {len(s['not_run'])}")
    for name, s in data["sets"].items():
        for r in s["survived"]:
            if not name.startswith("python:"):
                gap = f"KNOWN GAP, needs a test: {r['known_gap']}" if "known_gap" in r else ""
                why = r["why_equivalent"] or gap or "NOT JUSTIFIED: needs a test"
                lines.append(f"survivor {name}/{r['id']} ({r['where']}): {why}")
        for r in s["invalid"]:
            lines.append(f"invalid {name}/{r['id']}: {r['detail']}")
    return "\n".join(lines) + "\n"

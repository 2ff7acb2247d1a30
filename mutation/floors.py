"""Score floors of the Python modules (``[tool.mutation.score_floor]`` in pyproject.toml):
``make mutate`` fails when a module's score - kills over all its mutants, so a stale, unrun or
erroneous verdict counts against it - falls below its floor."""

from __future__ import annotations

import tomllib

from mutation.report import KILLS, SetReport
from mutation.trees import REPO


def floors() -> dict[str, float]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return dict(config["tool"]["mutation"]["score_floor"])


def below(reports: list[SetReport], floor: dict[str, float]) -> list[str]:
    """One line per Python module whose score is below its floor."""
    bad = []
    for report in reports:
        path = report.name.removeprefix("python:")
        if path not in floor or not report.results:
            continue
        score = sum(r.status in KILLS for r in report.results) / len(report.results)
        if score < floor[path]:
            bad.append(f"{report.name} scores {score:.4f}, below its floor {floor[path]}")
    return bad

"""pytest plugin of the mutmut runs (``[tool.mutmut] pytest_add_cli_args``): a mutant's tests run
cheapest file first, each file's tests fastest first, by the durations mutmut recorded
(``mutmut-stats.json`` in its working directory). mutmut stops at the first failure (``-x``), so a
killed mutant costs its cheapest failing test, not whatever sorts first by name; files stay
together so module fixtures are built once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

STATS = Path("mutmut-stats.json")


def _durations() -> dict[str, float]:
    try:
        return dict(json.loads(STATS.read_text())["duration_by_test"])
    except (OSError, ValueError, KeyError):  # no stats yet (mutmut's first pass), or mid-write
        return {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    durations = _durations()
    if not durations:
        return
    per_file: dict[str, float] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        per_file[path] = per_file.get(path, 0.0) + durations.get(item.nodeid, 0.0)
    items.sort(key=lambda i: (per_file[i.nodeid.split("::")[0]], durations.get(i.nodeid, 0.0)))

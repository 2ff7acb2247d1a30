"""Instrumented Verilator builds: code coverage and RTL assertions, switched on by the environment.

``COSIM_COVERAGE=<dir>`` builds every cocotb model with line and toggle coverage (a build of its
own: the flags enter the cache key) and has each simulator process write its counts to a new
``<dir>/dat/<id>.dat`` (``make coverage`` merges them, sim/coverage/). ``COSIM_ASSERT=1``
compiles the RTL's assertions (``--assert``; generated from the Amaranth source);
``COSIM_ASSERT=tiny`` only into the named configs' accelerator builds (the tests' default,
tests/conftest.py). Unset, builds are the plain, uninstrumented ones.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from pathlib import Path

from sim import knobs

COVERAGE_ENV = knobs.COVERAGE.name
ASSERT_ENV = knobs.ASSERT.name

# Line and toggle coverage of the RTL (not --coverage-user: the design has no cover points).
COVERAGE_ARGS = ("--coverage-line", "--coverage-toggle")
ASSERT_ARGS = ("--assert",)


def coverage_dir() -> Path | None:
    """Where instrumented runs write their counts, or ``None`` (coverage off)."""
    value = knobs.COVERAGE.get().strip()
    return Path(value).resolve() if value else None


def assertions_on(names: Iterable[str] = ()) -> bool:
    """Whether builds (of an accelerator config known by ``names``: its preset's and its own)
    have assertions: ``COSIM_ASSERT=1`` every build, ``COSIM_ASSERT=tiny,...`` the named
    configs' only."""
    value = knobs.ASSERT.get().strip()
    if value in ("", "0", "1"):
        return value == "1"
    return not set(value.split(",")).isdisjoint(names)


def coverage_plusargs(enabled: bool) -> list[str]:
    """The plusarg naming a fresh counts file for one simulator process of a coverage build."""
    root = coverage_dir()
    if not enabled or root is None:
        return []
    directory = root / "dat"
    directory.mkdir(parents=True, exist_ok=True)
    return [f"+verilator+coverage+file+{directory / (uuid.uuid4().hex + '.dat')}"]

"""Keep ``build/runs`` bounded: after a run, remove all but the newest N run directories
(``COSIM_KEEP_RUNS``, default :data:`DEFAULT_KEEP`; 0 keeps every run). Only directories a run
made (``<name>-YYYYMMDD-HHMMSS[-n]``) are removed, never one a running process holds
(:func:`hold`: an advisory lock, released by the kernel when the process ends, also if killed)."""

from __future__ import annotations

import fcntl
import re
import shutil
from pathlib import Path
from typing import IO

from sim import knobs

__all__ = ["DEFAULT_KEEP", "KeepRunsError", "hold", "keep_runs", "prune"]

DEFAULT_KEEP = 10
ENV = knobs.KEEP_RUNS.name
HELD = ".running"
_RUN_NAME = re.compile(r"-(\d{8}-\d{6})(?:-(\d+))?$")
_held: list[IO[str]] = []  # open lock files of this process's runs


#: ``COSIM_KEEP_RUNS`` is not a non-negative integer (the value check of every variable).
KeepRunsError = knobs.KnobError


def keep_runs() -> int:
    """How many runs to keep, from ``COSIM_KEEP_RUNS`` (0: all; :class:`KeepRunsError` for a
    value that is not a non-negative integer in ASCII digits)."""
    text = knobs.KEEP_RUNS.checked()
    return int(text) if text else DEFAULT_KEEP


def hold(run_dir: Path) -> None:
    """Mark ``run_dir`` as in use by this process until it exits."""
    handle = open(run_dir / HELD, "w")  # noqa: SIM115 - held open for the process's life
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _held.append(handle)


def _in_use(run_dir: Path) -> bool:
    try:
        with open(run_dir / HELD) as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
    except FileNotFoundError:
        return False
    return False  # (a lock of this process's own is another open file: it blocks too)


def _order(path: Path) -> tuple[str, int]:
    match = _RUN_NAME.search(path.name)
    assert match is not None
    return match.group(1), int(match.group(2) or 1)


def prune(root: Path, keep: int) -> list[Path]:
    """Remove the run directories under ``root`` but the newest ``keep`` (by the time in their
    names) and those in use; return what was removed. ``keep`` 0 removes nothing."""
    if keep <= 0 or not root.is_dir():
        return []
    runs = [
        path
        for path in root.iterdir()
        if path.is_dir() and not path.is_symlink() and _RUN_NAME.search(path.name)
    ]
    runs.sort(key=_order, reverse=True)
    removed = []
    for path in runs[keep:]:
        if _in_use(path):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed

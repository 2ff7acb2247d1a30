"""Run directories: ``build/runs/<model>-<config>-<backend>-<time>``, each made by exactly one
run (``mkdir`` is atomic: two runs started in the same second get ``...-<time>`` and
``...-<time>-2``), and the ``latest`` link, replaced atomically."""

from __future__ import annotations

import datetime
import itertools
import os
import uuid
from pathlib import Path

__all__ = ["RunDirError", "new_run_dir", "point_latest", "use_run_dir"]


class RunDirError(OSError):
    """A run directory cannot be made (a file in the way, no permission); says which path."""


def _stamp() -> str:
    return datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def _problem(path: Path, exc: OSError) -> RunDirError:
    """``exc`` while making ``path``, said with the file that is in the way, if one is."""
    for part in [path, *path.parents]:
        if part.exists() and not part.is_dir():
            why = f"{part} is a file, not a directory"
            break
    else:
        why = exc.strerror or str(exc)
    return RunDirError(f"cannot create the run directory {path}: {why}")


def new_run_dir(root: Path, name: str) -> Path:
    """Create and return a directory ``root/<name>-<time>`` no other run has (``-2``, ``-3``...
    appended when one of that name exists)."""
    stamp = _stamp()
    try:
        root.mkdir(parents=True, exist_ok=True)
        for n in itertools.count(1):
            path = root / (f"{name}-{stamp}" if n == 1 else f"{name}-{stamp}-{n}")
            try:
                path.mkdir()
                return path
            except FileExistsError:
                if not path.is_dir():
                    raise
    except OSError as exc:
        raise _problem(root / f"{name}-{stamp}", exc) from None
    raise AssertionError("unreachable")


def use_run_dir(path: Path) -> Path:
    """``path`` (the user's ``--out``) as a directory, created if needed."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _problem(path, exc) from None
    return path


def point_latest(link: Path, target: Path) -> None:
    """Make ``link`` a symlink to ``target``, replacing an older link in one step (a run
    finishing at the same time sees one link or the other, never none or an error)."""
    if link.exists() and not link.is_symlink():
        return  # a real file or directory of the user's: leave it
    temporary = link.with_name(f".{link.name}-{uuid.uuid4().hex}")
    temporary.symlink_to(target.resolve())
    os.replace(temporary, link)

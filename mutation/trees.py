"""Temporary copies of the checkout for mutants: the files git knows (tracked and untracked,
not ignored), so build outputs and the virtual environment stay behind."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUNTIME_CACHE = REPO / "build" / "verilator" / ".runtime"  # sim/verilate/runtime.py's cache


def source_files(repo: Path = REPO) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return [name for name in out.split("\0") if name and (repo / name).is_file()]


def copy_tree(dest: Path, repo: Path = REPO) -> Path:
    """A fresh copy of the checkout at ``dest``. Its Verilator builds go to its own build/ (each
    mutant is one new build) but share the compiled Verilator runtime objects with the checkout."""
    if dest.exists():
        shutil.rmtree(dest)
    for name in source_files(repo):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / name, target)
    RUNTIME_CACHE.mkdir(parents=True, exist_ok=True)
    (dest / "build" / "verilator").mkdir(parents=True)
    (dest / "build" / "verilator" / ".runtime").symlink_to(RUNTIME_CACHE)
    return dest

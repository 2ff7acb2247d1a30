"""Writes the file system refuses (:mod:`sim.app.disk`): ``--out`` or ``build/runs`` on a full
file system, a read-only one, or a file where the run's ``sim`` folder goes end with one line
naming the path - exit code 3 (the machine) or 2 (another ``--out``) - never a traceback.

The full and read-only file systems are small tmpfs mounts (skipped where mounting is not
permitted); the Verilator build lock's read-only error is injected where it is raised."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.app import session
from sim.app.disk import disk_failure
from tests.unit.run.test_cli_errors import in_process


@contextlib.contextmanager
def tmpfs(where: Path, options: str) -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(root: Path) -> None:
    """Write to ``root`` until its file system is full."""
    handle = os.open(root / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(handle, b"\xa5" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(handle)


def one_error_line(result: subprocess.CompletedProcess[str], code: int, *names: str) -> str:
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    assert result.returncode == code, (result.returncode, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    for name in names:
        assert name in errors[0], (name, errors[0])
    return errors[0]


def test_out_on_a_full_file_system(tmp_path, capsys) -> None:
    with tmpfs(tmp_path / "disk", "size=128k") as disk:
        fill(disk)
        result = in_process(capsys, "--model", "mlp", "--config", "tiny", "--out", str(disk / "r"))
        one_error_line(result, 3, "No space left on device", str(disk / "r"))


def test_build_runs_on_a_full_file_system(tmp_path, capsys, monkeypatch) -> None:
    with tmpfs(tmp_path / "disk", "size=128k") as disk:
        fill(disk)
        monkeypatch.setattr(session, "RUNS_ROOT", disk / "runs")
        (disk / "runs").mkdir()  # (a directory costs no data block)
        result = in_process(capsys, "--model", "mlp", "--config", "tiny")
        one_error_line(result, 3, "No space left on device", str(disk / "runs"))


def test_out_on_a_read_only_file_system(tmp_path, capsys) -> None:
    with tmpfs(tmp_path / "disk", "size=128k") as disk:
        (disk / "r").mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        result = in_process(capsys, "--model", "mlp", "--config", "tiny", "--out", str(disk / "r"))
        one_error_line(result, 3, "Read-only file system", str(disk / "r"))


def test_a_file_where_the_sim_folder_goes(tmp_path, capsys, monkeypatch) -> None:
    """(The ISA backend writes no ``sim`` folder: its run makes one here as the RTL's does.)"""
    original = session.run

    def run_in_workdir(*args, workdir=None, **kwargs):
        Path(workdir).mkdir(parents=True, exist_ok=True)  # sim/backends/rtl.py's first write
        return original(*args, workdir=workdir, **kwargs)

    monkeypatch.setattr(session, "run", run_in_workdir)
    out = tmp_path / "r"
    out.mkdir()
    (out / "sim").write_text("in the way")
    result = in_process(capsys, "--model", "mlp", "--config", "tiny", "--out", str(out))
    one_error_line(result, 2, str(out / "sim"), "File exists")


def test_the_verilator_build_lock_on_a_read_only_folder() -> None:
    lock = "/ro/build/verilator/.accel-1234.lock"
    said = disk_failure(OSError(errno.EROFS, os.strerror(errno.EROFS), lock), None)
    assert said == (3, f"error: {lock}: Read-only file system")
    # a write to an open file names no path: the run directory is named instead
    said = disk_failure(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), Path("/runs/r1"))
    assert said == (3, "error: a file under /runs/r1: No space left on device")
    assert disk_failure(OSError(errno.EIO, "I/O error"), None) is None  # not a disk refusal
    assert disk_failure(ValueError("x"), None) is None

"""Fuzz: a run whose disk fills at a random point. A small tmpfs (mounted by the test: root
only, else skipped with the reason) is filled to leave a random number of free bytes - from
none to more than the run writes - and the MLP runs with ``--out`` or ``build/runs`` on it, so
the disk runs out while a random file of the run is written (the executable, the listing, the
report, its plots).

Contract: exit 0 with a complete report (the run fitted), or exit 3 with one line naming the
file system's error and a path on it - never a traceback, never exit 4. ``make test`` runs
:data:`SAMPLE` cases (ISA); ``make fuzz`` 5% of FUZZ_CASES, every fourth on the RTL (tiny)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sim.app import session
from tests.fuzz.contract import assert_refused, campaign_size, rng_for, time_bound
from tests.unit.run.test_cli_errors import in_process
from tests.unit.run.test_full_disk import tmpfs

SAMPLE = 1
CASES = campaign_size(SAMPLE, 50)
DISK_KB = 512
#: The MLP's run directory on the ISA is about 220 KB: free space up to 300 KB covers every
#: file of it, and some runs fit.
MOST_FREE = 300 << 10
#: A case's bound: a tiny RTL build of its own (cold: 15 min on a busy 2-core machine) included.
CASE_SECONDS = 1800


def leave_free(root: Path, free: int) -> None:
    """Fill ``root`` until about ``free`` bytes are left (in 4 KiB pages)."""
    info = os.statvfs(root)
    size = max(0, info.f_bavail * info.f_frsize - free)
    with open(root / "filler", "wb") as handle:
        handle.write(b"\xa5" * size)


@pytest.mark.parametrize("case", range(CASES))
def test_a_disk_that_fills_during_a_run(case, tmp_path, capsys, monkeypatch) -> None:
    rng = rng_for("full_disk", case)
    free = int(rng.integers(0, MOST_FREE))
    backend = "rtl" if case % 4 == 3 else "isa"
    where = ("--out", "build/runs")[int(rng.integers(2))]
    what = f"case {case}: {where} on a disk with {free:,} bytes free, {backend}"
    with tmpfs(tmp_path / "disk", f"size={DISK_KB}k") as disk:
        leave_free(disk, free)
        args = ["--model", "mlp", "--config", "tiny", "--backend", backend]
        if where == "--out":
            out = disk / "run"
            args += ["--out", str(out)]
        else:
            (disk / "runs").mkdir()
            monkeypatch.setattr(session, "RUNS_ROOT", disk / "runs")
        with time_bound(CASE_SECONDS, what):
            result = in_process(capsys, *args)
        if result.returncode == 0:
            reports = list(disk.rglob("report.json"))
            assert len(reports) == 1, f"{what}: exit 0 without its report"
            assert json.loads(reports[0].read_text())["layers"], f"{what}: an empty report"
            return
        line = assert_refused(result, what, "No space left on device", codes=(3,))
        assert str(disk) in line, f"{what}: the line names no path on the disk: {line}"

"""Fuzz: SIGTERM, Ctrl-C (SIGINT to the process group, as a terminal sends it) or SIGKILL at a
random point of a small run of the command line - the MLP on the ISA simulator, in two Dask
shards (``--jobs 2``), or on the tiny RTL.

Contract: the CLI ends with the signal's exit code (143 and ``terminated``, 130 and
``interrupted``, killed by SIGKILL) - or 0 when the run ended first - never a traceback, even
while it still imports its modules (:mod:`sim.app.early_signals`); and
no process it started (the simulator, a build, a Dask worker: every descendant seen while it
ran) outlives it by more than :data:`GRACE_S`. ``make test`` runs :data:`SAMPLE` case (ISA,
SIGTERM); ``make fuzz`` 2% of FUZZ_CASES, every third on the RTL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fuzz.contract import campaign_size, rng_for
from tests.unit.build.test_lifeline import gone

SAMPLE = 1
CASES = campaign_size(SAMPLE, 20)
REPO = Path(__file__).resolve().parents[2]
GRACE_S = 2.0
#: The bound of one CLI run (a cold tiny RTL build included) after the signal.
RUN_BOUND_S = 900
SIGNALS = {
    "SIGTERM": (signal.SIGTERM, 143, "terminated"),
    "SIGINT": (signal.SIGINT, 130, "interrupted"),
    "SIGKILL": (signal.SIGKILL, -signal.SIGKILL, None),
}


def descendants(root: int) -> set[int]:
    """The processes below ``root`` now (from /proc's parent ids)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def run_and_signal(args: list[str], how: str, delay_s: float, tmp_path: Path):
    """Start the CLI, send ``how`` after ``delay_s`` seconds, wait for it; its result and
    every descendant seen while it ran."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim.app.cli", *args, "--out", str(tmp_path / "o")],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True,
    )  # fmt: skip
    seen: set[int] = set()
    end = time.monotonic() + delay_s
    while time.monotonic() < end and proc.poll() is None:
        seen |= descendants(proc.pid)
        time.sleep(0.05)
    number = SIGNALS[how][0]
    if proc.poll() is None:
        seen |= descendants(proc.pid)
        if how == "SIGINT":
            os.killpg(proc.pid, number)  # a terminal's Ctrl-C reaches the whole group
        else:
            proc.send_signal(number)
    _, err = proc.communicate(timeout=RUN_BOUND_S)
    return proc.returncode, err, seen


@pytest.mark.parametrize("case", range(CASES))
def test_a_signal_at_a_random_point_ends_every_process(case, tmp_path) -> None:
    rng = rng_for("signals", case)
    how = "SIGTERM" if case == 0 else list(SIGNALS)[int(rng.integers(len(SIGNALS)))]
    kind = ("isa", "isa --jobs 2", "rtl")[case % 3]
    delay_s = float(rng.uniform(1.0, 2.0 if case == 0 else 20.0))
    args = ["--model", "mlp", "--config", "tiny", "--backend", *kind.split()]
    what = f"case {case}: {how} after {delay_s:.1f} s of a {kind} run"
    code, err, seen = run_and_signal(args, how, delay_s, tmp_path)
    left = [pid for pid in seen if not gone(pid, within_s=GRACE_S)]
    for pid in left:  # (the test's own clean-up of what the CLI left)
        os.kill(pid, signal.SIGKILL)
    assert not left, f"{what}: {len(left)} process(es) outlived the CLI by {GRACE_S} s"
    assert "Traceback" not in err, f"{what}\n{err}"
    number, expected, line = SIGNALS[how]
    # (-number: the signal came as the interpreter exited after the run, its handlers gone;
    # a shell shows the same 128 + n)
    assert code in (0, expected, -number), f"{what}: exit {code}\n{err}"
    if code == expected and line is not None:
        assert err.strip().splitlines()[-1] == line, f"{what}\n{err}"


@pytest.mark.long
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_a_signal_while_the_cli_imports_is_one_line(how, tmp_path) -> None:
    """Ctrl-C or SIGTERM a second after the start, while numpy, onnx and Dask are imported:
    the run's own line and exit code (once a KeyboardInterrupt traceback and exit -2)."""
    args = ["--model", "mlp", "--config", "tiny", "--backend", "isa"]
    code, err, _seen = run_and_signal(args, how, 1.0, tmp_path)
    _number, expected, line = SIGNALS[how]
    assert (code, err.strip().splitlines()) == (expected, [line]), err

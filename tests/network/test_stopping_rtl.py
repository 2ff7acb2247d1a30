"""Ending an RTL run from outside (issue 44): SIGTERM, SIGKILL or Ctrl-C to the CLI ends its
simulator process at once, and a hook that blocks the simulator is stopped by its time bound,
named. The simulator's pid comes from a hook running inside it (so nothing is found by name).
(Ctrl-C ends the simulator too - the terminal sends SIGINT to its whole process group - and
``tests/unit/run/test_run_dirs.py`` checks the CLI's ``interrupted``.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from arch.config import PRESETS
from sim import knobs
from sim.backends.rtl import run_programs
from sim.verilate.build import SimulationFailed
from tests.instruction.bad_programs import END, Case, device_run
from tests.unit.build.test_lifeline import gone

pytestmark = pytest.mark.simulator

REPO = Path(__file__).resolve().parents[2]
BLOCKING_HOOK = """
import os, time
from pathlib import Path

async def hook(dut, ctx):
    Path(os.environ["PID_FILE"]).write_text(str(os.getpid()))
    time.sleep(120)  # holds the simulator (and the run) for two minutes
"""


@pytest.fixture
def blocking_hook(tmp_path):
    (tmp_path / "blocking_hook.py").write_text(BLOCKING_HOOK)
    return tmp_path


def wait_for(path: Path, proc: subprocess.Popen, within_s: float = 600) -> int:
    end = time.monotonic() + within_s
    while time.monotonic() < end and proc.poll() is None:
        if path.is_file() and path.read_text():
            return int(path.read_text())
        time.sleep(0.1)
    raise AssertionError(f"the simulator never started (CLI exit {proc.poll()})")


@pytest.mark.long
@pytest.mark.parametrize(
    ("how", "code", "line"),
    [
        (signal.SIGTERM, 143, "terminated"),
        (signal.SIGKILL, -signal.SIGKILL, None),
    ],
)
def test_ending_the_cli_ends_its_simulator(blocking_hook, how, code, line):
    pid_file = blocking_hook / "sim.pid"
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim.app.cli", "--model", "mlp", "--config", "tiny"]
        + ["--backend", "rtl", "--hooks", "blocking_hook", "--out", str(blocking_hook / "o")],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), str(blocking_hook)]),
            "PID_FILE": str(pid_file),
            knobs.HOOK_SECONDS.name: "300",
        },
    )
    simulator = wait_for(pid_file, proc)
    proc.send_signal(how)
    _, err = proc.communicate(timeout=60)
    try:
        assert gone(simulator, within_s=10), "the simulator outlived the CLI"  # (hook: 120 s)
    finally:
        if not gone(simulator, within_s=0):
            os.kill(simulator, signal.SIGKILL)
    assert proc.returncode == code, err
    assert "Traceback" not in err, err
    if line is not None:
        assert err.strip().splitlines()[-1] == line, err


def test_a_hook_that_blocks_the_simulator_is_stopped_and_named(blocking_hook, monkeypatch):
    monkeypatch.syspath_prepend(str(blocking_hook))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), str(blocking_hook)]))
    monkeypatch.setenv("PID_FILE", str(blocking_hook / "sim.pid"))
    monkeypatch.setenv(knobs.HOOKS.name, "blocking_hook")
    monkeypatch.setenv(knobs.HOOK_SECONDS.name, "1")
    with pytest.raises(SimulationFailed, match="hook 'blocking_hook' ran longer than its time"):
        run_programs(PRESETS["tiny"], [device_run(Case("just_end", [END]))], blocking_hook / "r")

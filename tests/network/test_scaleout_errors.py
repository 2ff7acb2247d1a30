"""Scale-out failures as one line (issue 44): ``make sweep`` with a model that does not compile
(exit 2, no Dask "Compute Failed" report, no traceback), the SLURM path of ``JOBS=`` run against
dask-jobqueue with stand-in ``sbatch``/``scancel`` that start the worker here, and Ctrl-C during
a sharded run (one line, no KeyboardInterrupt from a worker, its simulator ended) - also while
the workers still start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sim import knobs
from tests.fuzz.test_signal_fuzz import descendants
from tests.network.test_stopping_rtl import BLOCKING_HOOK, wait_for
from tests.unit.build.test_lifeline import gone
from tests.unit.run.test_cli_errors import one_op_model

pytestmark = pytest.mark.long

REPO = Path(__file__).resolve().parents[2]

SBATCH = """#!/bin/sh
# stand-in sbatch: the job script runs here, in a session of its own; its pid is the job id
setsid sh "$1" > /dev/null 2>&1 < /dev/null &
echo $! >> "{jobs}"
echo "Submitted batch job $!"
"""
SCANCEL = """#!/bin/sh
# stand-in scancel: ends each job's session (the script and the worker it started)
for job in "$@"; do kill -TERM -- "-$job" 2>/dev/null; done
exit 0
"""


def run(*args: str, env: dict[str, str], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
    )


def test_sweep_of_a_model_that_does_not_compile_is_one_line(tmp_path):
    model = one_op_model("LSTM", "encoder_lstm", tmp_path / "lstm.onnx")
    result = run(
        "sim.scaleout.sweep",
        "--models",
        str(model),
        "--configs",
        "tiny",
        "--out",
        str(tmp_path / "sweep"),
        env={},
    )
    output = result.stdout + result.stderr
    assert "Traceback" not in output and "Compute Failed" not in output, output
    assert result.returncode == 2, output
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert str(model) in line and "'encoder_lstm' (LSTM)" in line, line


def test_jobs_on_a_slurm_cluster(tmp_path):
    """``DASK_CLUSTER=slurm``: dask-jobqueue submits a job per worker to the stand-in
    ``sbatch``; the sharded run ends like the sequential one and no job outlives it."""
    bin_dir, jobs = tmp_path / "bin", tmp_path / "jobs.txt"
    bin_dir.mkdir()
    for name, text in (("sbatch", SBATCH.format(jobs=jobs)), ("scancel", SCANCEL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        knobs.CLUSTER.name: "slurm",
        "DASK_JOBQUEUE__SLURM__CORES": "1",
        "DASK_JOBQUEUE__SLURM__MEMORY": "1GB",
        "DASK_JOBQUEUE__SLURM__LOG_DIRECTORY": str(tmp_path / "logs"),
    }
    args = ("--model", "mlp", "--config", "tiny", "--backend", "isa", "--out", str(tmp_path / "o"))
    result = run("sim.app.cli", *args, "--jobs", "2", env=env)
    assert result.returncode == 0, result.stderr
    assert "shard 2/2 done" in result.stderr, result.stderr
    started = [int(pid) for pid in jobs.read_text().split()]
    assert len(started) == 2, started  # one job per worker, submitted through sbatch
    try:
        assert all(gone(pid, within_s=30) for pid in started), "a job outlived the run"
    finally:
        for pid in started:
            if not gone(pid, within_s=0):
                os.killpg(pid, signal.SIGKILL)


@pytest.mark.simulator
def test_ctrl_c_during_a_sharded_run_is_one_line(tmp_path):
    """Ctrl-C reaches the terminal's whole process group: the CLI and its Dask workers."""
    (tmp_path / "blocking_hook.py").write_text(BLOCKING_HOOK)
    pid_file = tmp_path / "sim.pid"
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim.app.cli", "--model", "mlp", "--config", "tiny"]
        + ["--backend", "rtl", "--hooks", "blocking_hook", "--jobs", "2"]
        + ["--out", str(tmp_path / "o")],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as a shell gives a job
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path)]),
            "PID_FILE": str(pid_file),
            knobs.HOOK_SECONDS.name: "300",
        },
    )
    simulator = wait_for(pid_file, proc)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    try:
        assert gone(simulator, within_s=30), "the simulator outlived the CLI"
    finally:
        if not gone(simulator, within_s=0):
            os.kill(simulator, signal.SIGKILL)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "interrupted", err


def _starting_worker(proc: subprocess.Popen, within_s: float = 300) -> set[int]:
    """Wait until the CLI has spawned a Dask worker process; the CLI's descendants then."""
    end = time.monotonic() + within_s
    while time.monotonic() < end and proc.poll() is None:
        below = descendants(proc.pid)
        for pid in below:
            try:
                if b"--multiprocessing-fork" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return below
            except OSError:
                continue
        time.sleep(0.02)
    raise AssertionError(f"no worker process started (CLI exit {proc.poll()})")


def test_ctrl_c_while_the_workers_start_is_one_line(tmp_path):
    """Ctrl-C half a second after Dask spawns a worker, while it imports (a second or more
    before its preload could ignore SIGINT): the workers start with SIGINT blocked, so the CLI
    alone takes it - once they printed ``Fatal Python error: init_import_site`` or a
    KeyboardInterrupt traceback (signal fuzz case 13)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim.app.cli", "--model", "mlp", "--config", "tiny"]
        + ["--backend", "isa", "--jobs", "2", "--out", str(tmp_path / "o")],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    seen = _starting_worker(proc)
    time.sleep(0.5)  # into the worker's imports (the CLI's modules: seconds)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    left = [pid for pid in seen if not gone(pid, within_s=2.0)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"{len(left)} process(es) outlived the CLI by 2 s"
    assert "Traceback" not in err and "Fatal Python error" not in err, err
    assert (proc.returncode, err.strip().splitlines()[-1]) == (130, "interrupted"), err

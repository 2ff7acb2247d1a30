"""Child processes tied to the CLI (sim/verilate/lifeline.py): a killed parent takes its child
with it, and a child that hangs after printing a fatal ``%Error`` (Verilator's VCD writer on a
full disk) is killed and quoted instead of blocking the run for good."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sim.verilate import lifeline

REPO = Path(__file__).resolve().parents[3]
FULL_DISK = "%Error: VerilatedVcd::bufferFlush: No space left on device"


def python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def gone(pid: int, within_s: float) -> bool:
    """Whether process ``pid`` has ended (or is a zombie) within ``within_s`` seconds."""
    end = time.monotonic() + within_s
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.05)


def test_a_child_stuck_after_a_fatal_error_is_killed_and_quoted(tmp_path, monkeypatch):
    monkeypatch.setattr(lifeline, "FATAL_GRACE_S", 0.5)
    log = tmp_path / "sim.log"
    code = f"import time; print('tick'); print({FULL_DISK!r}, flush=True); time.sleep(600)"
    with log.open("w") as out, pytest.raises(lifeline.ChildStuck) as caught:
        lifeline.run_child(python(code), cwd=tmp_path, env=None, stdout=out)
    assert FULL_DISK in str(caught.value)


@pytest.mark.parametrize("code", [3, 0])
def test_a_child_that_ends_after_an_error_gives_its_exit_code(tmp_path, code):
    log = tmp_path / "sim.log"
    script = f"import sys; print({FULL_DISK!r}); sys.exit({code})"
    with log.open("w") as out:
        assert lifeline.run_child(python(script), cwd=tmp_path, env=None, stdout=out) == code
    assert FULL_DISK in log.read_text()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_parent_takes_its_child_with_it(tmp_path, how):
    parent = subprocess.Popen(
        python(
            """
            import sys
            from sim.verilate import lifeline
            child = [sys.executable, "-c", "import os, time; print(os.getpid(), flush=True); "
                     "time.sleep(600)"]
            lifeline.run_child(child, cwd=".", env=None, stdout=None)
            """
        ),
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    parent.send_signal(how)
    parent.wait(timeout=60)
    try:
        assert gone(child, within_s=30), "the child outlived its parent"  # (it sleeps 600 s)
    finally:
        if not gone(child, within_s=0):
            os.kill(child, signal.SIGKILL)


def test_starting_a_child_runs_no_fork_handlers():
    """A child starts without fork(): fork runs every library's fork handlers, and OpenBLAS's
    deadlocks while another thread is inside numpy (``make test`` hung so in the ResNet-18 RTL
    run, whose reference computes on a thread while the simulator starts). Python's own
    before-fork hooks run exactly when the C ones do, so one is registered, in a process of its
    own, and must stay silent."""
    script = """
        import os, sys
        from sim.verilate import lifeline
        os.register_at_fork(before=lambda: print("fork handlers ran", flush=True))
        code = lifeline.run_child([sys.executable, "-c", "print('child ran')"], cwd=".",
                                  env=None, stdout=None)
        print("exit", code, flush=True)
        """
    result = subprocess.run(
        python(script),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.stdout.split("\n")[:2] == ["child ran", "exit 0"], result.stdout + result.stderr



@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT])
def test_a_killed_parent_takes_a_commands_own_children_too(tmp_path, how):
    """A build's make dies with the CLI, and with ``group`` so do the compilers make started
    (a SIGKILLed CLI once left a c++ and its cc1plus compiling for seconds: signal fuzz case
    14). The command here: a shell that starts a long sleep and waits for it."""
    pid_file = tmp_path / "sleep.pid"
    parent = subprocess.Popen(
        python(
            f"""
            from sim.verilate import lifeline
            shell = ["sh", "-c", "sleep 600 & echo $! > {pid_file}.new; mv {pid_file}.new {pid_file}; wait"]
            lifeline.run_child(shell, cwd=".", env=None, stdout=None, group=True)
            """
        ),
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    end = time.monotonic() + 60
    while not pid_file.is_file() and time.monotonic() < end:
        time.sleep(0.05)
    grandchild = int(pid_file.read_text())
    parent.send_signal(how)
    parent.wait(timeout=60)
    try:
        assert gone(grandchild, within_s=2), "the command's own child outlived the parent"
    finally:
        if not gone(grandchild, within_s=0):
            os.kill(grandchild, signal.SIGKILL)

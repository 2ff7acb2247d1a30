"""Child processes that die with their parent: the simulator a run starts and the Dask workers
a sharded run starts must not outlive a CLI that was killed (SIGTERM, SIGKILL) or interrupted.

Linux's ``PR_SET_PDEATHSIG`` asks the kernel to send a signal to a process when the thread that
started it ends (elsewhere :func:`die_with_parent` does nothing). :func:`run_child` runs one
such child and kills it on Ctrl-C or when it hangs after a fatal error.

The child asks for the signal itself, through a small exec wrapper (:data:`_TIED`), never
through ``preexec_fn``: that makes ``subprocess`` fork() this whole multi-threaded process and
run the fork handlers of every library in it, and OpenBLAS's (it joins its thread pool) deadlocks
when another thread is inside numpy at that moment - the main thread then waits in fork() holding
the GIL, the numpy thread waits for the GIL (the run reference of a large model computes on a
thread while the simulator starts). Without ``preexec_fn`` ``subprocess`` uses vfork/exec, which
runs no fork handlers.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _prctl() -> object | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when its parent ends (for ``preexec_fn`` of a
    child, or a worker process tying itself to the process that started it)."""
    if _PRCTL is None:
        return
    parent = os.getppid()
    _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # type: ignore[operator]
    if os.getppid() != parent:  # the parent ended before the request was made
        os.kill(os.getpid(), signal.SIGKILL)


#: The exec wrapper of :func:`tied`: asks for SIGKILL at its parent's end (or ends at once if
#: the parent is already gone), puts back the signal dispositions Python changed (exec keeps
#: ignored ones), then becomes the command. Standard library only, run isolated (``-I -S``).
_TIED = """
import ctypes, os, signal, sys
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
if os.getppid() != int(sys.argv[1]):
    os._exit(128 + signal.SIGKILL)
for name in ("SIGPIPE", "SIGXFSZ"):
    signal.signal(getattr(signal, name), signal.SIG_DFL)
os.execvp(sys.argv[2], sys.argv[2:])
"""


#: The exec wrapper of :func:`tied` for a command that starts processes of its own (make and
#: its compilers): PDEATHSIG can only reach the wrapper's own child, and a compiler whose make
#: was killed finishes its file (seconds to minutes). So the wrapper stays, runs the command in
#: a process group of its own (inheriting the wrapper's descriptors: the build lock) and asks
#: for a catchable SIGTERM at its parent's end; that, SIGINT or SIGHUP ends the whole group:
#: SIGTERM first (make deletes the files it was writing - a compiler SIGKILLed mid-write leaves
#: a truncated precompiled header that the next build trusts), SIGKILL a second later. A
#: signal that comes while the command starts is acted on once it has.
_TIED_GROUP = """
import ctypes, os, signal, subprocess, sys, time
group, ending = None, []
def end(signum, _frame):
    ending.append(signum)
    if group is not None:
        os.killpg(group, signal.SIGTERM)
        deadline = time.monotonic() + 1.0
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        os.killpg(group, signal.SIGKILL)
        os._exit(128 + signum)
for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(number, end)
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)
if os.getppid() != int(sys.argv[1]):
    os._exit(128 + signal.SIGKILL)
for name in ("SIGPIPE", "SIGXFSZ"):
    signal.signal(getattr(signal, name), signal.SIG_DFL)
child = subprocess.Popen(sys.argv[2:], process_group=0, close_fds=False)
group = child.pid
if ending:
    end(ending[0], None)
code = child.wait()
sys.exit(code if code >= 0 else 128 - code)
"""


def tied(cmd: Sequence[str], group: bool = False) -> list[str]:
    """``cmd`` run through :data:`_TIED` on Linux (the command itself elsewhere); ``group``:
    through :data:`_TIED_GROUP`, for a command whose own children must end with it."""
    if _PRCTL is None:
        return list(cmd)
    wrapper = _TIED_GROUP if group else _TIED
    return [sys.executable, "-I", "-S", "-c", wrapper, str(os.getpid()), *cmd]


#: How long a simulator that printed a fatal ``%Error`` may take to exit before it is killed:
#: Verilator's fatal path can block for good (its VCD writer, on a full disk, waits on a lock it
#: holds itself).
FATAL_GRACE_S = 3.0
_FATAL_MARK = b"%Error"


class ChildStuck(RuntimeError):
    """A child process printed a fatal error and did not exit; it was killed."""


def run_child(
    cmd: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    env: Mapping[str, str] | None,
    stdout: IO[str] | None,
    pass_fds: Sequence[int] = (),
    group: bool = False,
) -> int:
    """Run ``cmd`` to its end (its exit code), tied to this process (:func:`tied`; ``group``:
    with every process it starts); Ctrl-C kills it. When ``stdout`` is a file, a child that
    writes a fatal ``%Error`` line there and is still running :data:`FATAL_GRACE_S` later is
    killed: :class:`ChildStuck` quotes the line."""
    proc = subprocess.Popen(
        tied(cmd, group),
        cwd=cwd,
        env=env,
        stdout=stdout,
        stderr=None if stdout is None else subprocess.STDOUT,
        pass_fds=tuple(pass_fds),
    )
    log = _log_path(stdout)
    fatal: tuple[str, float] | None = None
    try:
        while True:
            try:
                return proc.wait(timeout=0.25)
            except subprocess.TimeoutExpired:
                pass
            if log is not None and fatal is None:
                line = _fatal_line(log)
                fatal = (line, time.monotonic()) if line else None
            if fatal is not None and time.monotonic() - fatal[1] > FATAL_GRACE_S:
                _end(proc, group)
                raise ChildStuck(
                    f"the simulator stopped responding after {fatal[0]!r} and was killed"
                )
    except BaseException:
        if proc.poll() is None:  # Ctrl-C, or any failure here: the child goes too
            _end(proc, group)
        raise


def _end(proc: subprocess.Popen[bytes], group: bool) -> None:
    """End a child of :func:`run_child`: SIGKILL; a :data:`_TIED_GROUP` wrapper SIGTERM first
    (it then ends its group), SIGKILL if it is still there a second later."""
    if group:
        proc.terminate()
        try:
            proc.wait(timeout=1.0)
            return
        except subprocess.TimeoutExpired:
            pass
    proc.kill()
    proc.wait()


def _log_path(stdout: IO[str] | None) -> Path | None:
    name = getattr(stdout, "name", None)
    return Path(name) if isinstance(name, str) and Path(name).is_file() else None


def _fatal_line(log: Path) -> str | None:
    """The first fatal ``%Error`` line of the log's last 64 KiB, if any."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - 65536))
            tail = f.read()
    except OSError:
        return None
    at = tail.find(_FATAL_MARK)
    if at < 0:
        return None
    return tail[at:].split(b"\n", 1)[0].decode(errors="replace").strip()

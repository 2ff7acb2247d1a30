"""Ending a run from outside: SIGTERM is handled like Ctrl-C (the run's simulators and workers
are stopped, one line is printed), so ``kill <pid>`` leaves nothing running behind it."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

#: Exit codes as a shell reports a process ended by the signal: 128 + its number.
INTERRUPTED = 128 + signal.SIGINT
TERMINATED = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM."""


def _terminate(_signum: int, _frame: object) -> None:
    raise Terminated


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block SIGTERM raises :class:`Terminated` in the main thread (elsewhere the
    block runs as it would)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def ending(exc: KeyboardInterrupt) -> tuple[int, str]:
    """The exit code and line of a run ended by Ctrl-C or SIGTERM."""
    if isinstance(exc, Terminated):
        return TERMINATED, "terminated"
    return INTERRUPTED, "interrupted"

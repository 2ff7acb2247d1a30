"""Work a run does on the other core while the main thread waits for the simulator."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


def in_background(name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Future[T]:
    """``fn(*args, **kwargs)`` in a new daemon thread; its result or exception in the future.

    A daemon thread: nothing waits for it at exit, so Ctrl-C is not held up by it (a pool's
    threads are joined at exit)."""
    future: Future[T] = Future()

    def work() -> None:
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever asks the future
                future.set_exception(exc)

    threading.Thread(target=work, name=name, daemon=True).start()
    return future


#: Nice value of the run's side work while shards hold every core (see :func:`lower_priority`).
SIDE_WORK_NICE = 19


def lower_priority() -> None:
    """Run the calling thread at a lower priority (Linux: its own nice value), so side work -
    accuracy comparisons during a sharded run - takes what the shards' simulators leave of the
    cores instead of slowing them. Elsewhere a no-op."""
    if sys.platform.startswith("linux"):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), SIDE_WORK_NICE)

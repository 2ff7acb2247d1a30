"""Work a run does on the other core while the main thread waits for the simulator."""

from __future__ import annotations

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

"""Every test leaves the process as it found it: the signal handlers and the SIGALRM timer that
time bounds and Ctrl-C handling install, and onnxruntime's time bound (a test that changes one
fails, naming it, and the state is put back). An xdist worker runs hundreds of tests in one
process; what one leaves armed would stop or stall a later one.

The tiny accelerator's RTL runs with its assertions compiled in (``COSIM_ASSERT=tiny`` unless
set; issue #41): the instruction regression and the tiny network runs check the stream rules and
token counters every cycle, in the one tiny build ``make test`` has. ``make coverage`` keeps its
instrumented builds plain (its tables read the committed RTL)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator

import pytest

from sim import knobs

if not knobs.COVERAGE.get():
    os.environ.setdefault(knobs.ASSERT.name, "tiny")

WATCHED = (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)


def _host_bound() -> float | None:
    runtime = sys.modules.get("arch.host_runtime")  # (only when a test imported it)
    return None if runtime is None else runtime._BOUND["seconds"]


@pytest.fixture(autouse=True)
def leaves_no_signal_state() -> Iterator[None]:
    handlers = {sig: signal.getsignal(sig) for sig in WATCHED}
    yield
    left = []
    for sig, handler in handlers.items():
        if signal.getsignal(sig) is not handler:
            left.append(f"the {sig.name} handler")
            signal.signal(sig, handler)
    if signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0):
        left.append("a SIGALRM timer")
        signal.setitimer(signal.ITIMER_REAL, 0)
    runtime = sys.modules.get("arch.host_runtime")
    if runtime is not None and _host_bound() != runtime.DEFAULT_TIME_BOUND_S:
        left.append(f"onnxruntime's time bound of {_host_bound()} s")
        runtime.set_time_bound(runtime.DEFAULT_TIME_BOUND_S)
    if left:
        pytest.fail(f"the test left {', '.join(left)} behind (restore it in a fixture)")

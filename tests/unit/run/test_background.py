"""Work overlapped with the simulator (sim/runtime/background.py, sim/app/session.py): results and
failures
come back as if it had run in line, and the ISA run's failure is the one reported."""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import Future

import pytest

from sim.app.session import first_failure
from sim.runtime.background import SIDE_WORK_NICE, in_background, lower_priority
from sim.runtime.run import RunError


def test_result_and_exception_come_back() -> None:
    assert in_background("t", lambda a, b=0: a + b, 2, b=3).result(timeout=60) == 5
    with pytest.raises(KeyError, match="lost"):
        in_background("t", lambda: {}["lost"]).result(timeout=60)


def test_the_thread_is_a_daemon_not_waited_for_at_exit() -> None:
    seen: list[bool] = []
    done = in_background("t", lambda: seen.append(threading.current_thread().daemon))
    done.result(timeout=60)
    assert seen == [True]


def test_the_isa_runs_failure_is_said_first() -> None:
    rtl = RunError("rtl: stopped")
    isa: Future = Future()
    isa.set_exception(RunError("isa: stopped"))
    assert str(first_failure(isa, rtl)) == "isa: stopped"
    fine: Future = Future()
    fine.set_result(None)
    assert first_failure(fine, rtl) is rtl
    assert first_failure(None, rtl) is rtl


@pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="only Linux gives a thread its own nice value; elsewhere lower_priority is a no-op",
)
def test_side_work_of_a_sharded_run_lowers_only_its_own_thread() -> None:
    """The pool thread that compares accuracy during a sharded run yields the cores to the
    shards' simulators: its nice value rises, the calling thread's does not."""

    def lowered() -> tuple[int, int]:
        before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        lower_priority()
        return before, os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    before, after = in_background("side", lowered).result(timeout=60)
    assert before == mine and after == SIDE_WORK_NICE
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine

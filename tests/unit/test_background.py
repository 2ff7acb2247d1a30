"""Work overlapped with the simulator (sim/background.py, sim/cli.py): results and failures
come back as if it had run in line, and the ISA run's failure is the one reported."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from sim.background import in_background
from sim.cli import first_failure
from sim.run import RunError


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

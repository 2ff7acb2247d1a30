"""The RTL and the ISA simulator stop a bad program the same way: same error code at the same
instruction, or both finish. Directed cases (issue #19: a deadlock before an illegal word, a
misaligned program, a descriptor table past DRAM, a program of only END, END with a token
flag, a LOAD-queue SYNC with no descriptors) and random valid and invalid programs drawn by
hypothesis, on the tiny config."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arch.config import PRESETS
from sim.backends.rtl import run_programs
from tests.instruction.bad_programs import device_run, directed, isa_outcome, programs, rtl_outcome

pytestmark = pytest.mark.simulator

TINY = PRESETS["tiny"]


def test_directed_cases_stop_alike(tmp_path):
    cases = directed(TINY)
    results = run_programs(TINY, [device_run(case) for case, _ in cases.values()], tmp_path)
    for (name, (case, expected)), result in zip(cases.items(), results, strict=True):
        assert isa_outcome(TINY, case) == expected, f"{name}: ISA simulator"
        assert rtl_outcome(result) == expected, f"{name}: RTL"


@settings(
    max_examples=16,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(programs(TINY), min_size=24, max_size=24))
def test_random_programs_stop_alike(tmp_path_factory, batch):
    """24 programs per simulator run; each must end the same way on both."""
    directory = tmp_path_factory.mktemp("batch")
    results = run_programs(TINY, [device_run(case) for case in batch], directory)
    outcomes = [
        (case, isa_outcome(TINY, case), rtl_outcome(r))
        for case, r in zip(batch, results, strict=True)
    ]
    wrong = [f"{c.name} {c.words} {c.descs}: ISA {i}, RTL {r}" for c, i, r in outcomes if i != r]
    assert not wrong, "\n".join(wrong)

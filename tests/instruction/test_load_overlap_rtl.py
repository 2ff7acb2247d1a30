"""The load unit's overlap on the RTL: a LOAD retires once its lines are requested and its
token rides on its last line (hdl_gen/load_unit.py). Two programs of LOADs that each push a
token, more of them than the LOAD->COMPUTE counter holds (tiny: 4):

- the compute queue is busy with a long GEMM while the LOADs land, so the fifth token finds the
  counter full: its line must wait for room (a line that pushed anyway would overflow the
  counter - lost tokens, DEADLOCK), and the run ends as the ISA simulator says: done;
- the compute queue never pops (it waits for the STORE queue, which waits for it): the run
  stops with DEADLOCK naming the fifth LOAD - the one whose token has no room - as the ISA
  simulator does (there that LOAD cannot start; on the RTL its line waits to be written).
"""

from __future__ import annotations

import pytest

from arch.config import PRESETS
from sim.backends.rtl import run_programs
from tests.instruction.bad_programs import (
    END,
    Case,
    act_load,
    device_run,
    isa_outcome,
    rtl_outcome,
    word,
)

pytestmark = pytest.mark.simulator

TINY = PRESETS["tiny"]
LOADS = 2 * TINY.token_depth  # twice what the counter holds


def _loads() -> list[int]:
    return [word("load", "push_next", desc=0)] * LOADS


def _compute_busy_first() -> Case:
    # about 4 x 210 array cycles with no token: the LOADs land meanwhile
    gemm = word("gemm", m=200, k_iter=1, n_iter=4, acc_n_stride=200)
    pops = [word("sync", "pop_prev", queue="COMPUTE")] * LOADS
    return Case("compute_busy_first", [*_loads(), gemm, *pops, END], [act_load(TINY, 3)])


def _never_popped() -> Case:
    wait_store = word("sync", "pop_next", queue="COMPUTE")
    wait_compute = word("sync", "pop_prev", queue="STORE")
    return Case("never_popped", [*_loads(), wait_store, wait_compute, END], [act_load(TINY, 3)])


def test_a_token_that_finds_the_counter_full_waits_on_its_line(tmp_path):
    cases = [_compute_busy_first(), _never_popped()]
    results = run_programs(TINY, [device_run(case) for case in cases], tmp_path)
    got = [rtl_outcome(r) for r in results]
    want = [isa_outcome(TINY, case) for case in cases]
    assert got == want
    # independently of the ISA simulator: the first runs to END; the second stops at the
    # first LOAD past the counter's depth (program index = its position)
    assert want == [("done", None), ("DEADLOCK", TINY.token_depth)]

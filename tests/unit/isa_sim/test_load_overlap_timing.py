"""The ISA simulator's timing of the LOAD queue: a LOAD holds the queue while it requests its
lines, its DRAM latency overlaps the next instruction, its token leaves when its last line has
landed, and a SYNC in the LOAD queue waits for every line (hdl_gen/load_unit.py does the same).
Expected cycles are worked out by hand from the config's latency and bus width."""

from __future__ import annotations

import pytest

from arch import asm
from arch.config import PRESETS
from sim.backends.isa_machine import run_program

TINY = PRESETS["tiny"]
LINES = 6
DESC = (
    ".desc mem=ACT dram_base=0x2000 loops[0].count=1 loops[1].count=1 loops[2].count=1 "
    f"loops[3].count={LINES} loops[3].dram_stride={TINY.act_line_bytes} loops[3].local_stride=1\n"
)


def _run(body: str):
    return run_program(TINY, asm.assemble(DESC + body + "end")).stats


def _issue() -> int:
    """Cycles a LOAD of LINES lines holds the queue: a beat per bus word of each line."""
    return LINES * -(-TINY.act_line_bytes // TINY.dram_bytes_per_cycle)


def test_loads_in_a_row_pay_the_dram_latency_once() -> None:
    stats = _run("load desc=0\nload desc=0\nload desc=0 +push_next\nsync queue=COMPUTE +pop_prev\n")
    issue, latency = _issue(), TINY.dram_latency
    assert latency > 1 and issue > 1
    # LOAD k requests from k * issue on; the third lands at latency + 3 * issue, then the SYNC
    assert stats.ideal_cycles == latency + 3 * issue + 1  # was 3 * (latency + issue) + 1
    assert stats.busy["LOAD"] == 3 * issue
    compute = [s for s in stats.spans if s.unit == "compute"]
    assert [s.start for s in compute] == [latency + 3 * issue]


@pytest.mark.parametrize("pushes", [False, True])
def test_a_load_queue_sync_waits_for_the_lines_on_their_way(pushes: bool) -> None:
    """Its token - or the LOAD's own - leaves when the LOAD's last line has landed, not when
    the LOAD retired from the queue."""
    load = "load desc=0 +push_next\n" if pushes else "load desc=0\nsync queue=LOAD +push_next\n"
    stats = _run(load + "sync queue=COMPUTE +pop_prev\n")
    landed = TINY.dram_latency + _issue()
    compute = [s for s in stats.spans if s.unit == "compute"]
    assert [s.start for s in compute] == [landed + (0 if pushes else 1)]
    sync = [s for s in stats.spans if s.unit == "load" and s.opcode.name == "SYNC"]
    assert [s.start for s in sync] == ([] if pushes else [landed])

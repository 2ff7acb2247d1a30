"""The ISA simulator's timing of the LOAD and STORE queues: a LOAD holds the queue while it
requests its lines, its DRAM latency overlaps the next instruction, its token leaves when its
last line has landed, and a SYNC in the LOAD queue waits for every line (hdl_gen/load_unit.py
does the same); a unit reads its queue head's descriptor ahead (hdl_gen/desc_fetch.py).
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


def _descriptor() -> int:
    """Cycles to read a descriptor: the DRAM latency, then its 64 bytes' beats."""
    return TINY.dram_latency + 64 // TINY.dram_bytes_per_cycle


def test_loads_in_a_row_pay_the_dram_latency_once() -> None:
    """The unit reads the next LOAD's descriptor while this one requests its lines: the
    descriptors are read back to back (each longer than a LOAD's requests here), each LOAD's
    requests start when its descriptor is in, and only the last LOAD's data latency shows."""
    stats = _run("load desc=0\nload desc=0\nload desc=0 +push_next\nsync queue=COMPUTE +pop_prev\n")
    issue, latency, desc = _issue(), TINY.dram_latency, _descriptor()
    assert latency > 1 and desc > issue > 1
    # LOAD k requests from (k + 1) * desc on; the third lands at 3 * desc + issue + latency
    assert stats.ideal_cycles == 3 * desc + issue + latency + 1
    assert stats.busy["LOAD"] == 3 * desc + issue  # the first waits desc, the others desc - issue
    compute = [s for s in stats.spans if s.unit == "compute"]
    assert [s.start for s in compute] == [3 * desc + issue + latency]
    starts = [s.start for s in stats.spans if s.opcode.name == "LOAD"]
    assert starts == [0, desc + issue, 2 * desc + issue]  # each starts when the last retires


def test_a_store_reads_its_descriptor_while_it_waits_for_its_token() -> None:
    """A STORE at the STORE queue's head reads its descriptor ahead: waiting for its token
    from the compute queue longer than a descriptor read, it writes at once (its lines' beats);
    the same STORE not kept waiting reads its descriptor first."""
    store = (
        ".desc mem=ACC dram_base=0x3000 loops[0].count=1 loops[1].count=1 loops[2].count=1 "
        f"loops[3].count=2 loops[3].dram_stride={TINY.out_line_bytes} loops[3].local_stride=1\n"
    )
    body = DESC + store + "load desc=0 +push_next\n"
    waited = run_program(
        TINY,
        asm.assemble(body + "sync queue=COMPUTE +pop_prev +push_next\nstore desc=1 +pop_prev\nend"),
    ).stats
    at_once = run_program(TINY, asm.assemble(body + "store desc=1\nend")).stats
    beats = 2 * -(-TINY.out_line_bytes // TINY.dram_bytes_per_cycle)
    (kept,) = [s for s in waited.spans if s.opcode.name == "STORE"]
    (first,) = [s for s in at_once.spans if s.opcode.name == "STORE"]
    assert kept.start > _descriptor() and kept.cycles == beats
    assert first.start == 0 and first.cycles == _descriptor() + beats


@pytest.mark.parametrize("pushes", [False, True])
def test_a_load_queue_sync_waits_for_the_lines_on_their_way(pushes: bool) -> None:
    """Its token - or the LOAD's own - leaves when the LOAD's last line has landed, not when
    the LOAD retired from the queue."""
    load = "load desc=0 +push_next\n" if pushes else "load desc=0\nsync queue=LOAD +push_next\n"
    stats = _run(load + "sync queue=COMPUTE +pop_prev\n")
    landed = _descriptor() + TINY.dram_latency + _issue()
    compute = [s for s in stats.spans if s.unit == "compute"]
    assert [s.start for s in compute] == [landed + (0 if pushes else 1)]
    sync = [s for s in stats.spans if s.unit == "load" and s.opcode.name == "SYNC"]
    assert [s.start for s in sync] == ([] if pushes else [landed])

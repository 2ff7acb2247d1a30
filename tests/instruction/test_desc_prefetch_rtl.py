"""Descriptors read ahead on the RTL (hdl_gen/desc_fetch.py): the load and store units read
their queue head's descriptor while the instruction before it runs, or while it waits for its
token, so back-to-back LOADs request their lines without a descriptor read between them and a
STORE kept waiting for its token writes at once.

Measured on the RTL's own timeline (each instruction's busy cycles) against the lines' beats,
and every DRAM byte equal to the ISA simulator's (each LOAD and STORE its own descriptor: a
descriptor used for the wrong instruction moves the wrong lines). Without the read ahead each
LOAD and the STORE would take a descriptor read (the DRAM latency and its beats) longer."""

from __future__ import annotations

import numpy as np
import pytest

from arch import isa
from arch.config import PRESETS
from sim.backends.pyverilator import run_programs
from tests.instruction.rtl_compare import Outcome, assert_same_dram, prepare
from tests.programs import Builder

pytestmark = pytest.mark.simulator

LOADS = 4
SLACK = 4  # RTL cycles a LOAD or STORE may take past its beats (the frame around it)


def _descriptor(config) -> int:
    return isa.descriptor_read_cycles(config.dram_latency, config.dram_bytes_per_cycle)


def _program(config, rng: np.random.Generator) -> tuple[Builder, int, int]:
    """LOADS ACT LOADs in a row of lines enough that each's requests outlast a descriptor
    read, an ACCUM of the last one's first lines, and a STORE that waits for it. (program, a
    LOAD's beats, the STORE's beats)."""
    b = Builder(config)
    d = b.dim
    line = config.act_line_bytes
    beats_per_line = -(-line // config.dram_bytes_per_cycle)
    lines = -(-(_descriptor(config) + 8) // beats_per_line)
    src = b.put(rng.integers(-128, 128, LOADS * lines * line).astype(np.int8))
    b.load_params(b.put_params(bias=rng.integers(-50, 50, d), mult=np.full(d, 1 << 14),
                               shift=np.full(d, 15), res_mult=np.full(d, 1 << 14),
                               res_shift=np.full(d, 14)), 1)  # fmt: skip
    for k in range(LOADS):
        b.load_lines("ACT", k * lines, src + k * lines * line, lines, line)
    b.accumulate_lines(src + (LOADS - 1) * lines * line, m=2)
    out = b.empty(1, 2, d)
    store = b.desc("ACC", 0, out.addr, [(2, d, 1)])
    b.emit("store", "pop_prev", desc=store, param_addr=0, clamp_lo=-128, clamp_hi=127, use_bias=0)
    return b, lines * beats_per_line, 2 * -(-d // config.dram_bytes_per_cycle)


@pytest.mark.parametrize("config_name", ["tiny", "default"])
def test_descriptors_are_read_ahead(config_name, tmp_path) -> None:
    config = PRESETS[config_name]
    program, load_beats, store_beats = _program(config, np.random.default_rng(23))
    prepared = prepare(config, "read_ahead", program)
    (rtl,) = run_programs(config, [prepared.run], timeline=tmp_path / "events.txt")
    guard = prepared.guard
    assert prepared.isa is not None and prepared.isa_error is None and rtl.done
    assert_same_dram(Outcome("read_ahead", rtl, prepared.isa, None, guard.size, guard))
    desc, desc_beats = (
        _descriptor(config),
        isa.descriptor_beats(config.dram_bytes_per_cycle),
    )
    assert load_beats > desc > desc_beats + SLACK  # (a descriptor read that showed would fail)
    spans = {s.index: s for s in rtl.spans}
    act = [spans[i] for i in range(1, LOADS + 1)]  # (instruction 0 loads PARAM)
    assert all(s.opcode.name == "LOAD" for s in act)
    # Each ACT LOAD after the first reads its descriptor while the one before requests its
    # lines (the descriptor's beats taking the bus from them).
    for s in act[1:]:
        assert s.cycles <= load_beats + desc_beats + SLACK, (s.index, s.cycles, load_beats)
    (store,) = [s for s in rtl.spans if s.opcode.name == "STORE"]
    assert store.cycles <= store_beats + SLACK + 2, (store.cycles, store_beats)

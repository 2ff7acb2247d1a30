"""The RTL's timeline (sim/backends/rtl_timeline.py, the events of sim/hdl/tb_top.v) on a small
network: valid trace-event JSON, every instruction once with the opcode the program holds, no
unit running two instructions at a time, each unit's busy time equal to the RTL's own busy
counters, the DRAM bytes of the stores equal to the write counter, token queues within their
depth - and the RTL's own timing, not the ISA simulator's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from arch import isa
from arch.config import PRESETS
from compiler.compile import compile_model
from sim.runtime.run import run
from sim.runtime.timeline import busy_cycles, trace
from tests.unit.run.test_timeline import check_trace_event_format


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    exe = compile_model("cnn", PRESETS["tiny"], image_size=16, seed=3).executable
    x = np.random.default_rng(4).standard_normal(exe.input.shape).astype(np.float32)
    workdir = tmp_path_factory.mktemp("rtl")
    return exe, run(exe, x, "rtl", workdir=workdir), run(exe, x, "isa")


def program_opcodes(program) -> list[isa.Opcode]:
    base, count = program.launch.insn_base, program.instructions
    words = [
        int.from_bytes(program.image[a : a + isa.INSN_BYTES].tobytes(), "little")
        for a in range(base, base + count * isa.INSN_BYTES, isa.INSN_BYTES)
    ]
    return [isa.decode_insn(word, i).opcode for i, word in enumerate(words)]


@pytest.mark.simulator
def test_rtl_timeline_busy_time_is_the_rtl_counters(ran):
    exe, result, ideal = ran
    assert result.bit_exact
    [timeline] = result.timeline
    [program] = exe.programs
    busy = busy_cycles(timeline.spans)
    counted = {unit: result.counters[f"{unit}_busy"] for unit in ("load", "compute", "store")}
    assert set(busy) == set(counted)
    for unit, cycles in counted.items():
        assert cycles > 0 and abs(busy[unit] - cycles) <= 0.01 * cycles, unit
    # the RTL's own timing: the ISA simulator's model of the same program differs
    [isa_timeline] = ideal.timeline
    assert busy != busy_cycles(isa_timeline.spans)
    assert max(s.start + s.cycles for s in timeline.spans) <= result.cycles
    opcodes = program_opcodes(program)
    assert sorted(s.index for s in timeline.spans) == [
        i for i, op in enumerate(opcodes) if op is not isa.Opcode.END
    ]
    assert all(opcodes[s.index] is s.opcode for s in timeline.spans)
    for unit in ("load", "compute", "store"):
        mine = sorted((s.start, s.start + s.cycles) for s in timeline.spans if s.unit == unit)
        assert all(end <= start for (_, end), (start, _) in zip(mine, mine[1:], strict=False))
    # only stores write DRAM: their bytes are the write counter's
    stored = sum(s.dram_bytes for s in timeline.spans if s.unit == "store")
    assert stored == result.counters["dram_write_bytes"] > 0
    loaded = sum(s.dram_bytes for s in timeline.spans if s.unit == "load")
    assert 0 < loaded <= result.counters["dram_read_bytes"]


@pytest.mark.simulator
def test_rtl_timeline_is_a_valid_trace_with_tokens_and_layer_markers(ran):
    exe, result, _ideal = ran
    doc = json.loads(json.dumps(trace(result.timeline)))
    check_trace_event_format(doc)
    depths: dict[str, list[int]] = {}
    for event in doc["traceEvents"]:
        if event["ph"] == "C" and event["name"].startswith("tokens "):
            depths.setdefault(event["name"], []).append(event["args"]["tokens"])
    assert len(depths) == 4
    for series in depths.values():
        assert min(series) >= 0 and max(series) <= exe.config.token_depth and series[-1] == 0
    markers = [e["args"]["layer"] for e in doc["traceEvents"] if e["ph"] == "i"]
    assert markers == [layer.name for layer in exe.programs[0].layers]


@pytest.mark.simulator
def test_pyverilator_writes_the_same_timeline_as_the_cocotb_run(ran, tmp_path):
    exe, result, _ideal = ran
    x = np.random.default_rng(4).standard_normal(exe.input.shape).astype(np.float32)
    pyv = run(exe, x, "pyverilator", workdir=tmp_path)
    assert pyv.bit_exact and pyv.counters == result.counters
    [mine], [theirs] = pyv.timeline, result.timeline
    assert mine.spans and mine.spans == theirs.spans and mine.tokens == theirs.tokens
    busy = busy_cycles(mine.spans)
    assert all(busy[unit] == pyv.counters[f"{unit}_busy"] for unit in busy)
    assert (tmp_path / "timeline.txt").is_file()

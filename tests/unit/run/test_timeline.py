"""timeline.json: the instruction-level timeline of a run, in the Chrome trace-event format that
Perfetto UI opens - checked against the format's rules, and against the run itself: every
instruction once, no unit running two at a time, busy cycles equal to the run's counters, token
queues within their depth, one marker per layer."""

from __future__ import annotations

import json
import os
from collections import Counter

import numpy as np
import pytest

from arch import isa
from arch.config import PRESETS
from arch.isa import Opcode
from compiler.compile import compile_model
from sim.app import open_timeline
from sim.backends import rtl_timeline
from sim.backends.isa_results import Span, TokenMove
from sim.runtime.run import run
from sim.runtime.timeline import TRACKS, busy_cycles, trace
from tests.unit.run.test_cli_errors import in_process

PHASES = {"X", "M", "C", "i"}


@pytest.fixture(scope="module")
def ran():
    exe = compile_model("cnn", PRESETS["tiny"], seed=2).executable
    x = np.random.default_rng(2).standard_normal(exe.input.shape).astype(np.float32)
    return exe, run(exe, x, "isa")


def check_trace_event_format(doc: dict) -> None:
    """The rules of the trace-event format (its JSON Object Format) that viewers rely on."""
    assert set(doc) >= {"traceEvents"} and isinstance(doc["traceEvents"], list)
    assert doc.get("displayTimeUnit", "ms") in ("ms", "ns")
    for event in doc["traceEvents"]:
        assert event["ph"] in PHASES, event
        assert isinstance(event["name"], str) and isinstance(event["pid"], int), event
        if event["ph"] == "M":
            assert event["name"] in ("process_name", "thread_name", "thread_sort_index"), event
            assert isinstance(event["args"], dict), event
            assert "tid" in event or event["name"] == "process_name", event
            continue
        assert isinstance(event["ts"], int) and event["ts"] >= 0, event
        if event["ph"] == "X":
            assert isinstance(event["dur"], int) and event["dur"] >= 0, event
            assert isinstance(event["tid"], int), event
        if event["ph"] == "C":  # counters: numeric series
            assert event["args"] and all(isinstance(v, int) for v in event["args"].values())
        if event["ph"] == "i":
            assert event["s"] in ("g", "p", "t"), event


def test_timeline_is_valid_trace_event_json(ran):
    _exe, result = ran
    doc = json.loads(json.dumps(trace(result.timeline)))
    check_trace_event_format(doc)
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert names == set(TRACKS)


def test_every_instruction_once_and_no_unit_runs_two_at_a_time(ran):
    exe, result = ran
    [timeline] = result.timeline
    [program] = exe.programs
    words = [
        int.from_bytes(program.image[a : a + isa.INSN_BYTES].tobytes(), "little")
        for a in range(
            program.launch.insn_base,
            program.launch.insn_base + program.instructions * isa.INSN_BYTES,
            isa.INSN_BYTES,
        )
    ]
    opcodes = [isa.decode_insn(word, i).opcode for i, word in enumerate(words)]
    spans = timeline.spans
    assert sorted(s.index for s in spans) == [
        i for i, op in enumerate(opcodes) if op is not isa.Opcode.END
    ]
    assert all(opcodes[s.index] is s.opcode for s in spans)
    for unit in ("load", "compute", "store"):
        mine = sorted((s.start, s.start + s.cycles) for s in spans if s.unit == unit)
        assert all(end <= start for (_, end), (start, _) in zip(mine, mine[1:], strict=False))


def test_busy_time_per_unit_is_the_runs_counters(ran):
    _exe, result = ran
    [timeline] = result.timeline
    busy = busy_cycles(timeline.spans)
    assert {k.upper(): v for k, v in busy.items()} == result.counters["busy"]
    doc = trace(result.timeline)
    sliced = Counter()
    for event in doc["traceEvents"]:
        if event["ph"] == "X":
            sliced[event["cat"]] += event["dur"]
    assert dict(sliced) == busy
    # the last slice ends when the run ends (the ideal model's cycles)
    assert max(s.start + s.cycles for s in timeline.spans) == result.cycles


def test_token_queues_stay_within_their_depth_and_layers_are_marked(ran):
    exe, result = ran
    doc = trace(result.timeline)
    depths: dict[str, list[int]] = {}
    for event in doc["traceEvents"]:
        if event["ph"] == "C" and event["name"].startswith("tokens "):
            depths.setdefault(event["name"], []).append(event["args"]["tokens"])
    assert depths, "no token counter"
    for series in depths.values():
        assert min(series) >= 0 and max(series) <= exe.config.token_depth
        assert series[-1] == 0  # every pushed token was popped
    markers = [e["args"]["layer"] for e in doc["traceEvents"] if e["ph"] == "i"]
    assert markers == [layer.name for layer in exe.programs[0].layers]
    in_flight = [e["args"]["bytes"] for e in doc["traceEvents"] if e["name"].startswith("DRAM")]
    assert min(in_flight) >= 0 and in_flight[-1] == 0 and max(in_flight) > 0


def test_a_run_directory_holds_the_timeline(tmp_path, capsys):
    done = in_process(capsys, "--model", "mlp", "--config", "tiny", "--out", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    [path] = (tmp_path / "o").glob("timeline.json")
    check_trace_event_format(json.loads(path.read_text()))
    assert f"timeline: {path}" in done.stdout


def test_make_timeline_names_the_newest_runs_timeline(tmp_path, capsys):
    old, new = tmp_path / "a" / "timeline.json", tmp_path / "b" / "timeline.json"
    for n, path in enumerate((old, new)):
        path.parent.mkdir()
        path.write_text("{}")
        os.utime(path, (1_000_000 + n, 1_000_000 + n))
    assert open_timeline.main([], root=tmp_path) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == str(new) and "ui.perfetto.dev" in printed[1]
    assert open_timeline.main([str(old.parent)], root=tmp_path) == 0
    assert capsys.readouterr().out.splitlines()[0] == str(old)


def test_make_timeline_without_a_timeline_says_so_in_one_line(tmp_path, capsys):
    assert open_timeline.main([], root=tmp_path) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no timeline.json in the runs under {tmp_path}" in err
    assert open_timeline.main([str(tmp_path / "x")], root=tmp_path) == 2
    assert f"no timeline.json at {tmp_path / 'x'}" in capsys.readouterr().err


def test_rtl_events_become_spans_and_token_moves():
    """The testbench's event lines (sim/hdl/tb_top.v) by hand: two runs of a batch."""
    load, gemm, store, perf = (int(op.value) for op in (Opcode.LOAD, Opcode.GEMM, Opcode.STORE,
                                                       Opcode.PERF))  # fmt: skip
    lines = [
        "R",
        f"U 0 1 5 0 {load} 100 7",
        "T 0 9 1",
        f"U 0 0 9 0 {load} 164 7",
        f"U 1 1 10 1 {gemm} 164 7",
        "T 0 10 0",
        "T 2 29 1",
        f"U 1 0 30 1 {gemm} 180 7",
        f"U 2 1 31 2 {store} 180 7",
        "T 2 31 0",
        f"U 2 0 40 2 {store} 196 39",
        "R",
        f"U 2 1 3 0 {perf} 0 0",
        f"U 2 0 5 0 {perf} 8 16",
    ]
    first, second = rtl_timeline.parse(lines)
    assert first.spans == [
        Span(0, "load", Opcode.LOAD, 5, 4, 64),
        Span(1, "compute", Opcode.GEMM, 10, 20, 0),
        Span(2, "store", Opcode.STORE, 31, 9, 32),
    ]
    assert first.tokens == [
        TokenMove(9, "LOAD", "COMPUTE", 1),
        TokenMove(10, "LOAD", "COMPUTE", -1),
        TokenMove(29, "COMPUTE", "STORE", 1),
        TokenMove(31, "COMPUTE", "STORE", -1),
    ]
    assert second.spans == [Span(0, "store", Opcode.PERF, 3, 2, 16)] and second.tokens == []


@pytest.mark.parametrize(
    ("lines", "bad"),
    [
        (["U 0 1 5 0 1 0 0"], "1: 'U 0 1 5 0 1 0 0'"),  # before any run
        (["R", "U 0 0 5 0 1 0 0"], "2: 'U 0 0 5 0 1 0 0'"),  # an end with no start
        (["R", "T 7 1 1"], "2: 'T 7 1 1'"),  # no such counter
        (["R", "X"], "2: 'X'"),
    ],
)
def test_rtl_events_that_do_not_read_are_named_by_line(lines, bad):
    with pytest.raises(rtl_timeline.TimelineError, match=f"^events:{bad}"):
        rtl_timeline.parse(lines, "events")

"""A layer-range (sharded) run writes a timeline: each piece's spans moved onto the merged run's
program indices and cycles, its warm-up layer dropped (sim/scaleout/shard_timeline.py)."""

from __future__ import annotations

import json

import numpy as np

from arch import isa
from arch.config import PRESETS
from compiler.compile import compile_model
from sim.runtime.timeline import busy_cycles, trace
from sim.scaleout import shards
from tests.unit.run.test_timeline import check_trace_event_format


def test_a_layer_range_run_has_the_ranges_spans_on_the_merged_cycles(tmp_path):
    exe = compile_model("cnn", PRESETS["tiny"], image_size=16, seed=3).executable
    x = np.random.default_rng(4).standard_normal(exe.input.shape).astype(np.float32)
    [program] = exe.programs
    lo, hi = 2, 4  # layers 2 and 3: the piece starts at layer 1 (its warm-up)
    names = [layer.name for layer in program.layers]
    result = shards.run(exe, x, "isa", layers=f"{names[lo]}:{names[hi - 1]}", workdir=tmp_path)
    [timeline] = result.timeline
    first, stop = program.layers[lo].insn_range[0], program.layers[hi - 1].insn_range[1]
    indices = sorted(span.index for span in timeline.spans)
    assert indices == list(range(first, stop))  # every instruction of the range once, no more
    windows = {layer.name: layer.cycle_window for layer in result.layers}
    # each layer ends with its PERF record (what its cycle window is read from): on the merged
    # cycles, that store starts at the window's end
    perf = [span for span in timeline.spans if span.opcode is isa.Opcode.PERF]
    assert len(perf) == hi - lo
    for span in perf:
        layer = program.layer_of(span.index)
        assert timeline.first_cycle + span.start == windows[layer.name][1], layer.name
    assert timeline.first_cycle == windows[names[lo]][0]
    busy = busy_cycles(timeline.spans)
    assert busy["compute"] > 0 and busy["load"] > 0
    assert all(span.opcode is not isa.Opcode.END for span in timeline.spans)
    check_trace_event_format(json.loads(json.dumps(trace(result.timeline))))

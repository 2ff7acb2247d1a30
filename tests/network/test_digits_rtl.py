"""The trained digits CNN on the RTL: held-out images as one batch in ONE simulator process
(one cocotb job of N runs), every layer of every image bit-exact, outputs equal to the ISA
simulator's, and int8 top-1 within 1 point of fp32 on them."""

from __future__ import annotations

import json

import numpy as np
import pytest

import zoo
from arch.config import PRESETS
from compiler.compile import compile_model
from sim.quality.dataset_accuracy import dataset_accuracy, fp32_outputs
from sim.runtime.batch import run_batch

SUBSET = 48  # of the 360 held-out images (`make sim MODEL=digits BACKEND=rtl` runs them all)


@pytest.mark.simulator
def test_held_out_subset_in_one_simulator_process(tmp_path) -> None:
    compiled = compile_model("digits", PRESETS["tiny"])
    held = zoo.held_out("digits")
    assert held is not None
    xs = [held.x[i : i + 1] for i in range(SUBSET)]
    rtl = run_batch(compiled.executable, xs, "rtl", workdir=tmp_path)
    assert rtl.bit_exact, next(m for m in rtl.mismatches if m)
    jobs = list(tmp_path.rglob("job.json"))
    assert len(jobs) == 1 and len(json.loads(jobs[0].read_text())["runs"]) == SUBSET
    isa = run_batch(compiled.executable, xs, "isa")
    for got, want in zip(rtl.outputs, isa.outputs, strict=True):
        np.testing.assert_array_equal(got["logits"], want["logits"])
    assert all(c > 0 for c in rtl.cycles)
    int8 = np.stack([o["logits"].reshape(-1) for o in rtl.outputs])
    result = dataset_accuracy("digits", held.y[:SUBSET], fp32_outputs(compiled.source, xs), int8)
    assert result["top1_fp32"] >= 0.9
    assert abs(result["top1_int8"] - result["top1_fp32"]) <= 0.01 + 1e-9

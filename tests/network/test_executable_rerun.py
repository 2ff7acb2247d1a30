"""A saved executable runs again without the model: loaded from its file, the small CNN gives on
the RTL and on the ISA simulator the same per-layer cycles, counters and outputs as the run of the
executable the compiler made, every layer bit-exact."""

from __future__ import annotations

import numpy as np
import pytest

from arch import executable
from arch.config import PRESETS
from compiler.compile import compile_model
from sim.runtime.run import run
from tests.network.test_models_rtl import seeded_input

pytestmark = pytest.mark.simulator


def signature(result):
    return [(la.name, la.cycles, la.cycle_window, la.counters) for la in result.layers]


@pytest.mark.parametrize("backend", ["isa", "rtl"])
def test_saved_executable_reruns_identically(backend, tmp_path):
    exe = compile_model("cnn", PRESETS["tiny"], image_size=16, seed=6).executable
    x = seeded_input(exe, seed=9)
    original = run(exe, x, backend, workdir=tmp_path / "original")
    loaded = executable.load(executable.save(exe, tmp_path / "cnn.cosim"), PRESETS["tiny"])
    again = run(loaded, x, backend, workdir=tmp_path / "again")
    assert original.bit_exact and again.bit_exact, again.first_mismatch
    assert again.cycles == original.cycles > 0
    assert signature(again) == signature(original)
    assert again.outputs.keys() == original.outputs.keys()
    for name, value in original.outputs.items():
        np.testing.assert_array_equal(again.outputs[name], value)

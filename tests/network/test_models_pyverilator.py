"""Network level on the pyverilator backend: the MLP and the small CNN on the tiny config give the
same per-layer cycles, counters and outputs as the cocotb backend, every layer bit-exact against
the integer reference - the CNN with a hostile testbench DRAM (``COSIM_DRAM_STALL``, the same
seeded pauses on both backends: the network run of CI under stalls); the Python API and its
report name the backend."""

import numpy as np
import pytest

from arch.config import PRESETS
from arch.reference import dequantize, evaluate, quantize_input
from compiler.compile import compile_model
from sim.app import api
from sim.runtime.run import run
from tests.network.test_models_rtl import seeded_input

pytestmark = pytest.mark.simulator


@pytest.mark.parametrize(("model", "stall"), [("mlp", "none"), ("cnn", "bursty:5")])
def test_small_models_match_the_cocotb_backend(model, stall, tmp_path, monkeypatch):
    monkeypatch.setenv("COSIM_DRAM_STALL", stall)
    exe = compile_model(
        model, PRESETS["tiny"], image_size=16 if model == "cnn" else None, seed=2
    ).executable
    x = seeded_input(exe, seed=5)
    cocotb = run(exe, x, "rtl", workdir=tmp_path)
    pyv = run(exe, x, "pyverilator")
    assert cocotb.bit_exact, cocotb.first_mismatch
    assert pyv.backend == "pyverilator" and pyv.bit_exact, pyv.first_mismatch
    assert pyv.cycles == cocotb.cycles and pyv.counters == cocotb.counters
    assert pyv.dram_stall == cocotb.dram_stall and len(cocotb.dram_stall) == len(exe.programs)
    profile = stall.partition(":")[0]
    for program in cocotb.dram_stall:
        assert program["profile"] == profile
        assert (program["read_paused_cycles"] > 0) == (profile != "none"), program
    for got, want in zip(pyv.layers, cocotb.layers, strict=True):
        assert (got.name, got.cycle_window, got.counters) == (
            want.name,
            want.cycle_window,
            want.counters,
        )
    for name, value in cocotb.outputs.items():
        np.testing.assert_array_equal(pyv.outputs[name], value)


def test_api_runs_an_executable_on_pyverilator():
    exe = compile_model("mlp", PRESETS["tiny"], seed=3).executable
    graph, x = exe.reference, seeded_input(exe, seed=1)
    outputs, report = api.run(exe, x, backend="pyverilator")
    assert report["backend"] == "pyverilator" and report["total"]["bit_exact"]
    assert report["total"]["cycles"] > 0 and len(report["layers"]) == len(exe.layers)
    reference = evaluate(graph, quantize_input(x, graph.tensors[graph.inputs[0]].scale))
    out = graph.outputs[0]
    np.testing.assert_array_equal(
        outputs[out], dequantize(reference[out], graph.tensors[out].scale)
    )

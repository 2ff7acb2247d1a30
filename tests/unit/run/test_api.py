"""The Python API runs an executable (or its file) and returns outputs and the report."""

import numpy as np
import pytest

from arch import executable
from arch.config import PRESETS
from arch.reference import dequantize, evaluate, quantize_input
from compiler.compile import compile_model
from sim.app import api
from sim.runtime.run import RunError


def test_run_executable_file_returns_outputs_and_report(tmp_path):
    compiled = compile_model("mlp", PRESETS["tiny"], seed=4)
    exe = compiled.executable
    path = executable.save(exe, tmp_path / "mlp.cosim")
    graph = exe.reference
    x = np.random.default_rng(2).standard_normal(exe.input.shape).astype(np.float32)
    outputs, report = api.run(path, x, "isa", config=PRESETS["tiny"], fp32_model=compiled.source)
    reference = evaluate(graph, quantize_input(x, exe.input.scale))
    out = graph.outputs[0]
    want = reference[out]
    if want.dtype == np.int8:
        want = dequantize(want, graph.tensors[out].scale)
    np.testing.assert_array_equal(outputs[out], want)
    assert report["model"] == "mlp" and report["backend"] == "isa"
    assert report["executable"] == str(path)
    assert report["total"]["bit_exact"] and len(report["layers"]) == len(exe.layers)
    assert report["accuracy"]["cosine_vs_fp32"] > 0.99
    twin = report["accuracy"]["twin_agreement"]  # the fake-quantized twin, every layer
    assert {e["tensor"] for e in twin["layers"]} >= {n.output for n in graph.nodes}
    assert twin["outside_rule"] == 0 and twin["max_code_diff"] <= 1 and twin["equal"] >= 0.999


def test_executable_for_another_config_is_refused(tmp_path):
    exe = compile_model("mlp", PRESETS["tiny"], seed=4).executable
    path = executable.save(exe, tmp_path / "mlp.cosim")
    tiny, default = PRESETS["tiny"].name, PRESETS["default"].name
    said = f"was compiled for config {tiny}, not {default}; recompile it for this config"
    with pytest.raises(executable.ExecutableError) as info:
        api.run(path, np.zeros((1, 64), np.float32), "isa", config=PRESETS["default"])
    assert str(info.value).startswith(f"{path} {said}")
    with pytest.raises(executable.ExecutableError) as info:  # the same check, the same words
        api.run(exe, np.zeros((1, 64), np.float32), "isa", config=PRESETS["default"])
    assert str(info.value).startswith(f"executable 'mlp' {said}")


def test_unknown_backend_lists_the_backends():
    exe = compile_model("mlp", PRESETS["tiny"], seed=4).executable
    with pytest.raises(
        RunError, match="unknown backend 'pyverilater'; choose one of isa, rtl, pyverilator"
    ):
        api.run(exe, np.zeros((1, 64), np.float32), "pyverilater")

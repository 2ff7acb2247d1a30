"""The Python API runs a bundle file or a plan and returns outputs and the report."""

import numpy as np
import pytest

from arch.config import PRESETS
from arch.reference import dequantize, evaluate, quantize_input
from compiler.bundle import BundleError, save_bundle
from compiler.compile import compile_model
from sim import api
from sim.run import RunError


def test_run_bundle_file_returns_outputs_and_report(tmp_path):
    name, plan = compile_model("mlp", PRESETS["tiny"], seed=4)
    path = save_bundle(plan, tmp_path / "mlp.bundle", name)
    graph = plan.graph
    x = (
        np.random.default_rng(2)
        .standard_normal(graph.tensors[graph.inputs[0]].shape)
        .astype(np.float32)
    )
    outputs, report = api.run(path, x, "isa", config=PRESETS["tiny"])
    reference = evaluate(graph, quantize_input(x, graph.tensors[graph.inputs[0]].scale))
    out = graph.outputs[0]
    np.testing.assert_array_equal(
        outputs[out], dequantize(reference[out], graph.tensors[out].scale)
    )
    assert report["model"] == "mlp" and report["backend"] == "isa"
    assert report["total"]["bit_exact"] and len(report["layers"]) == len(plan.accel_layers())
    assert report["accuracy"]["cosine_vs_fp32"] > 0.99


def test_bundle_for_another_config_is_refused(tmp_path):
    name, plan = compile_model("mlp", PRESETS["tiny"], seed=4)
    path = save_bundle(plan, tmp_path / "mlp.bundle", name)
    with pytest.raises(BundleError, match="compiled for config"):
        api.run(path, np.zeros((1, 64), np.float32), "isa", config=PRESETS["default"])


def test_unknown_backend_lists_the_backends():
    _, plan = compile_model("mlp", PRESETS["tiny"], seed=4)
    with pytest.raises(
        RunError, match="unknown backend 'pyverilater'; choose one of isa, rtl, pyverilator"
    ):
        api.run(plan, np.zeros((1, 64), np.float32), "pyverilater")

"""A model saved by the pinned onnx (IR version 14) is accepted although the pinned onnxruntime
reads IR versions up to 13: by the compiler, on the host steps, and on the fp32 reference path
(calibration, accuracy vs fp32) - from a file as from a proto."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from arch import host_runtime
from arch.config import PRESETS
from compiler.calibrate import run_onnx
from compiler.compile import compile_model
from sim.app import api
from sim.quality.accuracy import compare_fp32
from tests.unit.front.test_partition import partitioned_model
from tests.unit.run.test_cli_errors import in_process


def _newest(model: onnx.ModelProto) -> onnx.ModelProto:
    model.ir_version = onnx.IR_VERSION
    return model


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("ir") / "p.onnx"
    onnx.save(_newest(partitioned_model(seed=5)), str(path))
    assert onnx.load(str(path)).ir_version == onnx.IR_VERSION >= 14
    return str(path)


def test_onnxruntime_alone_refuses_it(saved) -> None:
    """The premise: without the project's lowering, onnxruntime cannot load the file."""
    with pytest.raises(Exception, match="IR version|ir_version|Unsupported model"):
        ort.InferenceSession(saved, providers=["CPUExecutionProvider"])


def test_it_compiles_runs_and_measures_accuracy(saved) -> None:
    compiled = compile_model(saved, PRESETS["tiny"])
    x = np.random.default_rng(5).standard_normal((1, 3, 16, 16)).astype(np.float32)
    outputs, report = api.run(compiled.executable, x, "isa", fp32_model=saved)
    assert report["total"]["bit_exact"]
    assert [la["device"] for la in report["layers"]].count("host") >= 1
    assert report["accuracy"]["cosine_vs_fp32"] > 0.98
    direct = compare_fp32(saved, compiled.executable.reference, x)
    assert direct["cosine_vs_fp32"] == report["accuracy"]["cosine_vs_fp32"]
    # The fp32 output is onnxruntime's on the same model saved at IR version 10.
    older = partitioned_model(seed=5)
    older.ir_version = 10
    session = ort.InferenceSession(older.SerializeToString(), providers=["CPUExecutionProvider"])
    [want] = session.run(["y"], {"x": x})
    np.testing.assert_allclose(run_onnx(saved, x)["y"], want, rtol=1e-5, atol=1e-6)


def test_host_runtime_reads_it() -> None:
    rng = np.random.default_rng(6)
    graph = helper.make_graph(
        [helper.make_node("LRN", ["x"], ["y"], size=3)],
        "host",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 3, 3])],
    )
    model = _newest(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    x = rng.standard_normal((1, 4, 3, 3)).astype(np.float32)
    got = host_runtime.run(model.SerializeToString(), {"x": x}, "y")
    # LRN (size 3, alpha 1e-4, beta 0.75, bias 1) in numpy, over channels
    square = np.pad(x**2, ((0, 0), (1, 1), (0, 0), (0, 0)))
    window = square[:, :-2] + square[:, 1:-1] + square[:, 2:]
    np.testing.assert_allclose(got, x / (1 + 1e-4 / 3 * window) ** 0.75, rtol=1e-5)


def test_cli_runs_it(saved, tmp_path, capsys) -> None:
    result = in_process(capsys, "--model", saved, "--config", "tiny", "--out", str(tmp_path / "o"))
    assert result.returncode == 0, result.stderr
    assert "accuracy vs fp32 onnxruntime: cosine" in result.stdout

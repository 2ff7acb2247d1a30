"""Per-layer agreement with onnxruntime's own execution of QDQ models quantized by its own
tool: each layer fed the same int8 codes on both sides, its output codes compared."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import zoo
from arch.config import PRESETS
from compiler.compile import compile_model
from sim.quality.qdq_agreement import agreement_report, layer_agreement
from sim.quality.sqnr import layer_sqnr
from tests.ort_quantized import branchy_net, quantize


@pytest.mark.parametrize("variant", ["qdq-uint8", "qdq-int8"])
def test_branchy_net_layers_agree_with_onnxruntime(tmp_path, variant: str) -> None:
    path = quantize(branchy_net(), variant, tmp_path)
    compiled = compile_model(path, PRESETS["tiny"])
    xs = [
        np.random.default_rng(s).standard_normal((1, 8, 12, 12)).astype(np.float32) for s in (3, 4)
    ]
    layers = layer_agreement(onnx.load(str(path)), compiled.executable.reference, xs)
    ops = {e["op"] for e in layers}
    assert {"conv", "add", "avgpool", "maxpool", "global_avgpool", "gemm"} <= ops, ops
    for entry in layers:
        # Equal but for a rounding point of the integer Add (8 extra fraction bits, round half
        # up) against onnxruntime's float add and round-half-to-even: at most one code.
        assert entry["max_code_diff"] <= 1, entry
        assert entry["equal"] >= (0.998 if entry["op"] == "add" else 1.0), entry
    report = agreement_report(onnx.load(str(path)), compiled.executable.reference, xs)
    assert report is not None and report["equal"] >= 0.999
    assert report["layers"] == layers
    # A QDQ model has no fp32 tensors: SQNR is left to this agreement.
    assert layer_sqnr(compiled.source, compiled.executable.reference, xs) == []


def test_a_float_model_has_no_agreement() -> None:
    compiled = compile_model("mlp", PRESETS["tiny"])
    x = [np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)]
    assert agreement_report(zoo.build("mlp"), compiled.executable.reference, x) is None

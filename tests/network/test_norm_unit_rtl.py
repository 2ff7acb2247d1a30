"""A transformer layer end to end on the norm unit's RTL: torch's exported
nn.TransformerEncoderLayer with a causal mask, compiled for tiny with ``norm_unit`` - its
LayerNorms and the masked Softmax on the norm engine beside the GEMMs, one device program, no
host step - bit-exact on the RTL, outputs equal to the ISA simulator's and close to fp32."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from arch.config import PRESETS
from arch.executable import DeviceProgram
from compiler.compile import compile_model
from sim.runtime.run import run

pytestmark = pytest.mark.simulator

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "torch" / "encoder_causal.onnx"


def test_causal_encoder_layer_on_the_norm_unit_rtl(tmp_path):
    exe = compile_model(FIXTURE, dataclasses.replace(PRESETS["tiny"], norm_unit=True)).executable
    assert [type(step) for step in exe.steps] == [DeviceProgram]
    x = np.random.default_rng(3).standard_normal((1, 20, 64)).astype(np.float32)
    rtl, isa = run(exe, x, "rtl", workdir=tmp_path / "rtl"), run(exe, x, "isa")
    assert rtl.bit_exact, rtl.first_mismatch
    assert isa.bit_exact, isa.first_mismatch
    norm_layers = [la for la in rtl.layers if la.op in ("layer_norm", "row_softmax")]
    assert sorted(la.op for la in norm_layers) == ["layer_norm", "layer_norm", "row_softmax"]
    assert all(la.device == "accel" and la.cycles > 0 for la in rtl.layers)
    (name,) = [o.name for o in onnx.load(FIXTURE).graph.output]
    np.testing.assert_array_equal(rtl.outputs[name], isa.outputs[name])
    session = ort.InferenceSession(str(FIXTURE), providers=["CPUExecutionProvider"])
    (fp32,) = session.run(None, {session.get_inputs()[0].name: x})
    got = rtl.outputs[name].ravel().astype(np.float64)
    cosine = got @ fp32.ravel() / (np.linalg.norm(got) * np.linalg.norm(fp32))
    assert cosine > 0.999

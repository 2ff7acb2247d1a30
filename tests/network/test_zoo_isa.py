"""Network level on the ISA simulator: whole zoo models compiled and run, every layer bit-exact
against the integer reference ops (arch.reference), and close to fp32 onnxruntime."""

import numpy as np
import pytest

from arch.config import PRESETS
from compiler.accuracy import compare_fp32
from compiler.compile import compile_model
from sim.run import run

CASES = [
    ("mlp", None, "tiny"),
    ("mlp", None, "default"),
    ("cnn", 32, "tiny"),
    ("cnn", 32, "default"),
    ("resnet18", 64, "default"),
    ("resnet34", 32, "default"),
    ("resnet50", 64, "default"),
    ("mobilenetv2", 64, "default"),
    ("mobilenetv2", 32, "tiny"),
    ("efficientnet", 64, "default"),
    ("squeezenet", 64, "default"),
    ("squeezenet", 64, "tiny"),
]


@pytest.mark.parametrize(
    ("model", "size", "config"), CASES, ids=[f"{m}-{s}-{c}" for m, s, c in CASES]
)
def test_zoo_model_is_bit_exact_on_isa_simulator(model, size, config):
    compiled = compile_model(model, PRESETS[config], image_size=size, seed=3)
    name, exe = compiled.name, compiled.executable
    x = np.random.default_rng(7).standard_normal(exe.input.shape).astype(np.float32)
    result = run(exe, x, "isa")
    bad = result.first_mismatch
    assert bad is None, f"{name}: {bad.mismatch}"
    assert [la.name for la in result.layers if la.device == "accel"] == [
        la.name for la in exe.layers
    ]
    # The array also multiplies the zero padding of channels that are not whole lines.
    assert result.counters["macs"] >= sum(la.macs for la in result.layers if la.device == "accel")
    accuracy = compare_fp32(compiled.source, exe.reference, x)
    assert accuracy["cosine_vs_fp32"] > 0.99, accuracy

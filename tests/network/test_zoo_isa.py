"""Network level on the ISA simulator: whole zoo models compiled and run, every layer bit-exact
against the integer reference ops (arch.reference), and close to fp32 onnxruntime."""

import numpy as np
import pytest

from arch.config import PRESETS
from arch.executable import HostStep
from compiler.compile import compile_model
from sim.runtime.run import run
from tests.twin_check import assert_twin_agrees

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
    ("googlenet", 64, "default"),
    ("unet", 64, "default"),
    ("unet", 32, "tiny"),
    ("vit", 64, "default"),
    ("bert", None, "default"),
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
    # every layer and host step against the fake-quantized twin of the original model
    assert_twin_agrees(compiled.source, exe.reference, [x])


def test_googlenet_lrn_on_the_host_the_macs_on_the_array():
    """Only the two LRNs run on the host (3 device programs around them); every MAC is the
    array's (LRN has none)."""
    exe = compile_model("googlenet", PRESETS["default"], image_size=64, seed=3).executable
    hosts = [s for s in exe.steps if isinstance(s, HostStep)]
    assert [h.name for h in hosts] == ["pool1.norm1", "conv2.norm2"]
    assert all("op LRN has no accelerator mapping" in h.reason for h in hosts)
    assert len(exe.programs) == 3
    accel = sum(la.macs for la in exe.layers)
    host = sum(exe.reference.producer(h.outputs[0]).attrs["macs"] for h in hosts)
    assert accel / (accel + host) >= 0.95


def test_unet_upsamples_on_the_array():
    """U-Net's ConvTransposes are 1x1 convs + depth_to_space and its Resize an upsample, all on
    the array, with the skip Concats as views."""
    exe = compile_model("unet", PRESETS["default"], image_size=64, seed=3).executable
    assert [s for s in exe.steps if isinstance(s, HostStep)] == []
    ops = {la.name: la.op for la in exe.layers}
    assert ops["up3"] == ops["up2"] == "conv"
    assert ops["up3#interleave"] == ops["up2#interleave"] == "depth_to_space"
    assert ops["up1.resize"] == "upsample"


def test_mobilenetv2_224_depthwise_on_the_window_unit():
    """MobileNetV2 224x224 on the 16x16 config: the depthwise convs run DWCONV on the window
    unit (about 1/3 of the array's MAC rate there instead of 1/16 through diagonal weight
    tiles), so the whole network reaches utilization 0.5, bit-exact."""
    config = PRESETS["default"]
    exe = compile_model("mobilenetv2", config, image_size=224, seed=0).executable
    x = np.random.default_rng(1).standard_normal(exe.input.shape).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.first_mismatch is None, result.first_mismatch.mismatch
    per_cycle = config.rows * config.cols
    total = sum(la.macs for la in result.layers) / (per_cycle * result.cycles)
    assert total >= 0.5, f"utilization {total:.3f}"
    depthwise = [la for la in result.layers if ".dw." in la.name]
    assert len(depthwise) == 17
    assert min(la.utilization(per_cycle) for la in depthwise) > 0.08

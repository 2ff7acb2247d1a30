"""A partitioned graph end to end on the RTL: device program -> host LRN (onnxruntime) -> device
program -> host InstanceNormalization -> device program, every accelerator layer bit-exact
against the reference, the outputs equal to the ISA simulator's; and the ops that run on the
array by their own hardware - depthwise on the window unit, dilated, upsampling, activation
tables, gated and table-only scale layers, grouped convs in line pieces - each bit-exact on the
RTL and the ISA simulator, with the same outputs on both."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from arch.config import PRESETS
from arch.executable import DeviceProgram
from compiler.compile import compile_model
from sim.runtime.run import run
from tests.unit.front.test_partition import partitioned_model

pytestmark = pytest.mark.simulator


def rtl_and_isa(model: onnx.ModelProto, seed: int, tmp_path):
    """Compile ``model`` for the tiny config and run it on the RTL and the ISA simulator with a
    seeded input: both bit-exact against the reference, the RTL's outputs equal to the ISA
    simulator's. Returns (executable, RTL result, ISA result) for the test's own checks."""
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    exe = compile_model(path, PRESETS["tiny"]).executable
    x = np.random.default_rng(seed).standard_normal(exe.input.shape).astype(np.float32)
    rtl, isa = run(exe, x, "rtl", workdir=tmp_path / "rtl"), run(exe, x, "isa")
    assert rtl.bit_exact, rtl.first_mismatch
    assert isa.bit_exact, isa.first_mismatch
    for name, value in isa.outputs.items():
        np.testing.assert_array_equal(rtl.outputs[name], value)
    return exe, rtl, isa


def all_on_accel(result) -> bool:
    return all(la.device == "accel" for la in result.layers)


def test_device_host_device_on_rtl(tmp_path):
    exe, rtl, isa = rtl_and_isa(partitioned_model(seed=2), 8, tmp_path)
    assert sum(isinstance(s, DeviceProgram) for s in exe.steps) == 3
    assert [(la.name, la.device) for la in rtl.layers] == [
        (la.name, la.device) for la in isa.layers
    ]
    assert all(la.cycles > 0 for la in rtl.layers if la.device == "accel")
    # later programs' cycle windows continue the run's count
    windows = [la.cycle_window for la in rtl.layers if la.device == "accel"]
    assert all(a[1] <= b[0] for a, b in zip(windows, windows[1:], strict=False))
    assert rtl.cycles >= windows[-1][1] > windows[0][1]


@pytest.mark.parametrize(
    ("channels", "stride", "kernel", "dilation"),
    [(20, 1, 3, 1), (24, 2, 3, 1), (24, 2, 5, 1), (16, 1, 3, 2)],
)
def test_depthwise_conv_on_rtl(channels, stride, kernel, dilation, tmp_path):
    """Depthwise convolution on the window unit (DWCONV; a 5x5 kernel as four accumulating
    passes, a dilated one as a pass per tap)."""
    from tests.unit.front.test_partition import depthwise_model

    model = depthwise_model(channels, stride, seed=stride, kernel=kernel, dilation=dilation)
    _, rtl, _ = rtl_and_isa(model, channels, tmp_path)
    assert all_on_accel(rtl)


def test_depthwise_with_residual_on_rtl(tmp_path):
    from tests.unit.front.test_partition import depthwise_residual_model

    _, rtl, _ = rtl_and_isa(depthwise_residual_model(2), 4, tmp_path)
    assert all_on_accel(rtl)


def test_dilated_conv_on_rtl(tmp_path):
    from tests.unit.front.test_partition import dilated_model

    rtl_and_isa(dilated_model(2, 1, seed=4), 5, tmp_path)


def test_concat_without_copies_on_rtl(tmp_path):
    """The expand convs of a fire module store into channel slices of the concat buffer (a
    DMA with a wider pixel stride); the consumers read it whole."""
    from tests.unit.front.test_partition import fire_model

    rtl_and_isa(fire_model(5), 6, tmp_path)


def test_upsample_and_skip_concat_on_rtl(tmp_path):
    """U-Net's decoder step: nearest 2x upsample (strided stores from ACC) concatenated with
    an encoder map (a view), then a conv."""
    from tests.unit.front.test_partition import upsample_model

    _, rtl, _ = rtl_and_isa(upsample_model("skip", seed=7), 8, tmp_path)
    assert "up" in [la.name for la in rtl.layers]


@pytest.mark.parametrize("op", ["SiLU", "HardSwish"])
def test_activation_tables_on_rtl(op, tmp_path):
    """Activations as STORE lookup tables (two convs and an FC, each with its own table)."""
    from tests.unit.back.test_table_ops import act_model

    exe, rtl, _ = rtl_and_isa(act_model(op, {}, 17, seed=11), 12, tmp_path)
    assert [n.attrs.get("act") for n in exe.reference.nodes].count("table") == 3
    assert all_on_accel(rtl)


@pytest.mark.parametrize("model", ["squeeze_excitation", "unfused_activations"])
def test_scale_layers_on_rtl(model, tmp_path):
    """A squeeze-excitation block (the gate's Mul as ACCUM use_gate, SiLU tables) and
    activations after a Concat and on the graph input (table-only and clamp-only scale
    layers)."""
    from tests.unit.back.test_scale_layers import se_model, unfused_acts_model

    onnx_model = se_model(20, 2, swish=True) if model[0] == "s" else unfused_acts_model()
    exe, rtl, _ = rtl_and_isa(onnx_model, 14, tmp_path)
    assert any(n.op == "scale" for n in exe.reference.nodes)
    assert all_on_accel(rtl)


@pytest.mark.parametrize("case", ["unequal", "width4_residual"])
def test_grouped_conv_on_rtl(case, tmp_path):
    """A grouped conv cut into line pieces (channel-slice views, block-diagonal convs - one
    partial -, a concat they store into; a fused residual sliced too)."""
    from tests.unit.back.test_grouped_conv import CASES, grouped_model

    cin, cout, group, residual, _ = CASES[case]
    exe, rtl, _ = rtl_and_isa(grouped_model(cin, cout, group, 5, residual), 15, tmp_path)
    assert any(n.op == "channel_slice" for n in exe.reference.nodes)
    assert all_on_accel(rtl)

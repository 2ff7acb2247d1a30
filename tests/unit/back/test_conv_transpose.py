"""ConvTranspose: kernel = stride (U-Net's up-convolution) on the array as a 1x1 conv into
s*s channel groups and a depth_to_space that stores each group at its pixel position; other
ConvTransposes on the host with the reason. Bit-exact against the integer reference on the ISA
simulator, and compared with fp32 onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from arch.config import PRESETS
from arch.executable import HostStep
from arch.reference import evaluate_node
from compiler.compile import compile_model
from sim.quality.accuracy import compare_fp32
from sim.runtime.run import run
from tests.unit.front.test_partition import _saved, conv, model_of


def up_model(out_ch: int, seed: int, **attrs) -> onnx.ModelProto:
    """U-Net's decoder step: conv 3 -> 16, max pool, conv, ReLU, ConvTranspose 16 -> out_ch
    (kernel 2, stride 2 unless ``attrs`` say otherwise), Concat with the first conv's map,
    conv -> 8."""
    rng = np.random.default_rng(seed)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]} | attrs
    k = attrs["kernel_shape"]
    c1, i1 = conv("c1", "x", "a", 3, 16, rng)
    c2, i2 = conv("c2", "p", "b", 16, 16, rng)
    c3, i3 = conv("c3", "cat", "y", out_ch + 16, 8, rng)
    nodes = [
        c1,
        helper.make_node("MaxPool", ["a"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        c2,
        helper.make_node("Relu", ["b"], ["r"], name="relu"),
        helper.make_node("ConvTranspose", ["r", "up.w", "up.b"], ["u"], name="up", **attrs),
        helper.make_node("Concat", ["u", "a"], ["cat"], name="cat", axis=1),
        c3,
    ]
    inits = {
        **i1,
        **i2,
        **i3,
        "up.w": rng.normal(0, 0.3, (16, out_ch, *k)).astype(np.float32),
        "up.b": rng.normal(0, 0.1, out_ch).astype(np.float32),
    }
    return model_of(nodes, inits, [1, 3, 16, 16])


def _run(model: onnx.ModelProto, config: str, tmp_path):
    compiled = compile_model(_saved(model, tmp_path), PRESETS[config])
    exe = compiled.executable
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert compare_fp32(compiled.source, exe.reference, x)["cosine_vs_fp32"] > 0.99
    return exe, result


@pytest.mark.parametrize(("out_ch", "config"), [(8, "tiny"), (16, "default")])
def test_kernel_equal_to_stride_runs_on_the_array(out_ch, config, tmp_path) -> None:
    exe, result = _run(up_model(out_ch, seed=out_ch), config, tmp_path)
    assert [s for s in exe.steps if isinstance(s, HostStep)] == []
    up = {la.name: la for la in result.layers}
    assert up["up"].op == "conv" and up["up#interleave"].op == "depth_to_space"
    assert up["up"].macs == 16 * out_ch * 2 * 2 * 8 * 8  # ConvTranspose's own MACs, no more


@pytest.mark.parametrize(
    ("attrs", "config", "why"),
    [
        ({"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}, "tiny",
         "kernel (3, 3), strides (2, 2), pads (1, 1, 1, 1), output_padding (1, 1): "
         "overlapping or padded windows have no array mapping (supported: kernel = strides, no "
         "pads, dilation 1, no output_padding)"),
        ({}, "default", "8 output channels are not whole lines of 16 (each channel group is "
         "loaded from its own lines) (supported: ConvTranspose output channels a multiple of 16)"),
    ],
)  # fmt: skip
def test_other_conv_transposes_go_to_the_host_with_the_reason(attrs, config, why, tmp_path) -> None:
    exe, result = _run(up_model(8, seed=3, **attrs), config, tmp_path)
    host = next(s for s in exe.steps if isinstance(s, HostStep))
    assert host.name == "up" and host.reason.split("; ")[0] == f"up (ConvTranspose): {why}"
    assert "host" in {la.device for la in result.layers if la.name == "up"}


def test_conv_transpose_1d(tmp_path) -> None:
    """ConvTranspose1d (kernel 4 = stride 4) between two Conv1d, all on the array."""
    rng = np.random.default_rng(9)
    w1 = rng.normal(0, 0.3, (8, 4, 3)).astype(np.float32)
    wt = rng.normal(0, 0.3, (8, 4, 4)).astype(np.float32)
    w2 = rng.normal(0, 0.3, (4, 4, 1)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["a"], name="c1", kernel_shape=[3], pads=[1, 1]),
        helper.make_node(
            "ConvTranspose", ["a", "wt"], ["u"], name="up", kernel_shape=[4], strides=[4]
        ),  # fmt: skip
        helper.make_node("Conv", ["u", "w2"], ["y"], name="c2", kernel_shape=[1]),
    ]
    model = model_of(nodes, {"w1": w1, "wt": wt, "w2": w2}, [1, 4, 10])
    compiled = compile_model(_saved(model, tmp_path), PRESETS["tiny"])
    exe = compiled.executable
    assert [s for s in exe.steps if isinstance(s, HostStep)] == []
    x = np.random.default_rng(2).standard_normal((1, 4, 10)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    fp32 = ort.InferenceSession(model.SerializeToString()).run(["y"], {"x": x})[0]
    assert fp32.shape == (1, 4, 40) and result.outputs["y"].size == fp32.size
    assert compare_fp32(compiled.source, exe.reference, x)["cosine_vs_fp32"] > 0.99


def test_depth_to_space_reference_is_onnx_dcr() -> None:
    """The integer reference's depth_to_space against onnxruntime's DepthToSpace (DCR)."""
    x = np.random.default_rng(4).integers(-128, 128, (1, 12, 3, 5)).astype(np.int8)
    node = helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="DCR")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 12, 3, 5])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 10
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x.astype(np.float32)})

    class Node:
        op, attrs = "depth_to_space", {"block": (2, 2)}

    got = evaluate_node(None, Node(), [x])  # type: ignore[arg-type]
    np.testing.assert_array_equal(got.astype(np.float32), want[0])


def test_layout_names_the_interleave_whose_channels_are_not_whole_lines() -> None:
    """The layout pass itself refuses the depth_to_space of 8 channels on 16-lane lines (each
    channel group is loaded from its own lines), naming the IR node and op."""
    from compiler.errors import CompileError
    from compiler.frontend import compile_front
    from compiler.passes import BACK_PASSES
    from compiler.plan import Plan

    plan = Plan(PRESETS["default"], compile_front(up_model(8, seed=3), seed=3))
    (_, partition), (_, layout) = BACK_PASSES[:2]
    with pytest.raises(CompileError) as info:
        layout(partition(plan))
    assert (info.value.node, info.value.op) == ("up#interleave", "depth_to_space")
    assert info.value.reason == (
        "8 output channels are not whole lines of 16 (each channel group is loaded from its "
        "own lines)"
    )
    assert info.value.supported == "ConvTranspose output channels a multiple of 16"

"""Window ops that torch exports and the array runs: Conv1d / MaxPool1d / AvgPool1d (3-D
tensors, held as 2-D of height 1), MaxPool with a ceil_mode that changes the output shape
(extra bottom/right padding that never wins), and the AveragePool ceil_mode that goes to the
host. Each runs on the ISA simulator bit-exact against the integer reference and is compared
with fp32 onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from arch.config import PRESETS
from arch.executable import HostStep
from compiler.compile import compile_model
from sim.quality.accuracy import compare_fp32
from sim.runtime.run import run
from tests.unit.front.test_partition import _saved, conv, model_of


def conv1d(name, x, y, cin, cout, k, rng, **attrs):
    w = rng.normal(0, (2 / (cin * k)) ** 0.5, (cout, cin, k)).astype(np.float32)
    b = rng.normal(0, 0.1, cout).astype(np.float32)
    node = helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [y], name=name,
                            kernel_shape=[k], **attrs)  # fmt: skip
    return node, {f"{name}.w": w, f"{name}.b": b}


def conv1d_model(length: int, seed: int, host_tanh: bool) -> onnx.ModelProto:
    """Conv1d 8 -> 16 (k3, pad 1), ReLU, MaxPool1d(2, ceil_mode), Conv1d 16 -> 16 (k5, stride
    2, dilation 2), [LpNormalization over channels on the host], AvgPool1d(2), Conv1d 1x1 -> 8."""
    rng = np.random.default_rng(seed)
    n1, i1 = conv1d("c1", "x", "a", 8, 16, 3, rng, pads=[1, 1])
    n2, i2 = conv1d("c2", "p", "b", 16, 16, 5, rng, pads=[4, 4], strides=[2], dilations=[2])
    n3, i3 = conv1d("c3", "q", "y", 16, 8, 1, rng)
    norm = helper.make_node("LpNormalization", ["b"], ["t"], name="norm", axis=1)
    mid = [norm] if host_tanh else []
    nodes = [
        n1,
        helper.make_node("Relu", ["a"], ["ar"], name="relu"),
        helper.make_node(
            "MaxPool", ["ar"], ["p"], name="mp", kernel_shape=[2], strides=[2], ceil_mode=1
        ),  # fmt: skip
        n2,
        *mid,
        helper.make_node(
            "AveragePool",
            ["t" if host_tanh else "b"],
            ["q"],
            name="ap",
            kernel_shape=[2],
            strides=[2],
        ),  # fmt: skip
        n3,
    ]
    return model_of(nodes, {**i1, **i2, **i3}, [1, 8, length])


@pytest.mark.parametrize(
    ("length", "host_tanh", "config"), [(37, True, "tiny"), (64, False, "default")]
)
def test_conv1d_runs_on_the_array(length, host_tanh, config, tmp_path) -> None:
    """Every Conv1d and 1-D pool on the array (a host node between them reads and writes
    (1, C, L) values); bit-exact, and equal to fp32 onnxruntime up to quantization."""
    model = conv1d_model(length, seed=length, host_tanh=host_tanh)
    compiled = compile_model(_saved(model, tmp_path), PRESETS[config])
    exe = compiled.executable
    hosts = [s.name for s in exe.steps if isinstance(s, HostStep)]
    assert hosts == (["norm"] if host_tanh else [])
    assert {la.name for la in exe.layers} == {"c1", "mp", "c2", "ap", "c3"}
    x = np.random.default_rng(1).standard_normal((1, 8, length)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    fp32 = ort.InferenceSession(model.SerializeToString()).run(["y"], {"x": x})[0]
    assert result.outputs["y"].size == fp32.size  # held as (1, C, 1, L)
    assert compare_fp32(compiled.source, exe.reference, x)["cosine_vs_fp32"] > 0.99


def test_grouped_conv1d_runs_on_the_array(tmp_path) -> None:
    """A grouped Conv1d (two groups of 16 channels: two line pieces) on the array."""
    rng = np.random.default_rng(2)
    node, inits = conv1d("grouped", "x", "y", 32, 32, 3, rng, group=2)
    inits["grouped.w"] = inits["grouped.w"][:, :16]
    model = model_of([node], inits, [1, 32, 16])
    compiled = compile_model(_saved(model, tmp_path), PRESETS["tiny"])
    assert not [s for s in compiled.executable.steps if isinstance(s, HostStep)]
    x = np.random.default_rng(3).standard_normal((1, 32, 16)).astype(np.float32)
    result = run(compiled.executable, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert compare_fp32(compiled.source, compiled.executable.reference, x)["cosine_vs_fp32"] > 0.99


def ceil_pool_model(op: str, size: int, pads: int, seed: int) -> onnx.ModelProto:
    """conv 3 -> 8, ReLU, 3x3 stride-2 pool with ceil_mode=1, conv 1x1 -> 8."""
    rng = np.random.default_rng(seed)
    c1, i1 = conv("c1", "x", "a", 3, 8, rng)
    extra = {"count_include_pad": 1} if op == "AveragePool" else {}
    pool = helper.make_node(
        op, ["ar"], ["p"], name="pool", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1,
        pads=[pads] * 4, **extra,
    )  # fmt: skip
    c2, i2 = conv("c2", "p", "y", 8, 8, rng, k=1)
    relu = helper.make_node("Relu", ["a"], ["ar"], name="relu")
    return model_of([c1, relu, pool, c2], {**i1, **i2}, [1, 3, size, size])


@pytest.mark.parametrize(("size", "pads"), [(10, 0), (12, 1), (13, 0)])
def test_max_pool_ceil_mode_pads_bottom_right(size, pads, tmp_path) -> None:
    """ceil_mode=1 where it adds a row and a column of windows (10, 12) and where it does not
    (13): on the array, bit-exact, and equal to fp32 onnxruntime up to quantization."""
    model = ceil_pool_model("MaxPool", size, pads, seed=size)
    compiled = compile_model(_saved(model, tmp_path), PRESETS["tiny"])
    exe = compiled.executable
    assert [s for s in exe.steps if isinstance(s, HostStep)] == []
    floor = (size + 2 * pads - 3) // 2 + 1
    pool = exe.reference.producer("p")
    assert pool is not None and exe.reference.tensors["p"].shape[2] == floor + (size % 2 == 0)
    x = np.random.default_rng(size).standard_normal((1, 3, size, size)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert compare_fp32(compiled.source, exe.reference, x)["cosine_vs_fp32"] > 0.99


def test_average_pool_ceil_mode_that_changes_the_shape_goes_to_the_host(tmp_path) -> None:
    """onnxruntime averages the extra edge windows over fewer values than the kernel's, which
    one rescale per layer cannot do: the pool runs on the host, the convs on the array."""
    model = ceil_pool_model("AveragePool", 10, 0, seed=5)
    compiled = compile_model(_saved(model, tmp_path), PRESETS["tiny"])
    exe = compiled.executable
    [host] = [s for s in exe.steps if isinstance(s, HostStep)]
    assert host.name == "pool"
    assert "ceil_mode=1 gives 5x5 outputs, not 4x4" in host.reason
    x = np.random.default_rng(6).standard_normal((1, 3, 10, 10)).astype(np.float32)
    assert run(exe, x, "isa").bit_exact
    assert compare_fp32(compiled.source, exe.reference, x)["cosine_vs_fp32"] > 0.99


def padded_max_pool_model(seed: int) -> onnx.ModelProto:
    """conv 3 -> 8 with biases around -1 (mostly negative outputs, no ReLU), a 5x5 stride-1 max
    pool padded by 2 (over 3x3: the POOL path, not the window unit), conv 1x1 -> 8."""
    rng = np.random.default_rng(seed)
    c1, i1 = conv("c1", "x", "a", 3, 8, rng)
    i1["c1.b"] = (i1["c1.b"] - 1.0).astype(np.float32)
    pool = helper.make_node(
        "MaxPool", ["a"], ["p"], name="pool", kernel_shape=[5, 5], strides=[1, 1], pads=[2] * 4
    )
    c2, i2 = conv("c2", "p", "y", 8, 8, rng, k=1)
    return model_of([c1, pool, c2], {**i1, **i2}, [1, 3, 9, 9])


def test_padded_max_pool_on_the_pool_path_pads_below_every_value(tmp_path) -> None:
    """Padding never wins a max (-128, not the zero point: real 0 would beat every negative
    window at the border); POOL runs it, bit-exact against the integer reference's -inf
    padding, and the border outputs equal onnxruntime's fp32 pool up to quantization."""
    from arch import isa

    model = padded_max_pool_model(seed=41)
    compiled = compile_model(_saved(model, tmp_path), PRESETS["tiny"])
    exe = compiled.executable
    assert [s for s in exe.steps if isinstance(s, HostStep)] == []
    [program] = exe.programs
    ops = {isa.decode_insn(int.from_bytes(program.image[a : a + isa.INSN_BYTES], "little"))
           .opcode.name for a in range(program.launch.insn_base,
                                       program.launch.insn_base + program.instructions
                                       * isa.INSN_BYTES, isa.INSN_BYTES)}  # fmt: skip
    assert "POOL" in ops and "DWCONV" not in ops  # the POOL path, not the window unit
    x = np.random.default_rng(42).standard_normal((1, 3, 9, 9)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    # fp32 pool outputs: a border window whose values are all negative has a negative max
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.append(helper.make_tensor_value_info("p", onnx.TensorProto.FLOAT, None))
    pooled = ort.InferenceSession(probe.SerializeToString()).run(["p"], {"x": x})[0]
    assert (pooled[..., 0, 0] < 0).sum() >= 2  # negative corners exist: the case is live
    assert compare_fp32(compiled.source, exe.reference, x)["cosine_vs_fp32"] > 0.99

"""Partitioning: nodes the accelerator does not run go to the host (onnxruntime in fp32 on
dequantized inputs), the rest form device segments, and the whole runs bit-exact against the
reference and close to fp32 onnxruntime; plus the ops that keep torch exports on the
accelerator (ReduceMean as a global pool, Dropout with a mask output, MaxPool ceil_mode)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import zoo
from arch import executable, isa
from arch.config import PRESETS
from arch.executable import DeviceProgram, HostStep
from arch.reference import evaluate, quantize_input
from compiler.compile import compile_model
from compiler.errors import CompileError
from compiler.onnx import load_onnx
from sim.quality.accuracy import compare_fp32
from sim.runtime.host import run_host_step
from sim.runtime.run import run
from tests.twin_check import assert_twin_agrees

TINY = PRESETS["tiny"]


def model_of(nodes, inits, x_shape, opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10  # the pinned onnx writes 14, which the pinned onnxruntime cannot read
    return model


def conv(name, x, y, cin, cout, rng, k=3):
    node = helper.make_node(
        "Conv", [x, f"{name}.w", f"{name}.b"], [y], name=name, kernel_shape=[k, k],
        pads=[k // 2] * 4,
    )  # fmt: skip
    w = rng.normal(0, (2 / (cin * k * k)) ** 0.5, (cout, cin, k, k)).astype(np.float32)
    return node, {f"{name}.w": w, f"{name}.b": rng.normal(0, 0.1, cout).astype(np.float32)}


def partitioned_model(seed: int = 0) -> onnx.ModelProto:
    """conv -> LRN (host) -> conv -> InstanceNormalization (host) -> global pool -> FC."""
    rng = np.random.default_rng(seed)
    c1, i1 = conv("c1", "x", "a", 3, 16, rng)
    c2, i2 = conv("c2", "n", "b", 16, 16, rng)
    nodes = [
        c1,
        helper.make_node("Relu", ["a"], ["ar"], name="r1"),
        helper.make_node("LRN", ["ar"], ["n"], name="lrn", size=5),
        c2,
        helper.make_node("InstanceNormalization", ["b", "in.s", "in.b"], ["n2"], name="inorm"),
        helper.make_node("GlobalAveragePool", ["n2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flat"),
        helper.make_node("MatMul", ["f", "fc.w"], ["y"], name="fc"),
    ]
    inits = {
        **i1,
        **i2,
        "in.s": rng.uniform(0.5, 1.5, 16).astype(np.float32),
        "in.b": rng.normal(0, 0.5, 16).astype(np.float32),
        "fc.w": rng.normal(0, 0.25, (16, 10)).astype(np.float32),
    }
    return model_of(nodes, inits, [1, 3, 16, 16])


def test_partitioned_graph_is_device_host_device(tmp_path) -> None:
    model = partitioned_model()
    onnx.save(model, tmp_path / "p.onnx")
    compiled = compile_model(tmp_path / "p.onnx", TINY)
    exe = compiled.executable
    kinds = ["device" if isinstance(s, DeviceProgram) else s.op for s in exe.steps]
    assert kinds == ["device", "host", "device", "host", "device"]
    hosts = [s for s in exe.steps if isinstance(s, HostStep)]
    assert [exe.reference.producer(s.outputs[0]).attrs["onnx_ops"] for s in hosts] == [
        ("LRN",),
        ("InstanceNormalization",),
    ]
    for seed in (0, 1):
        x = np.random.default_rng(seed).standard_normal((1, 3, 16, 16)).astype(np.float32)
        result = run(exe, x, "isa")
        assert result.bit_exact, result.first_mismatch
        assert [la.device for la in result.layers] == [
            "accel", "host", "accel", "host", "accel", "accel",
        ]  # fmt: skip
        # the run's output is the fp32 model's, up to int8 quantization
        fp32 = ort.InferenceSession(model.SerializeToString()).run(["y"], {"x": x})[0]
        got = result.outputs["y"]
        cosine = float(np.dot(got.ravel(), fp32.ravel()))
        cosine /= float(np.linalg.norm(got) * np.linalg.norm(fp32))
        assert cosine > 0.99
        assert compare_fp32(compiled.source, exe.reference, x)["cosine_vs_fp32"] > 0.99
    assert hosts[0].reason == "lrn (LRN): op LRN has no accelerator mapping"
    assert hosts[1].reason.startswith("inorm (InstanceNormalization): op InstanceNormalization")
    # a saved executable with host steps runs the same, and keeps why they are there
    loaded = executable.load(executable.save(exe, tmp_path / "p.cosim"))
    assert [s for s in loaded.steps if isinstance(s, HostStep)] == hosts
    again = run(loaded, x, "isa")
    np.testing.assert_array_equal(again.outputs["y"], result.outputs["y"])
    assert [la.cycles for la in again.layers] == [la.cycles for la in result.layers]


def test_host_step_output_is_checked(tmp_path, monkeypatch) -> None:
    """A host step whose result differs from the reference's is reported as a mismatch of that
    host layer (and the device layer after it, which reads it), not passed."""
    exe = compile_model(_saved(partitioned_model(), tmp_path), TINY).executable
    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
    real = run_host_step

    def off_by_one(step, values, graph):
        real(step, values, graph)
        [out] = step.outputs
        values[out] = np.clip(values[out].astype(np.int16) + 1, -128, 127).astype(np.int8)

    monkeypatch.setattr("sim.runtime.execute.run_host_step", off_by_one)
    result = run(exe, x, "isa")
    assert not result.bit_exact
    assert (result.first_mismatch.name, result.first_mismatch.device) == ("lrn", "host")
    assert not result.layers[2].bit_exact  # c2 computed on the wrong input


def _two_host_values(seed: int = 0) -> onnx.ModelProto:
    """conv -> LRN (a) -> InstanceNormalization (b), both read by the device (a conv each,
    then an Add): one host region with two values read outside it."""
    rng = np.random.default_rng(seed)
    c1, i1 = conv("c1", "x", "c", 3, 16, rng)
    c2, i2 = conv("c2", "a", "d", 16, 16, rng)
    c3, i3 = conv("c3", "b", "e", 16, 16, rng)
    nodes = [
        c1,
        helper.make_node("LRN", ["c"], ["a"], name="lrn", size=5),
        helper.make_node("InstanceNormalization", ["a", "in.s", "in.b"], ["b"], name="inorm"),
        c2,
        c3,
        helper.make_node("Add", ["d", "e"], ["y"], name="add"),
    ]
    inits = {
        **i1, **i2, **i3,
        "in.s": rng.uniform(0.5, 1.5, 16).astype(np.float32),
        "in.b": rng.normal(0, 0.5, 16).astype(np.float32),
    }  # fmt: skip
    return model_of(nodes, inits, [1, 3, 16, 16])


def test_the_host_nodes_between_two_programs_are_one_step(tmp_path) -> None:
    """Two host values between the same two device programs: one host step (one read-back,
    one launch after it) computing both, each checked against the reference as its own layer;
    the step survives a save and load."""
    exe = compile_model(_saved(_two_host_values(), tmp_path), TINY).executable
    kinds = ["device" if isinstance(s, DeviceProgram) else s.op for s in exe.steps]
    assert kinds == ["device", "host", "device"]
    [host] = [s for s in exe.steps if isinstance(s, HostStep)]
    assert sorted(host.outputs) == ["a", "b"] and host.inputs == ["c"]
    x = np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    hosted = [la for la in result.layers if la.device == "host"]
    assert [la.name for la in hosted] == [exe.reference.producer(n).name for n in host.outputs]
    assert [la.op for la in hosted] == ["host:LRN+InstanceNormalization"] * 2
    path = tmp_path / "two.cosim"
    executable.save(exe, path)
    again = run(executable.load(path), x, "isa")
    np.testing.assert_array_equal(again.outputs["y"], result.outputs["y"])


def test_a_wrong_second_output_of_a_host_step_is_its_mismatch(tmp_path, monkeypatch) -> None:
    """Each output of a host step is checked: a wrong second one is reported as that node's
    mismatch (the first stays exact)."""
    exe = compile_model(_saved(_two_host_values(), tmp_path), TINY).executable
    x = np.random.default_rng(5).standard_normal((1, 3, 16, 16)).astype(np.float32)
    real = run_host_step

    def second_off_by_one(step, values, graph):
        real(step, values, graph)
        out = step.outputs[-1]
        values[out] = np.clip(values[out].astype(np.int16) + 1, -128, 127).astype(np.int8)

    monkeypatch.setattr("sim.runtime.execute.run_host_step", second_off_by_one)
    result = run(exe, x, "isa")
    hosted = [la for la in result.layers if la.device == "host"]
    assert [la.bit_exact for la in hosted] == [True, False]
    [host] = [s for s in exe.steps if isinstance(s, HostStep)]
    assert result.first_mismatch.name == exe.reference.producer(host.outputs[-1]).name


def test_model_with_the_pinned_onnx_ir_version_compiles(tmp_path) -> None:
    model = partitioned_model()
    model.ir_version = onnx.IR_VERSION  # newer than onnxruntime reads
    exe = compile_model(_saved(model, tmp_path), TINY).executable
    x = np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype(np.float32)
    assert run(exe, x, "isa").bit_exact


def _saved(model: onnx.ModelProto, tmp_path) -> str:
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return str(path)


@pytest.mark.parametrize(("opset", "keepdims"), [(13, 1), (13, 0), (18, 1), (18, 0)])
def test_reduce_mean_over_hw_is_a_global_pool(opset, keepdims, tmp_path) -> None:
    rng = np.random.default_rng(opset + keepdims)
    c1, i1 = conv("c1", "x", "a", 3, 16, rng)
    if opset >= 18:
        mean = helper.make_node("ReduceMean", ["a", "axes"], ["m"], name="mean", keepdims=keepdims)
        inits = {**i1, "axes": np.array([2, 3], np.int64)}
    else:
        mean = helper.make_node(
            "ReduceMean", ["a"], ["m"], name="mean", axes=[2, 3], keepdims=keepdims
        )
        inits = dict(i1)
    tail = [] if keepdims == 0 else [helper.make_node("Flatten", ["m"], ["m2"], name="flat")]
    fc_in = "m" if keepdims == 0 else "m2"
    nodes = [c1, mean, *tail, helper.make_node("MatMul", [fc_in, "w"], ["y"], name="fc")]
    inits["w"] = rng.normal(0, 0.3, (16, 10)).astype(np.float32)
    model = model_of(nodes, inits, [1, 3, 8, 8], opset=opset)
    graph = load_onnx(model)
    assert "host" not in [n.op for n in graph.nodes]
    assert "global_avgpool" in [n.op for n in graph.nodes]
    compiled = compile_model(_saved(model, tmp_path), TINY)
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    result = run(compiled.executable, x, "isa")
    assert result.bit_exact and all(la.device == "accel" for la in result.layers)
    assert compare_fp32(compiled.source, compiled.executable.reference, x)["cosine_vs_fp32"] > 0.99


def test_reduce_mean_over_channels_goes_to_the_host() -> None:
    rng = np.random.default_rng(5)
    c1, i1 = conv("c1", "x", "a", 3, 8, rng)
    mean = helper.make_node("ReduceMean", ["a"], ["y"], name="mean", axes=[1], keepdims=1)
    graph = load_onnx(model_of([c1, mean], i1, [1, 3, 8, 8], opset=13))
    [host] = [n for n in graph.nodes if n.op == "host"]
    assert "axes [1] are not supported" in graph.host_reasons[host.name]


@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_mean_over_tokens_is_a_global_pool_of_their_map(keepdims, tmp_path) -> None:
    """LeViT's head: the mean over the tokens of (1, T, C) - a global average pool of the
    tokens viewed as a (1, C, T, 1) map - on the device, bit-exact, and the twin agrees
    (it was a host step: axes [1] are not supported)."""
    rng = np.random.default_rng(11 + keepdims)
    mean = helper.make_node("ReduceMean", ["t"], ["m"], name="mean", axes=[1], keepdims=keepdims)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["t"], name="proj"),
        mean,
        helper.make_node("MatMul", ["m", "w2"], ["y"], name="fc"),
    ]
    inits = {
        "w1": rng.normal(0, 0.3, (16, 32)).astype(np.float32),
        "w2": rng.normal(0, 0.3, (32, 10)).astype(np.float32),
    }
    model = model_of(nodes, inits, [1, 12, 16], opset=13)
    compiled = compile_model(_saved(model, tmp_path), PRESETS["default"])
    assert not [s for s in compiled.executable.steps if isinstance(s, HostStep)]
    x = rng.standard_normal((1, 12, 16)).astype(np.float32)
    result = run(compiled.executable, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert "global_avgpool" in [la.op for la in result.layers]
    assert_twin_agrees(model, compiled.executable.reference, [x])


def test_dropout_mask_output_unused_is_accepted_used_goes_to_host() -> None:
    rng = np.random.default_rng(6)
    c1, i1 = conv("c1", "x", "a", 3, 8, rng)
    drop = helper.make_node("Dropout", ["a"], ["y", "mask"], name="drop")
    graph = load_onnx(model_of([c1, drop], i1, [1, 3, 8, 8], opset=12))
    assert [n.op for n in graph.nodes] == ["conv", "identity"]
    cast = helper.make_node("Cast", ["mask"], ["mf"], name="cast", to=TensorProto.FLOAT)
    add = helper.make_node("Add", ["y0", "mf"], ["y"], name="add")
    drop = helper.make_node("Dropout", ["a"], ["y0", "mask"], name="drop")
    graph = load_onnx(model_of([c1, drop, cast, add], i1, [1, 3, 8, 8], opset=12))
    hosts = [n for n in graph.nodes if n.op == "host"]
    assert hosts and "its mask output is read" in graph.host_reasons[hosts[0].name]


@pytest.mark.parametrize("size", [8, 9])
def test_max_pool_ceil_mode_stays_on_the_array(size) -> None:
    """Where ceil_mode changes nothing (8) and where it adds a window row and column (9, as
    bottom/right padding; tests/unit/back/test_window_ops.py runs it)."""
    rng = np.random.default_rng(7)
    c1, i1 = conv("c1", "x", "a", 3, 8, rng)
    pool = helper.make_node(
        "MaxPool", ["a"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1
    )
    graph = load_onnx(model_of([c1, pool], i1, [1, 3, size, size], opset=13))
    [node] = [n for n in graph.nodes if n.op == "maxpool"]
    assert node.attrs["pads"] == (0, 0, size % 2, size % 2)


def test_resnet_with_reduce_mean_has_the_zoo_cycles(tmp_path) -> None:
    """torch's default exporter writes the global pool as ReduceMean: same program, same
    cycles as the zoo ResNet-18 (whose pool is GlobalAveragePool)."""
    model = zoo.build("resnet18", image_size=64, seed=0)
    [gap] = [n for n in model.graph.node if n.op_type == "GlobalAveragePool"]
    mean = helper.make_node("ReduceMean", list(gap.input), list(gap.output), name=gap.name)
    mean.attribute.extend(
        [helper.make_attribute("axes", [-2, -1]), helper.make_attribute("keepdims", 1)]
    )
    gap.CopyFrom(mean)
    config = PRESETS["default"]
    zoo_exe = compile_model("resnet18", config, image_size=64, seed=0).executable
    exe = compile_model(_saved(model, tmp_path), config).executable
    x = np.random.default_rng(1).standard_normal(exe.input.shape).astype(np.float32)
    ours, theirs = run(exe, x, "isa"), run(zoo_exe, x, "isa")
    assert ours.bit_exact and [la.cycles for la in ours.layers] == [
        la.cycles for la in theirs.layers
    ]


def test_non_float_values_between_steps_are_refused_by_name() -> None:
    """An int64 index from a host node, read by host nodes after an accelerator node, cannot
    cross the int8 boundary: one clear error, not a silently quantized index."""
    rng = np.random.default_rng(9)
    c1, i1 = conv("c1", "x", "a", 3, 8, rng)
    c2, i2 = conv("c2", "a", "b", 8, 8, rng)
    nodes = [
        c1,
        helper.make_node("ArgMax", ["a"], ["idx"], name="argmax", axis=1, keepdims=1),
        c2,
        helper.make_node("Cast", ["idx"], ["f"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Add", ["b", "f"], ["y"], name="add"),
    ]
    with pytest.raises(CompileError) as info:
        load_onnx(model_of(nodes, {**i1, **i2}, [1, 3, 8, 8]))
    assert "'argmax' (ArgMax): its INT64 output 'idx'" in str(info.value)


def depthwise_model(
    channels: int,
    stride: int | tuple[int, int],
    seed: int,
    *,
    kernel: int = 3,
    dilation: int = 1,
    pads: list[int] | None = None,
) -> onnx.ModelProto:
    """conv 3 -> C, BN, depthwise kxk (stride, dilation) + bias, ReLU6, pointwise C -> 8."""
    rng = np.random.default_rng(seed)
    strides = list(stride) if isinstance(stride, tuple) else [stride, stride]
    half = dilation * (kernel - 1) // 2
    c1, i1 = conv("c1", "x", "a", 3, channels, rng)
    dw = helper.make_node(
        "Conv", ["a", "dw.w", "dw.b"], ["d"], name="dw", kernel_shape=[kernel, kernel],
        pads=pads or [half] * 4, strides=strides, dilations=[dilation, dilation], group=channels,
    )  # fmt: skip
    clip = helper.make_node("Clip", ["d", "lo", "hi"], ["r"], name="relu6")
    pw, i2 = conv("pw", "r", "y", channels, 8, rng, k=1)
    inits = {
        **i1,
        **i2,
        "dw.w": rng.normal(0, 0.4, (channels, 1, kernel, kernel)).astype(np.float32),
        "dw.b": rng.normal(0, 0.1, channels).astype(np.float32),
        "lo": np.float32(0.0),
        "hi": np.float32(6.0),
    }
    return model_of([c1, dw, clip, pw], inits, [1, 3, 12, 12])


def layer_opcodes(exe, name: str) -> set[str]:
    """Mnemonics of the instructions the compiler emitted for layer ``name``."""
    for program in exe.programs:
        for layer in program.layers:
            if layer.name == name:
                base = program.launch.insn_base
                words = program.image[
                    base + layer.insn_range[0] * isa.INSN_BYTES : base
                    + layer.insn_range[1] * isa.INSN_BYTES
                ].tobytes()
                return {
                    isa.decode_insn(word).format.name
                    for word in isa.bytes_to_words(words, isa.INSN_BYTES)
                }
    raise AssertionError(f"no device layer {name}")


@pytest.mark.parametrize(("channels", "stride", "config"), [(20, 1, "tiny"), (40, 2, "default")])
def test_depthwise_conv_runs_on_the_array(channels, stride, config, tmp_path) -> None:
    """Depthwise on the accelerator (DWCONV on the window unit): all MACs there, bit-exact
    against the reference, close to fp32 onnxruntime; channels not a multiple of the array
    width are padded."""
    model = depthwise_model(channels, stride, seed=channels)
    compiled = compile_model(_saved(model, tmp_path), PRESETS[config])
    exe = compiled.executable
    assert len(exe.programs) == 1 and [s.op for s in exe.steps if isinstance(s, HostStep)] == []
    x = np.random.default_rng(stride).standard_normal((1, 3, 12, 12)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    dw = next(la for la in result.layers if la.name == "dw")
    out = 12 // stride
    assert dw.macs == channels * 9 * out * out  # the real MACs, not the padded array's
    assert compare_fp32(compiled.source, exe.reference, x)["cosine_vs_fp32"] > 0.99
    # the layer runs on the window unit, not through the array
    assert "dwconv" in layer_opcodes(exe, "dw") and "gemm" not in layer_opcodes(exe, "dw")


@pytest.mark.parametrize(
    ("kernel", "stride", "dilation", "pads", "config"),
    [
        (5, 1, 1, None, "tiny"),  # 4 passes of <= 3x3 taps accumulating
        (5, 2, 1, None, "default"),
        (3, 1, 2, None, "tiny"),  # dilated: one 1x1 pass per tap
        (3, 3, 1, [0, 2, 1, 0], "tiny"),  # stride 3, asymmetric padding
        (2, 2, 1, [0, 0, 0, 0], "default"),  # even kernel, no padding
        (1, 1, 1, [0, 0, 0, 0], "tiny"),
    ],
)
def test_depthwise_kernels_strides_dilations_bit_exact(
    kernel, stride, dilation, pads, config, tmp_path
) -> None:
    """DWCONV passes for kernels larger than the window, dilated kernels, stride 3 and
    asymmetric padding (by the DMA): bit-exact on the ISA simulator, close to onnxruntime."""
    model = depthwise_model(24, stride, seed=kernel + stride, kernel=kernel, dilation=dilation,
                            pads=pads)  # fmt: skip
    compiled = compile_model(_saved(model, tmp_path), PRESETS[config])
    exe = compiled.executable
    assert [s.op for s in exe.steps if isinstance(s, HostStep)] == []
    x = np.random.default_rng(kernel).standard_normal((1, 3, 12, 12)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert "dwconv" in layer_opcodes(exe, "dw") and "gemm" not in layer_opcodes(exe, "dw")
    assert compare_fp32(compiled.source, exe.reference, x)["cosine_vs_fp32"] > 0.98


def depthwise_residual_model(seed: int) -> onnx.ModelProto:
    """conv 3 -> 20, depthwise 3x3 whose output is added to its input (the Add fuses into the
    depthwise layer: an ACCUM adds bias and residual before the DWCONVs accumulate)."""
    rng = np.random.default_rng(seed)
    c1, i1 = conv("c1", "x", "a", 3, 20, rng)
    dw = helper.make_node(
        "Conv", ["a", "dw.w", "dw.b"], ["d"], name="dw", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
        group=20,
    )  # fmt: skip
    add = helper.make_node("Add", ["d", "a"], ["y"], name="add")
    inits = {
        **i1,
        "dw.w": rng.normal(0, 0.4, (20, 1, 3, 3)).astype(np.float32),
        "dw.b": rng.normal(0, 0.1, 20).astype(np.float32),
    }
    return model_of([c1, dw, add], inits, [1, 3, 12, 12])


def test_depthwise_with_a_fused_residual_add(tmp_path) -> None:
    exe = compile_model(_saved(depthwise_residual_model(2), tmp_path), PRESETS["tiny"]).executable
    assert [la.name for la in exe.layers] == ["c1", "dw"]  # the Add is part of the dw layer
    assert {"accum", "dwconv"} <= layer_opcodes(exe, "dw")
    x = np.random.default_rng(4).standard_normal((1, 3, 12, 12)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch


def test_depthwise_with_unequal_strides_goes_to_the_host(tmp_path) -> None:
    """DWCONV has one stride for x and y: a depthwise conv with strides (1, 2) runs on the host,
    and the graph stays bit-exact."""
    model = depthwise_model(16, (1, 2), seed=3)
    compiled = compile_model(_saved(model, tmp_path), PRESETS["tiny"])
    exe = compiled.executable
    x = np.random.default_rng(0).standard_normal((1, 3, 12, 12)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert [la.device for la in result.layers if la.name == "dw"] == ["host"]


def dilated_model(dilation: int, stride: int, seed: int) -> onnx.ModelProto:
    """conv 3 -> 16, dilated 3x3 conv 16 -> 24 (padded to keep the size at stride 1), conv
    1x1. (onnxruntime refuses dilation with SAME_UPPER, so pads are explicit.)"""
    rng = np.random.default_rng(seed)
    c1, i1 = conv("c1", "x", "a", 3, 16, rng)
    pads = {"pads": [dilation] * 4}
    dil = helper.make_node(
        "Conv", ["a", "d.w", "d.b"], ["d"], name="dilated", kernel_shape=[3, 3],
        dilations=[dilation, dilation], strides=[stride, stride], **pads,
    )  # fmt: skip
    relu = helper.make_node("Relu", ["d"], ["r"], name="relu")
    pw, i2 = conv("pw", "r", "y", 24, 8, rng, k=1)
    inits = {
        **i1,
        **i2,
        "d.w": rng.normal(0, 0.12, (24, 16, 3, 3)).astype(np.float32),
        "d.b": rng.normal(0, 0.1, 24).astype(np.float32),
    }
    return model_of([c1, dil, relu, pw], inits, [1, 3, 13, 13])


@pytest.mark.parametrize(("dilation", "stride"), [(2, 1), (3, 2)])
def test_dilated_conv_runs_on_the_array(dilation, stride, tmp_path) -> None:
    model = dilated_model(dilation, stride, seed=dilation)
    compiled = compile_model(_saved(model, tmp_path), TINY)
    x = np.random.default_rng(stride).standard_normal((1, 3, 13, 13)).astype(np.float32)
    result = run(compiled.executable, x, "isa")
    assert result.bit_exact and all(la.device == "accel" for la in result.layers)
    fp32 = ort.InferenceSession(model.SerializeToString()).run(["y"], {"x": x})[0]
    assert result.outputs["y"].shape == fp32.shape
    accuracy = compare_fp32(compiled.source, compiled.executable.reference, x)
    assert accuracy["cosine_vs_fp32"] > 0.99


def fire_model(seed: int, expand: tuple[int, int] = (16, 16), cat_input: str | None = None):
    """SqueezeNet's fire module: squeeze 1x1, expand 1x1 and 3x3, Concat along channels, then
    a max pool and a 1x1 conv reading the concat. ``cat_input`` adds a third concat input."""
    rng = np.random.default_rng(seed)
    c1, i1 = conv("c1", "x", "a", 3, 16, rng)
    sq, i2 = conv("squeeze", "ar", "s", 16, 8, rng, k=1)
    e1, i3 = conv("e1", "sr", "p", 8, expand[0], rng, k=1)
    e3, i4 = conv("e3", "sr", "q", 8, expand[1], rng, k=3)
    parts = ["pr", "qr", *([cat_input] if cat_input else [])]
    total = sum(expand) + (3 if cat_input == "x" else 16 if cat_input else 0)
    f, i5 = conv("final", "mp", "y", total, 10, rng, k=1)
    nodes = [
        c1,
        helper.make_node("Relu", ["a"], ["ar"], name="r0"),
        sq,
        helper.make_node("Relu", ["s"], ["sr"], name="r1"),
        e1,
        e3,
        helper.make_node("Relu", ["p"], ["pr"], name="r2"),
        helper.make_node("Relu", ["q"], ["qr"], name="r3"),
        helper.make_node("Concat", parts, ["cat"], name="cat", axis=1),
        helper.make_node(
            "MaxPool", ["cat"], ["mp"], name="mp", kernel_shape=[2, 2], strides=[2, 2]
        ),
        f,
    ]
    return model_of(nodes, {**i1, **i2, **i3, **i4, **i5}, [1, 3, 16, 16])


@pytest.mark.parametrize("config", ["tiny", "default"])
def test_concat_costs_no_copy(config, tmp_path) -> None:
    """The expand convs write straight into their slices of the concat buffer: no concat
    layer runs, the result is bit-exact and close to fp32, the saved executable the same."""
    compiled = compile_model(_saved(fire_model(1), tmp_path), PRESETS[config])
    exe = compiled.executable
    assert len(exe.steps) == 1 and "cat" not in [la.name for la in exe.layers]
    [program] = exe.programs
    cat, pr, qr = (program.tensors.get(n) for n in ("cat", "pr", "qr"))
    assert cat is None or cat.addr == pr.addr  # (the buffer itself need not be read back)
    assert qr.addr == pr.addr + pr.channels and pr.pixel_stride == qr.pixel_stride == 32
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert compare_fp32(compiled.source, exe.reference, x)["cosine_vs_fp32"] > 0.99
    again = run(executable.load(executable.save(exe, tmp_path / "f.cosim")), x, "isa")
    np.testing.assert_array_equal(again.outputs["y"], result.outputs["y"])


@pytest.mark.parametrize(
    ("expand", "cat_input", "config", "why"),
    [
        ((20, 16), None, "default", "input 'pr' has 20 channels, not whole lines of 16"),
        ((16, 16), "x", "tiny", "input 'x' comes from the graph input"),
        ((16, 16), "pr", "tiny", "input 'pr' shares 'pr' with concat 'cat'"),
    ],
)
def test_concat_that_cannot_be_a_view_goes_to_the_host(
    expand, cat_input, config, why, tmp_path
) -> None:
    model = fire_model(3, expand, cat_input)
    compiled = compile_model(_saved(model, tmp_path), PRESETS[config])
    exe = compiled.executable
    [host] = [s for s in exe.steps if isinstance(s, HostStep)]
    assert host.name == "cat" and why in host.reason
    x = np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype(np.float32)
    assert run(exe, x, "isa").bit_exact
    assert compare_fp32(compiled.source, exe.reference, x)["cosine_vs_fp32"] > 0.99


def upsample_model(how: str, seed: int) -> onnx.ModelProto:
    """conv -> 2x nearest upsample, in several exporters' forms -> conv. ``skip`` is U-Net's
    pattern: conv, max pool, conv, upsample, Concat with the first conv's map, conv."""
    rng = np.random.default_rng(seed)
    c1, i1 = conv("c1", "x", "a", 3, 16, rng)
    pool = helper.make_node(
        "MaxPool", ["a"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]
    )
    c2, i2 = conv("c2", "p", "b", 16, 16, rng)
    inits, opset = {**i1, **i2}, 17
    if how == "upsample9":
        up = helper.make_node("Upsample", ["b", "sc"], ["u"], name="up", mode="nearest")
        inits["sc"], opset = np.array([1, 1, 2, 2], np.float32), 9
    elif how == "sizes":  # ONNX defaults: half_pixel, round_prefer_floor
        up = helper.make_node("Resize", ["b", "", "", "sz"], ["u"], name="up", mode="nearest")
        inits["sz"] = np.array([1, 16, 16, 16], np.int64)
    else:  # torch's nn.Upsample(scale_factor=2): asymmetric + floor
        up = helper.make_node(
            "Resize", ["b", "", "sc"], ["u"], name="up", mode="nearest",
            coordinate_transformation_mode="asymmetric", nearest_mode="floor",
        )  # fmt: skip
        inits["sc"] = np.array([1, 1, 2, 2], np.float32)
    nodes = [c1, pool, c2, up]
    tail, cin = "u", 16
    if how == "skip":
        nodes.append(helper.make_node("Concat", ["u", "a"], ["cat"], name="cat", axis=1))
        tail, cin = "cat", 32
    c3, i3 = conv("c3", tail, "y", cin, 8, rng)
    return model_of([*nodes, c3], {**inits, **i3}, [1, 3, 16, 16], opset=opset)


@pytest.mark.parametrize("how", ["torch", "sizes", "upsample9", "skip"])
def test_nearest_upsample_runs_on_the_array(how, tmp_path) -> None:
    """Nearest 2x upsampling: a copy into ACC, then one strided store per output position;
    bit-exact, and equal to onnxruntime's fp32 up to quantization."""
    model = upsample_model(how, seed=len(how))
    compiled = compile_model(_saved(model, tmp_path), TINY)
    exe = compiled.executable
    assert [s for s in exe.steps if isinstance(s, HostStep)] == []
    assert "up" in [la.name for la in exe.layers]
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert compare_fp32(compiled.source, exe.reference, x)["cosine_vs_fp32"] > 0.99


def test_resize_that_is_not_a_repeat_goes_to_the_host() -> None:
    rng = np.random.default_rng(3)
    c1, i1 = conv("c1", "x", "a", 3, 8, rng)
    up = helper.make_node("Resize", ["a", "", "sc"], ["y"], name="up", mode="linear")
    graph = load_onnx(
        model_of([c1, up], {**i1, "sc": np.array([1, 1, 2, 2], np.float32)}, [1, 3, 8, 8])
    )
    [host] = [n for n in graph.nodes if n.op == "host"]
    assert "mode 'linear' is not supported" in graph.host_reasons[host.name]


def test_node_the_back_end_cannot_place_goes_to_the_host(tmp_path) -> None:
    """A 1x1 conv whose output rows are 600 pixels finds no tiling in the tiny config's ACC
    (512 lines a half): it runs on the host (with that reason), the pool after it on the
    array; the default config's memories hold it."""
    rng = np.random.default_rng(11)
    c1, i1 = conv("c1", "x", "a", 3, 8, rng, k=1)
    pool = helper.make_node(
        "MaxPool", ["a"], ["y"], name="pool", kernel_shape=[1, 2], strides=[1, 2]
    )
    model = model_of([c1, pool], i1, [1, 3, 2, 600])
    exe = compile_model(_saved(model, tmp_path), TINY).executable
    [host] = [s for s in exe.steps if isinstance(s, HostStep)]
    assert host.name == "c1" and "no tiling fits" in host.reason
    x = np.random.default_rng(12).standard_normal((1, 3, 2, 600)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact and [la.device for la in result.layers] == ["host", "accel"]
    default = compile_model(_saved(model, tmp_path), PRESETS["default"]).executable
    assert [s for s in default.steps if isinstance(s, HostStep)] == []


def test_global_pool_larger_than_act_runs_in_parts(tmp_path) -> None:
    """A global pool over 64 channels of 64x64 pixels does not fit the tiny config's ACT half
    (1024 lines): it is reduced a part of its rows per step, accumulating in ACC - bit-exact,
    on the array, close to onnxruntime's mean."""
    rng = np.random.default_rng(11)
    c1, i1 = conv("c1", "x", "a", 3, 64, rng)
    mean = helper.make_node("ReduceMean", ["a", "axes"], ["y"], name="mean", keepdims=1)
    model = model_of([c1, mean], {**i1, "axes": np.array([2, 3], np.int64)}, [1, 3, 64, 64], 18)
    compiled = compile_model(_saved(model, tmp_path), TINY)
    exe = compiled.executable
    assert not [s for s in exe.steps if isinstance(s, HostStep)]
    x = np.random.default_rng(12).standard_normal((1, 3, 64, 64)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact and [la.device for la in result.layers] == ["accel", "accel"]
    assert compare_fp32(compiled.source, exe.reference, x)["cosine_vs_fp32"] > 0.99


@pytest.mark.parametrize("config", ["tiny", "default"])
def test_a_torch_export_runs(config) -> None:
    """A model exported by torch.onnx.export (dynamo, opset 20; tests/fixtures/torch): ReLU6,
    a depthwise conv, a residual, nearest upsampling, Concat, SiLU (after the Concat, as a
    table layer) and the mean over H, W run on the array; bit-exact and close to fp32."""
    path = Path(__file__).resolve().parents[2] / "fixtures" / "torch" / "mixed_torch.onnx"
    compiled = compile_model(path, PRESETS[config])
    exe = compiled.executable
    hosts = [exe.reference.producer(s.outputs[0]) for s in exe.steps if isinstance(s, HostStep)]
    # SiLU reads the Concat (a view, no store to put a table in): a table layer of its own
    assert [n.attrs["onnx_ops"] for n in hosts if "mean" not in n.name] == []
    assert any(n.op == "scale" and n.attrs["act"] == "table" for n in exe.reference.nodes)
    ops = {la.op for la in exe.layers}
    assert {"upsample", "global_avgpool"} <= ops or config == "tiny"
    x = np.random.default_rng(13).standard_normal((1, 3, 64, 64)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert compare_fp32(compiled.source, exe.reference, x)["cosine_vs_fp32"] > 0.99


def _run_and_reload(model: onnx.ModelProto, tmp_path, x_shape) -> None:
    """Compiles, runs bit-exact and close to fp32, and a saved copy reloads and runs the same."""
    compiled = compile_model(_saved(model, tmp_path), TINY)
    exe = compiled.executable
    assert all(p.layers for p in exe.programs)  # no device program without a layer
    x = np.random.default_rng(21).standard_normal(x_shape).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert compare_fp32(compiled.source, exe.reference, x)["cosine_vs_fp32"] > 0.99
    again = run(executable.load(executable.save(exe, tmp_path / "m.cosim")), x, "isa")
    for name, value in result.outputs.items():
        np.testing.assert_array_equal(again.outputs[name], value)


def test_flatten_between_host_nodes_is_no_empty_program(tmp_path) -> None:
    rng = np.random.default_rng(22)
    c1, i1 = conv("c1", "x", "a", 3, 8, rng)
    nodes = [
        c1,
        helper.make_node("LpNormalization", ["a"], ["t"], name="norm", axis=1),
        helper.make_node("Flatten", ["t"], ["f"], name="flat"),
        helper.make_node("Sigmoid", ["f"], ["s"], name="sig"),
        helper.make_node("MatMul", ["s", "w"], ["y"], name="fc"),
    ]
    inits = {**i1, "w": rng.normal(0, 0.1, (8 * 36, 10)).astype(np.float32)}
    _run_and_reload(model_of(nodes, inits, [1, 3, 6, 6]), tmp_path, (1, 3, 6, 6))


def test_torch_flatten_shape_arithmetic_is_folded(tmp_path) -> None:
    """torch's x.view(x.size(0), -1): Shape, Gather, Unsqueeze, Concat of constants, Reshape -
    all folded at compile time, one device program."""
    rng = np.random.default_rng(23)
    c1, i1 = conv("c1", "x", "a", 3, 8, rng)
    nodes = [
        c1,
        helper.make_node("Shape", ["a"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="unsqueeze"),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], name="cat", axis=0),
        helper.make_node("Reshape", ["a", "target"], ["f"], name="reshape"),
        helper.make_node("MatMul", ["f", "w"], ["y"], name="fc"),
    ]
    inits = {
        **i1,
        "zero": np.array(0, np.int64),
        "axes": np.array([0], np.int64),
        "minus1": np.array([-1], np.int64),
        "w": rng.normal(0, 0.1, (8 * 36, 10)).astype(np.float32),
    }
    model = model_of(nodes, inits, [1, 3, 6, 6])
    exe = compile_model(_saved(model, tmp_path), TINY).executable
    assert len(exe.steps) == 1
    _run_and_reload(model, tmp_path, (1, 3, 6, 6))


def test_host_value_read_through_a_cast_is_fetched(tmp_path) -> None:
    """A host region's value that leaves it only through a Cast (an alias) is still fetched."""
    rng = np.random.default_rng(24)
    c1, i1 = conv("c1", "x", "a", 3, 8, rng)
    c2, i2 = conv("c2", "b", "y", 8, 8, rng)
    nodes = [
        c1,
        helper.make_node("Tanh", ["a"], ["t"], name="tanh"),
        helper.make_node("Cast", ["t"], ["t2"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Sigmoid", ["a"], ["b"], name="sig"),
        c2,
    ]
    model = model_of(nodes, {**i1, **i2}, [1, 3, 6, 6])
    model.graph.output.append(helper.make_tensor_value_info("t2", TensorProto.FLOAT, None))
    _run_and_reload(model, tmp_path, (1, 3, 6, 6))


def test_softmax_read_by_other_nodes_runs_on_the_host(tmp_path) -> None:
    rng = np.random.default_rng(25)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["logits"], name="fc"),
        helper.make_node("Softmax", ["logits"], ["p"], name="softmax", axis=-1),
        helper.make_node("Log", ["p"], ["y"], name="log"),
    ]
    model = model_of(nodes, {"w": rng.normal(0, 0.3, (16, 10)).astype(np.float32)}, [1, 16])
    _run_and_reload(model, tmp_path, (1, 16))


def test_views_and_host_shapes_round_trip(tmp_path) -> None:
    """What the compiler writes reloads: a concat as graph output, an upsample layer, and a
    3-D host tensor as graph output."""
    rng = np.random.default_rng(26)
    c1, i1 = conv("c1", "x", "a", 3, 16, rng)
    c2, i2 = conv("c2", "x", "b", 3, 16, rng)
    up = helper.make_node(
        "Resize", ["y0", "", "sc"], ["up"], name="up", mode="nearest",
        coordinate_transformation_mode="asymmetric", nearest_mode="floor",
    )  # fmt: skip
    nodes = [
        c1,
        c2,
        helper.make_node("Concat", ["a", "b"], ["y0"], name="cat", axis=1),
        up,
        helper.make_node("Reshape", ["up", "shape"], ["r"], name="reshape"),
        helper.make_node("Tanh", ["r"], ["y"], name="tanh"),
    ]
    inits = {**i1, **i2, "sc": np.array([1, 1, 2, 2], np.float32)}
    inits["shape"] = np.array([1, 32, 64], np.int64)
    model = model_of(nodes, inits, [1, 3, 4, 4])
    model.graph.output.append(helper.make_tensor_value_info("y0", TensorProto.FLOAT, None))
    _run_and_reload(model, tmp_path, (1, 3, 4, 4))


def test_host_nodes_that_only_move_codes_are_exact(tmp_path) -> None:
    """A host step of Transpose / MaxPool / Reshape alone keeps its input's scale, so its int8
    codes are exactly the input's moved (numpy on the codes, not onnxruntime, is the reference
    here); a host step that computes (an InstanceNormalization) is requantized at its own
    calibrated scale."""
    rng = np.random.default_rng(31)
    c1, i1 = conv("c1", "x", "a", 3, 8, rng)
    c2, i2 = conv("c2", "t2", "b", 8, 8, rng)
    nodes = [
        c1,
        helper.make_node("Transpose", ["a"], ["t1"], name="t1", perm=[0, 1, 3, 2]),
        helper.make_node(
            "MaxPool", ["t1"], ["m"], name="mp", kernel_shape=[3, 3], dilations=[2, 2]
        ),
        helper.make_node("Transpose", ["m"], ["t2"], name="t2", perm=[0, 1, 3, 2]),
        c2,
        helper.make_node("InstanceNormalization", ["b", "s", "z"], ["y"], name="norm"),
    ]
    inits = {**i1, **i2, "s": np.ones(8, np.float32), "z": np.zeros(8, np.float32)}
    exe = compile_model(_saved(model_of(nodes, inits, [1, 3, 10, 10]), tmp_path), TINY).executable
    hosts = [exe.reference.producer(s.outputs[0]) for s in exe.steps if isinstance(s, HostStep)]
    assert [set(n.attrs["onnx_ops"]) for n in hosts] == [
        {"Transpose", "MaxPool"},
        {"InstanceNormalization"},
    ]
    moved, computed = hosts
    tensors = exe.reference.tensors
    assert tensors[moved.output].scale == tensors[moved.inputs[0]].scale
    assert tensors[computed.output].scale != tensors[computed.inputs[0]].scale
    x = np.random.default_rng(32).standard_normal((1, 3, 10, 10)).astype(np.float32)
    values = evaluate(exe.reference, quantize_input(x, tensors["x"].scale))
    a = values[moved.inputs[0]].astype(np.int64)
    windows = np.stack([a[:, :, i : i + 6 : 1, j : j + 6] for i in (0, 2, 4) for j in (0, 2, 4)])
    np.testing.assert_array_equal(values[moved.output], windows.max(axis=0))
    assert run(exe, x, "isa").bit_exact

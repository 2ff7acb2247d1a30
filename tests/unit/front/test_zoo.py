"""The model zoo: torchvision-exact ResNet topologies, valid runnable ONNX, seeded determinism, CLI.

Expectations (parameter and op counts) come from the published torchvision numbers and from the
architecture tables below, never from the code under test. ImageNet-size (224) models are used
for structural checks only; onnxruntime runs them at small image sizes.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import zoo
from zoo.cli import main

REPO = Path(__file__).resolve().parents[3]

#: torchvision architectures: block type, blocks per stage.
ARCH: dict[int, tuple[str, tuple[int, ...]]] = {
    18: ("basic", (2, 2, 2, 2)),
    34: ("basic", (3, 4, 6, 3)),
    50: ("bottleneck", (3, 4, 6, 3)),
}
#: Published torchvision parameter counts (weights + biases + BN gamma/beta, no running stats).
TORCHVISION_PARAMS = {18: 11_689_512, 34: 21_797_672, 50: 25_557_032}

Builder = Callable[..., onnx.ModelProto]


@pytest.fixture(scope="module")
def built() -> Iterator[Builder]:
    """``built(name, image_size=None, seed=0)``: :func:`zoo.build`, cached for the module."""
    cache: dict[tuple[str, int | None, int], onnx.ModelProto] = {}

    def get(name: str, image_size: int | None = None, seed: int = 0) -> onnx.ModelProto:
        default = 224 if name.startswith("resnet") else 32 if name == "cnn" else None
        key = (name, default if image_size is None else image_size, seed)
        if key not in cache:
            cache[key] = zoo.build(name, image_size=image_size, seed=seed)
        return cache[key]

    yield get
    cache.clear()


def initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def learnable_parameter_count(model: onnx.ModelProto) -> int:
    """Conv/Gemm/MatMul/Add parameters plus BN gamma and beta (not the running stats)."""
    inits = initializers(model)
    total = 0
    for node in model.graph.node:
        inputs = node.input[1:3] if node.op_type == "BatchNormalization" else node.input
        if node.op_type == "Clip":
            continue
        total += sum(inits[name].size for name in inputs if name in inits)
    return total


def expected_resnet_ops(depth: int) -> Counter[str]:
    """Op counts of a torchvision ResNet, from :data:`ARCH`."""
    block, layers = ARCH[depth]
    convs_per_block = 2 if block == "basic" else 3
    expansion = 1 if block == "basic" else 4
    blocks = sum(layers)
    downsamples, cin = 0, 64
    for stage, planes in enumerate((64, 128, 256, 512)):
        stride = 1 if stage == 0 else 2
        downsamples += stride != 1 or cin != planes * expansion
        cin = planes * expansion
    convs = 1 + blocks * convs_per_block + downsamples
    return Counter(
        Conv=convs,
        BatchNormalization=convs,
        Relu=1 + blocks * convs_per_block,
        Add=blocks,
        MaxPool=1,
        GlobalAveragePool=1,
        Flatten=1,
        Gemm=1,
    )


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return np.asarray(session.run(["logits"], {"input": x})[0])


def input_shape(model: onnx.ModelProto) -> list[int]:
    return [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]


def node(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    (found,) = [n for n in model.graph.node if n.name == name]
    return found


def attrs(n: onnx.NodeProto) -> dict[str, object]:
    return {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}


# -- ResNet structure (224, no inference) --------------------------------------------------------


@pytest.mark.parametrize("depth", [18, 34, 50])
def test_resnet_parameter_count_matches_torchvision(built: Builder, depth: int) -> None:
    assert learnable_parameter_count(built(f"resnet{depth}")) == TORCHVISION_PARAMS[depth]


def test_parameter_count_does_not_depend_on_image_size(built: Builder) -> None:
    assert learnable_parameter_count(built("resnet18", 64)) == TORCHVISION_PARAMS[18]


@pytest.mark.parametrize("depth", [18, 34, 50])
def test_resnet_op_counts(built: Builder, depth: int) -> None:
    model = built(f"resnet{depth}")
    assert Counter(n.op_type for n in model.graph.node) == expected_resnet_ops(depth)


def test_resnet_op_count_examples() -> None:
    assert expected_resnet_ops(18)["Conv"] == 20 and expected_resnet_ops(18)["Add"] == 8
    assert expected_resnet_ops(50)["Conv"] == 53 and expected_resnet_ops(50)["Add"] == 16


@pytest.mark.parametrize("depth", [18, 34, 50])
def test_resnet_torchvision_topology(built: Builder, depth: int) -> None:
    model = built(f"resnet{depth}")
    inits = initializers(model)
    names = [n.name for n in model.graph.node]
    assert len(set(names)) == len(names)
    assert names[:4] == ["conv1", "bn1", "relu", "maxpool"]
    assert names[-3:] == ["avgpool", "flatten", "fc"]
    assert attrs(node(model, "conv1")) == {
        "kernel_shape": [7, 7],
        "strides": [2, 2],
        "pads": [3, 3, 3, 3],
    }
    assert attrs(node(model, "maxpool")) == {
        "kernel_shape": [3, 3],
        "strides": [2, 2],
        "pads": [1, 1, 1, 1],
    }
    fc = node(model, "fc")
    assert attrs(fc) == {"transB": 1} and len(fc.input) == 3 and fc.output[0] == "logits"
    width = 512 if ARCH[depth][0] == "basic" else 2048
    assert inits["fc.weight"].shape == (1000, width) and inits["fc.bias"].shape == (1000,)

    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    last_bn = "bn2" if ARCH[depth][0] == "basic" else "bn3"
    for n in model.graph.node:
        if n.op_type == "Conv":  # no bias; its own BN follows
            assert len(n.input) == 2
            (bn,) = consumers[n.output[0]]
            assert bn.op_type == "BatchNormalization"
            assert bn.name == n.name.replace("conv", "bn").replace("downsample.0", "downsample.1")
        if n.op_type == "BatchNormalization":
            assert attrs(n)["epsilon"] == pytest.approx(1e-5)
            assert inits[n.input[4]].min() > 0
        if n.op_type == "Add":  # residual: branch + shortcut (block input or downsample), Relu
            block = n.name.removesuffix(".add")
            has_downsample = f"{block}.downsample.1" in names
            shortcut = node(model, f"{block}.downsample.1" if has_downsample else f"{block}.conv1")
            branch = node(model, f"{block}.{last_bn}")
            expected = {
                branch.output[0],
                shortcut.output[0] if has_downsample else shortcut.input[0],
            }
            assert set(n.input) == expected
            assert [c.op_type for c in consumers[n.output[0]]] == ["Relu"]

    # Downsample exactly where the shape changes: the first block of every stage but layer1 of
    # the BasicBlock nets. Stride 2 only in conv1 and the first block of layer2-4, there on the
    # 3x3 conv (Bottleneck v1.5) and the downsample.
    first = "conv1" if ARCH[depth][0] == "basic" else "conv2"
    for stage in range(1, 5):
        assert (f"layer{stage}.0.downsample.0" in names) == (stage > 1 or depth == 50)
    strided = {"conv1"} | {f"layer{s}.0.{c}" for s in (2, 3, 4) for c in (first, "downsample.0")}
    for conv in [n for n in model.graph.node if n.op_type == "Conv"]:
        assert attrs(conv)["strides"] == ([2, 2] if conv.name in strided else [1, 1]), conv.name
    if depth == 50:
        assert inits["layer2.0.conv1.weight"].shape == (128, 256, 1, 1)
        assert inits["layer2.0.conv2.weight"].shape == (128, 128, 3, 3)
        assert inits["layer2.0.conv3.weight"].shape == (512, 128, 1, 1)
        assert inits["layer2.0.downsample.0.weight"].shape == (512, 256, 1, 1)


# chargpt trains for minutes on a cold cache: its graph is checked on its tiny variant
# (tests/unit/front/test_chargpt.py), built by the same code.
@pytest.mark.parametrize("name", [m for m in zoo.MODELS if m != "chargpt"])
def test_checker_and_shape_inference(built: Builder, name: str) -> None:
    model = built(name)
    assert model.opset_import[0].version == 17 and model.ir_version in (9, 10)
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    infos = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    for n in inferred.graph.node:
        for out in n.output:
            dims = infos[out].type.tensor_type.shape.dim
            assert dims and all(d.HasField("dim_value") and d.dim_value > 0 for d in dims), out
    (graph_input,) = model.graph.input
    assert graph_input.name == "input"
    assert [o.name for o in model.graph.output] == ["logits"]


@pytest.mark.parametrize(
    ("depth", "size", "final_hw"), [(18, 224, 7), (50, 224, 7), (34, 64, 2), (18, 32, 1)]
)
def test_resnet_any_image_size(built: Builder, depth: int, size: int, final_hw: int) -> None:
    model = built(f"resnet{depth}", size)
    assert input_shape(model) == [1, 3, size, size]
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    infos = {v.name: v for v in inferred.graph.value_info}
    last_block = [n for n in model.graph.node if n.op_type == "Relu"][-1].output[0]
    dims = [d.dim_value for d in infos[last_block].type.tensor_type.shape.dim]
    assert dims == [1, 512 if depth < 50 else 2048, final_hw, final_hw]


# -- small models ------------------------------------------------------------------------------


def test_small_cnn_structure(built: Builder) -> None:
    model = built("cnn")
    assert input_shape(model) == [1, 3, 32, 32]
    assert Counter(n.op_type for n in model.graph.node) == Counter(
        Conv=3, BatchNormalization=3, Relu=3, MaxPool=1, Add=1, GlobalAveragePool=1, Flatten=1,
        Gemm=1,
    )  # fmt: skip
    inits = initializers(model)
    for n in model.graph.node:
        if n.op_type == "Conv":
            cout, cin = inits[n.input[1]].shape[:2]
            assert cout % 16 == 0 and (cin == 3 or cin % 16 == 0)
    add = node(model, "add")
    assert node(model, "maxpool").output[0] in add.input  # the residual comes from the max pool
    assert attrs(node(model, "conv2"))["strides"] == [2, 2]


def test_mlp_structure_and_reference(built: Builder) -> None:
    model = built("mlp")
    assert input_shape(model) == [1, 64]
    ops = [n.op_type for n in model.graph.node]
    assert ops == ["Gemm", "Relu", "MatMul", "Add", "Clip", "Gemm"]
    gemms = [n for n in model.graph.node if n.op_type == "Gemm"]
    assert all(attrs(g) == {"transB": 1} for g in gemms)
    inits = initializers(model)
    clip = node(model, "act2")
    assert [float(inits[i]) for i in clip.input[1:]] == [0.0, 6.0]

    # Independent numpy forward pass: ReLU6 really clips, the MatMul layout is (in, out).
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32) * 4
    h = np.maximum(x @ inits["fc1.weight"].T + inits["fc1.bias"], 0)
    h = np.clip(h @ inits["fc2.weight"] + inits["fc2.bias"], 0, 6)
    assert h.max() == 6.0
    expected = h @ inits["fc.weight"].T + inits["fc.bias"]
    np.testing.assert_allclose(run(model, x), expected, rtol=1e-4, atol=1e-4)


def test_mlp_options() -> None:
    model = zoo.mlp(in_features=8, hidden=(16, 16, 16), num_classes=3, seed=2)
    ops = [n.op_type for n in model.graph.node]
    assert ops == ["Gemm", "Relu", "MatMul", "Add", "Relu", "Gemm", "Clip", "Gemm"]
    assert run(model, np.ones((1, 8), np.float32)).shape == (1, 3)
    assert [n.op_type for n in zoo.mlp(hidden=()).graph.node] == ["Gemm"]


# -- onnxruntime ------------------------------------------------------------------------------

RUNTIME_CASES = [
    ("resnet18", 32),
    ("resnet18", 64),
    ("resnet34", 64),
    ("resnet50", 64),
    ("cnn", None),
    ("cnn", 20),
    ("mlp", None),
]


@pytest.mark.parametrize(("name", "size"), RUNTIME_CASES)
def test_onnxruntime_logits_sane(built: Builder, name: str, size: int | None) -> None:
    model = built(name, size)
    x = np.random.default_rng(7).standard_normal(input_shape(model)).astype(np.float32)
    logits = run(model, x)
    classes = 10 if name in ("cnn", "mlp") else 1000
    assert logits.shape == (1, classes) and logits.dtype == np.float32
    assert np.isfinite(logits).all()
    assert 0.1 < float(logits.std()) < 100.0  # neither vanished nor exploded
    assert len(np.unique(logits)) > classes // 2


def test_resnet50_activations_stay_in_range(built: Builder) -> None:
    """Every stage output of ResNet-50 keeps an RMS between 0.3 and 30 for a unit input."""
    model = onnx.ModelProto()
    model.CopyFrom(built("resnet50", 64))
    last_blocks = [f"layer{stage}.{blocks - 1}" for stage, blocks in enumerate(ARCH[50][1], 1)]
    taps = ["relu.out"] + [f"{block}.relu3.out" for block in last_blocks]
    for tap in taps:
        model.graph.output.append(onnx.helper.make_empty_tensor_value_info(tap))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    values = session.run(taps, {"input": x})
    rms = [math.sqrt(float(np.mean(np.square(v)))) for v in values]
    assert all(0.3 < r < 30 for r in rms), dict(zip(taps, rms, strict=True))


# -- determinism and names ---------------------------------------------------------------------


@pytest.mark.parametrize(("name", "size"), [("resnet18", 32), ("cnn", None), ("mlp", None)])
def test_same_seed_same_bytes(built: Builder, name: str, size: int | None) -> None:
    cached = built(name, size).SerializeToString()
    assert zoo.build(name, image_size=size).SerializeToString() == cached
    assert zoo.build(name, image_size=size, seed=1).SerializeToString() != cached


def test_same_seed_same_bytes_resnet50(built: Builder) -> None:
    assert zoo.build("resnet50").SerializeToString() == built("resnet50").SerializeToString()


def test_models_and_name_resolution(built: Builder) -> None:
    names = "resnet resnet18 resnet34 resnet50 mobilenetv2 efficientnet squeezenet googlenet unet"
    assert (*names.split(), "vit", "bert", "cnn", "mlp", "digits", "chargpt") == zoo.MODELS
    assert built("resnet").SerializeToString() == built("resnet18").SerializeToString()
    expected = {"resnet18": "resnet18", "resnet34": "resnet34", "resnet50": "resnet50"}
    for name, graph_name in expected.items():
        assert built(name).graph.name == graph_name
        assert input_shape(built(name)) == [1, 3, 224, 224]
    assert built("cnn").graph.name == "small_cnn" and built("mlp").graph.name == "mlp"


@pytest.mark.parametrize("name", ["resnet101", "", "ResNet18", "vgg"])
def test_unknown_name_lists_known_ones(name: str) -> None:
    with pytest.raises(ValueError, match="unknown model") as info:
        zoo.build(name)
    assert all(known in str(info.value) for known in zoo.MODELS)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="image size"):
        zoo.build("mlp", image_size=32)
    with pytest.raises(ValueError, match="depth"):
        zoo.resnet(101)
    with pytest.raises(ValueError, match="image_size"):
        zoo.build("cnn", image_size=2)
    with pytest.raises(ValueError, match="image_size"):
        zoo.resnet(18, image_size=0)
    with pytest.raises(ValueError, match="seed"):
        zoo.build("cnn", seed=-1)


def test_resnet_num_classes() -> None:
    model = zoo.resnet(18, image_size=32, num_classes=7, seed=3)
    assert run(model, np.ones((1, 3, 32, 32), np.float32)).shape == (1, 7)


# -- CLI ---------------------------------------------------------------------------------------


def test_cli_writes_loadable_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cnn.onnx"
    assert main(["cnn", "--image-size", "24", "--seed", "3", "-o", str(out)]) == 0
    loaded = onnx.load(out)
    onnx.checker.check_model(loaded)
    expected = zoo.build("cnn", image_size=24, seed=3)
    assert loaded.SerializeToString() == expected.SerializeToString()
    assert str(out) in capsys.readouterr().out


def test_cli_bad_image_size_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mlp", "--image-size", "8", "-o", str(tmp_path / "m.onnx")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not (tmp_path / "m.onnx").exists()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "zoo", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)


def test_cli_module_unknown_name_exits_2(tmp_path: Path) -> None:
    result = _cli("alexnet", "-o", str(tmp_path / "a.onnx"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "alexnet" in lines[0] and "resnet50" in lines[0]
    assert not (tmp_path / "a.onnx").exists()


def test_cli_module_writes_file_and_documents_help(tmp_path: Path) -> None:
    out = tmp_path / "mlp.onnx"
    result = _cli("mlp", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert onnx.load(out).SerializeToString() == zoo.build("mlp").SerializeToString()
    help_text = _cli("--help")
    assert help_text.returncode == 0
    assert all(word in help_text.stdout for word in ("NAME", "--image-size", "--seed", "-o"))
    assert all(name in help_text.stdout for name in zoo.MODELS)


def inferred_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Every value's shape by ONNX shape inference (an independent count of the MACs)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    return {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in [*inferred.graph.value_info, *inferred.graph.output]
    }


def test_mobilenetv2_is_torchvisions_architecture() -> None:
    """torchvision's mobilenet_v2() has 3,504,872 parameters (weights, biases, BN affine) and 52
    convolutions of which 17 are depthwise; the paper gives about 300M multiply-adds at 224."""
    model = zoo.build("mobilenetv2")
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    buffers = ("running_mean", "running_var", ".min", ".max")
    assert sum(v.size for k, v in inits.items() if not k.endswith(buffers)) == 3_504_872
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    depthwise = [n for n in convs if any(a.name == "group" and a.i > 1 for a in n.attribute)]
    assert (len(convs), len(depthwise)) == (52, 17)
    assert input_shape(model) == [1, 3, 224, 224] and model.graph.name == "mobilenetv2"
    shapes = inferred_shapes(model)
    macs = 0
    for node in convs:
        w = inits[node.input[1]]
        macs += int(np.prod(shapes[node.output[0]])) * int(np.prod(w.shape[1:]))
    macs += 1280 * 1000
    assert abs(macs / 300e6 - 1) < 0.02, macs
    assert zoo.build("mobilenetv2", seed=1).SerializeToString() != model.SerializeToString()


def test_squeezenet_is_torchvisions_squeezenet1_1() -> None:
    """torchvision's squeezenet1_1() has 1,235,496 parameters, 8 fire modules (Concat) and
    about 349M multiply-adds at 224x224."""
    model = zoo.build("squeezenet")
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert sum(v.size for v in inits.values()) == 1_235_496
    assert sum(n.op_type == "Concat" for n in model.graph.node) == 8
    shapes = inferred_shapes(model)
    macs = sum(
        int(np.prod(shapes[n.output[0]])) * int(np.prod(inits[n.input[1]].shape[1:]))
        for n in model.graph.node
        if n.op_type == "Conv"
    )
    assert abs(macs / 349e6 - 1) < 0.01, macs
    assert shapes["logits"] == [1, 1000]


def test_efficientnet_is_torchvisions_b0() -> None:
    """torchvision's efficientnet_b0() has 5,288,548 parameters (weights, biases, BN affine),
    16 MBConv blocks each with a squeeze-excitation gate, and about 386M multiply-adds."""
    model = zoo.build("efficientnet")
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    buffers = ("running_mean", "running_var")
    assert sum(v.size for k, v in inits.items() if not k.endswith(buffers)) == 5_288_548
    gates = [n for n in model.graph.node if n.name.endswith(".se.scale")]
    assert len(gates) == 16 and all(n.op_type == "Mul" for n in gates)
    shapes = inferred_shapes(model)
    macs = sum(
        int(np.prod(shapes[n.output[0]])) * int(np.prod(inits[n.input[1]].shape[1:]))
        for n in model.graph.node
        if n.op_type == "Conv"
    )
    assert abs((macs + 1280 * 1000) / 386e6 - 1) < 0.01, macs


def _conv_macs(model: onnx.ModelProto) -> int:
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    shapes = inferred_shapes(model)
    return sum(
        int(np.prod(shapes[n.output[0]])) * int(np.prod(inits[n.input[1]].shape[1:]))
        for n in model.graph.node
        if n.op_type == "Conv"
    )


def test_googlenet_is_inception_v1() -> None:
    """BVLC GoogLeNet without the auxiliary classifiers: 57 convs in the stem and 9 inception
    modules (Concat of 4 branches), 2 LRNs, max pools in ceil mode (56, 28, 14, 7 at 224),
    1.58G conv multiply-adds (true 5x5 branches, as BVLC's; the paper says "1.5 billion") and
    1024 features into the classifier."""
    model = zoo.build("googlenet")
    ops = [n.op_type for n in model.graph.node]
    assert (ops.count("Conv"), ops.count("Concat"), ops.count("LRN")) == (57, 9, 2)
    shapes = inferred_shapes(model)
    assert shapes["pool1.3x3_s2.out"] == [1, 64, 56, 56]
    assert shapes["inception_3b.output.out"] == [1, 480, 28, 28]
    assert shapes["inception_5b.output.out"] == [1, 1024, 7, 7]
    assert abs(_conv_macs(model) / 1.58e9 - 1) < 0.01, _conv_macs(model)
    assert shapes["logits"] == [1, 1000]


@pytest.mark.parametrize("size", [32, 128])
def test_unet_shapes_and_upsampling(size: int) -> None:
    """Three levels of skip Concats; the decoder upsamples by ConvTranspose 2x2/2 twice and by
    a nearest Resize once; per-pixel logits of the input size."""
    model = zoo.build("unet", image_size=size)
    ops = [n.op_type for n in model.graph.node]
    assert (ops.count("ConvTranspose"), ops.count("Resize"), ops.count("Concat")) == (2, 1, 3)
    assert inferred_shapes(model)["logits"] == [1, 2, size, size]
    x = np.random.default_rng(1).standard_normal((1, 3, size, size)).astype(np.float32)
    logits = ort.InferenceSession(model.SerializeToString()).run(None, {"input": x})[0]
    assert np.isfinite(logits).all() and 0.1 < float(logits.std()) < 100.0
    with pytest.raises(ValueError, match="multiple of 8"):
        zoo.build("unet", image_size=size + 4)

"""canonicalize: folding is exact against onnxruntime; fusion results match the architecture."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import zoo
from compiler.errors import CompileError
from compiler.ir import Graph
from compiler.onnx import load_onnx
from compiler.passes import canonicalize
from tests.onnx_graphs import make_model

F = TensorProto.FLOAT
make = make_model


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # no BN fold
    sess = ort.InferenceSession(model.SerializeToString(), options)
    return np.asarray(sess.run(None, {"x": x})[0])


def canon(model: onnx.ModelProto) -> Graph:
    g = canonicalize.run(load_onnx(model))
    g.verify()
    return g


def bn_inits(rng: np.random.Generator, c: int, prefix: str = "") -> dict[str, np.ndarray]:
    return {
        f"{prefix}gamma": rng.uniform(0.5, 1.5, c).astype(np.float32),
        f"{prefix}beta": rng.normal(0, 0.5, c).astype(np.float32),
        f"{prefix}mean": rng.normal(0, 0.5, c).astype(np.float32),
        f"{prefix}var": rng.uniform(0.2, 2.0, c).astype(np.float32),
    }


def bn(x: str, y: str, prefix: str = "", name: str = "bn") -> onnx.NodeProto:
    names = [x, f"{prefix}gamma", f"{prefix}beta", f"{prefix}mean", f"{prefix}var"]
    return helper.make_node("BatchNormalization", names, [y], name=name, epsilon=1e-3)


# --------------------------------------------------------------------------- folding vs ORT


@pytest.mark.parametrize("with_bias", [False, True])
def test_conv_bn_fold_matches_onnxruntime(with_bias: bool) -> None:
    rng = np.random.default_rng(21 + with_bias)
    inits = {"w": rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)} | bn_inits(rng, 8)
    conv_in = ["x", "w"]
    if with_bias:
        inits["b"] = rng.normal(0, 0.5, 8).astype(np.float32)
        conv_in.append("b")
    nodes = [
        helper.make_node("Conv", conv_in, ["c"], name="conv", strides=[2, 2], pads=[1, 0, 1, 2]),
        bn("c", "y"),
    ]
    model = make(nodes, [1, 3, 11, 10], inits)
    g = canon(model)
    (conv,) = g.nodes
    assert conv.op == "conv" and conv.output == "y" and conv.onnx_nodes == ["conv", "bn"]
    assert set(g.tensors) == {"x", "y"}
    a = conv.attrs
    folded = make(
        [
            helper.make_node(
                "Conv", ["x", "fw", "fb"], ["y"], strides=list(a["stride"]), pads=list(a["pads"])
            )
        ],
        [1, 3, 11, 10],
        {"fw": conv.params["weight"], "fb": conv.params["bias"]},
    )
    x = rng.standard_normal((1, 3, 11, 10)).astype(np.float32)
    np.testing.assert_allclose(run(folded, x), run(model, x), rtol=1e-4, atol=1e-5)


def test_gemm_bn_and_matmul_bias_relu_match_onnxruntime() -> None:
    rng = np.random.default_rng(23)
    inits = {
        "w1": rng.normal(0, 0.3, (6, 5)).astype(np.float32),
        "b1": rng.normal(0, 0.3, 6).astype(np.float32),
        "w2": rng.normal(0, 0.3, (6, 4)).astype(np.float32),  # MatMul weight (K, N)
        "b2": rng.normal(0, 0.3, 4).astype(np.float32),
    } | bn_inits(rng, 6)
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["g1"], name="fc1", transB=1),
        bn("g1", "n1"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="fc2.matmul"),
        helper.make_node("Add", ["m2", "b2"], ["a2"], name="fc2.add"),
        helper.make_node("Relu", ["a2"], ["y"], name="relu2"),
    ]
    model = make(nodes, [1, 5], inits)
    g = canon(model)
    assert [(n.name, n.op, n.attrs["act"]) for n in g.nodes] == [
        ("fc1", "gemm", "relu"),
        ("fc2.matmul", "gemm", "relu"),
    ]
    assert g.nodes[1].onnx_nodes == ["fc2.matmul", "fc2.add", "relu2"]
    np.testing.assert_array_equal(g.nodes[1].params["bias"], inits["b2"])
    x = rng.standard_normal((1, 5)).astype(np.float32)
    h = x
    for n in g.nodes:
        h = np.maximum(h @ n.params["weight"].T + n.params["bias"], 0)
    np.testing.assert_allclose(h, run(model, x), rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- fusion by structure


def expected_resnet18_blocks() -> list[tuple[str, str, bool]]:
    """(block, tensor the block reads, has downsample) from the ResNet-18 architecture."""
    blocks, prev = [], "maxpool.out"
    for stage in range(1, 5):
        for index in range(2):
            block = f"layer{stage}.{index}"
            blocks.append((block, prev, stage > 1 and index == 0))
            prev = f"{block}.relu2.out"
    return blocks


def test_resnet18_blocks_fuse_into_conv_with_residual() -> None:
    g = canon(zoo.build("resnet18", image_size=32))
    ops = Counter(n.op for n in g.nodes)
    assert ops == Counter(conv=20, maxpool=1, global_avgpool=1, flatten=1, gemm=1)
    assert sum(len(n.inputs) == 2 for n in g.nodes) == 8
    stem = g.node("conv1")
    assert stem.onnx_nodes == ["conv1", "bn1", "relu"] and stem.attrs["act"] == "relu"
    for block, block_input, downsample in expected_resnet18_blocks():
        conv1, conv2 = g.node(f"{block}.conv1"), g.node(f"{block}.conv2")
        assert conv1.inputs == [block_input] and conv1.attrs["act"] == "relu"
        assert conv1.output == f"{block}.relu1.out"
        shortcut = f"{block}.downsample.1.out" if downsample else block_input
        assert conv2.inputs == [f"{block}.relu1.out", shortcut]
        assert conv2.attrs["act"] == "relu" and conv2.output == f"{block}.relu2.out"
        assert conv2.onnx_nodes == [
            f"{block}.conv2",
            f"{block}.bn2",
            f"{block}.add",
            f"{block}.relu2",
        ]
        if downsample:
            ds = g.node(f"{block}.downsample.0")
            assert ds.inputs == [block_input] and ds.attrs["act"] is None
            assert ds.onnx_nodes == [f"{block}.downsample.0", f"{block}.downsample.1"]
    assert [n.name for n in g.nodes[-3:]] == ["avgpool", "flatten", "fc"]
    assert g.outputs == ["logits"]


def test_mlp_relu6_and_matmul_bias() -> None:
    g = canon(zoo.build("mlp"))
    assert [(n.name, n.op, n.attrs["act"]) for n in g.nodes] == [
        ("fc1", "gemm", "relu"),
        ("fc2.matmul", "gemm", "relu6"),
        ("fc", "gemm", None),
    ]


def _two_convs(rng: np.random.Generator, tail: list[onnx.NodeProto]) -> onnx.ModelProto:
    inits = {
        "w1": rng.normal(size=(4, 3, 1, 1)).astype(np.float32),
        "w2": rng.normal(size=(4, 3, 1, 1)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["x", "w2"], ["c2"], name="conv2"),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        *tail,
    ]
    return make(nodes, [1, 3, 4, 4], inits)


def test_sum_becomes_standalone_add_with_act() -> None:
    tail = [
        helper.make_node("Sum", ["r1", "r2"], ["s"], name="sum"),
        helper.make_node("Clip", ["s", "lo", "hi"], ["y"], name="relu6"),
    ]
    model = _two_convs(np.random.default_rng(0), tail)
    model.graph.initializer.extend(
        [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", 0), ("hi", 6))]
    )
    g = canon(model)
    add = g.nodes[-1]
    assert (add.name, add.op, add.inputs, add.output) == ("sum", "add", ["r1", "r2"], "y")
    assert add.attrs == {"act": "relu6"} and add.onnx_nodes == ["sum", "relu6"]


def test_add_not_fused_into_conv_with_two_consumers() -> None:
    rng = np.random.default_rng(1)
    inits = {"w": rng.normal(size=(3, 3, 1, 1)).astype(np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Add", ["c", "x"], ["a"], name="add"),
        helper.make_node("Add", ["a", "c"], ["y"], name="add2"),
    ]
    g = canon(make(nodes, [1, 3, 4, 4], inits))
    assert [n.op for n in g.nodes] == ["conv", "add", "add"]
    assert len(g.node("conv").inputs) == 1


def test_identity_and_reshape() -> None:
    rng = np.random.default_rng(2)
    inits = {"w": rng.normal(size=(2, 3, 1, 1)).astype(np.float32), "s": np.array([1, -1])}
    nodes = [
        helper.make_node("Identity", ["x"], ["xi"], name="id0"),
        helper.make_node("Conv", ["xi", "w"], ["c"], name="conv"),
        helper.make_node("Identity", ["c"], ["ci"], name="id1"),
        helper.make_node("Reshape", ["ci", "s"], ["r"], name="reshape"),
        helper.make_node("Dropout", ["r"], ["y"], name="drop"),
    ]
    g = canon(make(nodes, [1, 3, 2, 2], inits))
    assert [(n.name, n.op, n.inputs, n.output) for n in g.nodes] == [
        ("conv", "conv", ["x"], "ci"),
        ("reshape", "flatten", ["ci"], "y"),
    ]
    assert g.outputs == ["y"] and set(g.tensors) == {"x", "ci", "y"}


def test_relu_composes_with_relu6() -> None:
    rng = np.random.default_rng(3)
    inits = {"w": rng.normal(size=(2, 3, 1, 1)).astype(np.float32)}
    inits |= {"lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Clip", ["r", "lo", "hi"], ["y"], name="clip"),
    ]
    (conv,) = canon(make(nodes, [1, 3, 2, 2], inits)).nodes
    assert conv.attrs["act"] == "relu6" and conv.output == "y"


# --------------------------------------------------------------------------- errors


def test_standalone_relu_becomes_a_scale_layer() -> None:
    """A Relu that no producer can take (after a pool, on a shared conv output) is a one-input
    scale layer with that act; on a vector it is refused with the shape."""
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p"], name="pool", kernel_shape=[2, 2]),
        helper.make_node("Relu", ["p"], ["y"], name="act"),
    ]
    g = canonicalize.run(load_onnx(make(nodes, [1, 3, 4, 4], {})))
    [layer] = [n for n in g.nodes if n.name == "act"]
    assert (layer.op, layer.inputs, layer.attrs) == ("scale", ["p"], {"act": "relu"})
    with pytest.raises(CompileError) as info:
        canonicalize.run(load_onnx(make([helper.make_node("Relu", ["x"], ["y"])], [1, 3], {})))
    assert "standalone Relu after the graph input on a (1, 3) tensor" in str(info.value)


def test_relu_on_shared_conv_output_is_a_scale_layer() -> None:
    rng = np.random.default_rng(4)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Add", ["c", "r"], ["y"], name="add"),
    ]
    model = make(nodes, [1, 3, 2, 2], {"w": rng.normal(size=(3, 3, 1, 1)).astype(np.float32)})
    g = canonicalize.run(load_onnx(model))
    ops = {n.name: (n.op, n.attrs.get("act")) for n in g.nodes}
    assert ops["relu"] == ("scale", "relu") and ops["conv"] == ("conv", None)


def test_unfoldable_batchnorm_rejected() -> None:
    """A BatchNorm on a vector whose linear layer is read twice folds nowhere and is no
    depthwise conv (not a map, not a pooled map's flatten): refused by name."""
    rng = np.random.default_rng(5)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["a"], name="fc"),
        bn("a", "b", name="norm"),
        helper.make_node("Add", ["a", "b"], ["y"], name="add"),
    ]
    inits = {"w": rng.normal(0, 0.3, (6, 3)).astype(np.float32)} | bn_inits(rng, 3)
    with pytest.raises(CompileError) as info:
        canonicalize.run(load_onnx(make(nodes, [1, 6], inits)))
    err = info.value
    assert (err.node, err.op) == ("norm", "BatchNormalization")
    assert "follows 'fc' (gemm) and cannot be folded" in str(err)


def test_input_graph_is_not_modified() -> None:
    g = load_onnx(zoo.build("cnn", image_size=8))
    before = g.summary()
    params = {n.name: {k: v.copy() for k, v in n.params.items()} for n in g.nodes}
    canonicalize.run(g)
    assert g.summary() == before
    for n in g.nodes:
        for k, v in n.params.items():
            np.testing.assert_array_equal(v, params[n.name][k])


def test_cnn_residual_from_maxpool() -> None:
    g = canon(zoo.build("cnn", image_size=16))
    conv3 = g.node("conv3")
    # conv3 reads the max-pool output and adds it back (small_cnn's residual).
    assert conv3.inputs == ["maxpool.out", "maxpool.out"]
    assert conv3.attrs["act"] == "relu" and conv3.output == "relu3.out"
    assert conv3.onnx_nodes == ["conv3", "bn3", "add", "relu3"]

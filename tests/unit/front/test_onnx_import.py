"""ONNX import: each supported op on small graphs at several opsets, and every error path.

Independent references: onnxruntime (output shapes and values of the same model, or of an
equivalent model written with explicit attributes) and numpy on the initializers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from arch import host_runtime
from compiler.errors import CompileError
from compiler.onnx import load_onnx
from tests.onnx_graphs import make_model

F = TensorProto.FLOAT
make = make_model
OPSETS = [9, 11, 13, 17, 21]


def run(model: onnx.ModelProto, x: np.ndarray, names: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """onnxruntime outputs of ``model`` plus the intermediate tensors ``names``, by name."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    known = {o.name for o in m.graph.output}
    for n in names:
        if n not in known:
            m.graph.output.append(helper.make_tensor_value_info(n, F, None))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
    outs = [o.name for o in sess.get_outputs()]
    return dict(zip(outs, sess.run(outs, {"x": x}), strict=True))


def rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def error(model: onnx.ModelProto | str | Path) -> CompileError:
    with pytest.raises(CompileError) as info:
        load_onnx(model)
    assert "\n" not in str(info.value)
    return info.value


def hosted(model: onnx.ModelProto, node: str) -> str:
    """``node`` goes to the host (a ``host`` IR node holds it, its model runs it exactly as
    onnxruntime runs the original); returns the reason the importer recorded."""
    graph = load_onnx(model)
    [host] = [n for n in graph.nodes if n.op == "host" and node in n.onnx_nodes]
    x = np.random.default_rng(0).standard_normal(graph.tensors[graph.inputs[0]].shape)
    x = x.astype(np.float32)
    want = run(model, x)[host.output]
    feeds = dict(zip(host.attrs["feeds"], [x], strict=True))
    got = host_runtime.run(host.params["model"].tobytes(), feeds, host.attrs["fetch"])
    np.testing.assert_array_equal(got, want)
    return graph.host_reasons[host.name]


# --------------------------------------------------------------------------- supported ops


@pytest.mark.parametrize("opset", OPSETS)
def test_conv_attributes_and_params(opset: int) -> None:
    rng = np.random.default_rng(opset)
    w, b = rand(rng, 5, 3, 3, 2), rand(rng, 5)
    node = helper.make_node(
        "Conv", ["x", "w", "b"], ["y"], name="conv", strides=[2, 1], pads=[1, 0, 2, 1]
    )
    model = make([node], [1, 3, 9, 8], {"w": w, "b": b}, opset=opset)
    g = load_onnx(model)
    (conv,) = g.nodes
    assert conv.op == "conv" and conv.name == "conv" and conv.onnx_nodes == ["conv"]
    assert conv.attrs == {
        "kernel": (3, 2),
        "stride": (2, 1),
        "pads": (1, 0, 2, 1),
        "dilation": (1, 1),
        "group": 1,
        "act": None,
    }
    np.testing.assert_array_equal(conv.params["weight"], w)
    np.testing.assert_array_equal(conv.params["bias"], b)
    y = run(model, rand(rng, 1, 3, 9, 8))["y"]
    assert g.tensors["y"].shape == y.shape
    assert g.outputs == ["y"] and g.inputs == ["x"]


def test_conv_without_bias_gets_zero_bias() -> None:
    w = rand(np.random.default_rng(0), 4, 3, 1, 1)
    g = load_onnx(make([helper.make_node("Conv", ["x", "w"], ["y"])], [1, 3, 4, 4], {"w": w}))
    assert g.nodes[0].name == "Conv_0"  # unnamed nodes get a unique name
    np.testing.assert_array_equal(g.nodes[0].params["bias"], np.zeros(4, np.float32))


@pytest.mark.parametrize(("size", "stride", "kernel"), [(7, 2, 3), (8, 2, 3), (6, 1, 4), (9, 3, 2)])
def test_same_upper_becomes_explicit_pads(size: int, stride: int, kernel: int) -> None:
    rng = np.random.default_rng(size * 10 + kernel)
    w = rand(rng, 2, 3, kernel, kernel)
    same = helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[stride] * 2)
    model = make([same], [1, 3, size, size], {"w": w})
    attrs = load_onnx(model).nodes[0].attrs
    explicit = helper.make_node(
        "Conv", ["x", "w"], ["y"], pads=list(attrs["pads"]), strides=list(attrs["stride"])
    )
    x = rand(rng, 1, 3, size, size)
    expected = run(model, x)["y"]
    np.testing.assert_allclose(
        run(make([explicit], [1, 3, size, size], {"w": w}), x)["y"], expected
    )


def test_auto_pad_valid() -> None:
    w = rand(np.random.default_rng(1), 2, 3, 3, 3)
    node = helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="VALID")
    g = load_onnx(make([node], [1, 3, 6, 6], {"w": w}))
    assert g.nodes[0].attrs["pads"] == (0, 0, 0, 0) and g.tensors["y"].shape == (1, 2, 4, 4)


def kitchen_sink(opset: int, rng: np.random.Generator) -> onnx.ModelProto:
    """Most supported ops in one graph (every form valid from opset 9 to 21)."""
    c = 4
    inits = {
        "w1": rand(rng, c, 3, 3, 3),
        "b1": rand(rng, c),
        "gamma": rng.uniform(0.5, 1.5, c).astype(np.float32),
        "beta": rand(rng, c),
        "mean": rand(rng, c),
        "var": rng.uniform(0.5, 1.5, c).astype(np.float32),
        "w2": rand(rng, c, c, 1, 1),
        "w3": rand(rng, 6, c),
        "shape4": np.array([c], np.int64),
    }
    value = numpy_helper.from_array(rand(rng, 6), "v")
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node(
            "BatchNormalization", ["c1", "gamma", "beta", "mean", "var"], ["bn"], name="bn1"
        ),
        helper.make_node("Relu", ["bn"], ["r1"], name="relu1"),
        helper.make_node(
            "MaxPool",
            ["r1"],
            ["mp"],
            name="pool",
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("Identity", ["mp"], ["id"], name="ident"),
        helper.make_node("ConstantOfShape", ["shape4"], ["zeros"], name="zeros"),
        helper.make_node("Conv", ["id", "w2", "zeros"], ["c2"], name="conv2"),
        helper.make_node("Add", ["c2", "mp"], ["sum1"], name="add"),
        helper.make_node("Relu", ["sum1"], ["r2"], name="relu2"),
        helper.make_node("AveragePool", ["r2"], ["ap"], name="avg", kernel_shape=[2, 2]),
        helper.make_node("Sum", ["ap", "ap"], ["s2"], name="sum"),
        helper.make_node("GlobalAveragePool", ["s2"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["fl"], name="flatten"),
        helper.make_node("Dropout", ["fl"], ["dr"], name="drop"),
        helper.make_node("Constant", [], ["b3"], name="const", value=value),
        helper.make_node("Gemm", ["dr", "w3", "b3"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], name="softmax"),
    ]
    return make(nodes, [1, 3, 9, 9], inits, opset=opset)


@pytest.mark.parametrize("opset", OPSETS)
def test_kitchen_sink_ops_and_shapes(opset: int) -> None:
    rng = np.random.default_rng(100 + opset)
    model = kitchen_sink(opset, rng)
    g = load_onnx(model)
    assert [n.op for n in g.nodes] == [
        "conv", "batchnorm", "relu", "maxpool", "identity", "conv", "add", "relu", "avgpool",
        "sum", "global_avgpool", "flatten", "identity", "gemm", "softmax",
    ]  # fmt: skip
    values = run(model, rand(rng, 1, 3, 9, 9), [n.output for n in g.nodes])
    for n in g.nodes:
        assert g.tensors[n.output].shape == values[n.output].shape, n.name
    bn = g.node("bn1")
    assert bn.attrs == {"epsilon": pytest.approx(1e-5)}
    np.testing.assert_array_equal(
        bn.params["var"], numpy_helper.to_array(model.graph.initializer[5])
    )
    assert g.node("pool").attrs == {"kernel": (3, 3), "stride": (2, 2), "pads": (1, 1, 1, 1)}
    assert g.node("avg").attrs["count_include_pad"] == 0
    np.testing.assert_array_equal(g.node("conv2").params["bias"], np.zeros(4, np.float32))
    assert g.node("add").inputs == ["c2", "mp"] and g.node("add").attrs == {"act": None}
    fc = g.node("fc")
    np.testing.assert_array_equal(
        fc.params["bias"], numpy_helper.to_array(model.graph.node[14].attribute[0].t)
    )


@pytest.mark.parametrize(
    ("opset", "form", "lo", "hi", "op"),
    [
        (9, "attr", 0.0, 6.0, "relu6"),
        (10, "attr", 0.0, None, "relu"),
        (11, "input", 0.0, 6.0, "relu6"),
        (13, "input", 0.0, 6.0, "relu6"),
        (13, "input", 0.0, None, "relu"),
        (21, "input", 0.0, 6.0, "relu6"),
    ],
)
def test_clip_forms(opset: int, form: str, lo: float, hi: float | None, op: str) -> None:
    inits: dict[str, np.ndarray] = {}
    if form == "attr":
        attrs: dict[str, Any] = {"min": lo} | ({"max": hi} if hi is not None else {})
        node = helper.make_node("Clip", ["x"], ["y"], name="clip", **attrs)
    else:
        inits["lo"] = np.array(lo, np.float32)
        names = ["x", "lo"]
        if hi is not None:
            inits["hi"] = np.array(hi, np.float32)
            names.append("hi")
        node = helper.make_node("Clip", names, ["y"], name="clip")
    g = load_onnx(make([node], [1, 8], inits, opset=opset))
    assert [n.op for n in g.nodes] == [op]


@pytest.mark.parametrize(("opset", "form"), [(9, "attr"), (13, "input")])
def test_clip_other_ranges_are_a_table(opset: int, form: str) -> None:
    if form == "attr":
        node = helper.make_node("Clip", ["x"], ["y"], name="clip", min=-1.0, max=1.0)
        inits = {}
    else:
        node = helper.make_node("Clip", ["x", "lo", "hi"], ["y"], name="clip")
        inits = {"lo": np.array(-1, np.float32), "hi": np.array(1, np.float32)}
    [table] = load_onnx(make([node], [1, 8], inits, opset=opset)).nodes
    assert (table.op, table.attrs) == ("table", {"function": "clip", "args": (-1.0, 1.0)})


@pytest.mark.parametrize("opset", [9, 13, 17])
@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_trans_b(opset: int, trans_b: int) -> None:
    rng = np.random.default_rng(opset + trans_b)
    w = rand(rng, 7, 5)  # (N, K)
    b = rand(rng, 7)
    node = helper.make_node("Gemm", ["x", "B", "C"], ["y"], name="fc", transB=trans_b)
    model = make([node], [1, 5], {"B": w if trans_b else w.T.copy(), "C": b}, opset=opset)
    (fc,) = load_onnx(model).nodes
    assert fc.op == "gemm" and fc.attrs == {"act": None}
    np.testing.assert_array_equal(fc.params["weight"], w)
    x = rand(rng, 1, 5)
    np.testing.assert_allclose(
        x @ fc.params["weight"].T + fc.params["bias"], run(model, x)["y"], rtol=1e-5, atol=1e-6
    )


def test_matmul_and_bias_add() -> None:
    rng = np.random.default_rng(5)
    w, b = rand(rng, 6, 3), rand(rng, 3)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["mm"], name="fc.matmul"),
        helper.make_node("Add", ["B", "mm"], ["y"], name="fc.add"),  # constant first
    ]
    g = load_onnx(make(nodes, [1, 6], {"W": w, "B": b}, opset=13))
    assert [n.op for n in g.nodes] == ["matmul", "bias_add"]
    np.testing.assert_array_equal(g.nodes[0].params["weight"], w.T)
    np.testing.assert_array_equal(g.nodes[1].params["bias"], b)


@pytest.mark.parametrize("opset", [9, 13, 21])
@pytest.mark.parametrize("target", [[1, -1], [0, -1], [1, 48], [-1, 48]])
def test_reshape_as_flatten(opset: int, target: list[int]) -> None:
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    g = load_onnx(make(nodes, [1, 3, 4, 4], {"shape": np.array(target, np.int64)}, opset=opset))
    assert [n.op for n in g.nodes] == ["reshape"] and g.nodes[0].attrs == {"shape": (1, 48)}
    assert g.tensors["y"].shape == (1, 48)


def test_reshape_shape_from_constant_node() -> None:
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "s")
    nodes = [
        helper.make_node("Constant", [], ["s"], value=shape),
        helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape"),
    ]
    assert load_onnx(make(nodes, [1, 2, 3, 1])).tensors["y"].shape == (1, 6)


def test_reshape_not_a_flatten_is_rejected() -> None:
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="rs")]
    reason = hosted(make(nodes, [1, 3, 4, 4], {"shape": np.array([1, 3, 16], np.int64)}), "rs")
    assert "Reshape of (1, 3, 4, 4) to (1, 3, 16) is not supported" in reason
    assert "flatten" in reason


def test_flatten_axis() -> None:
    g = load_onnx(make([helper.make_node("Flatten", ["x"], ["y"], axis=1)], [1, 3, 2, 2]))
    assert [n.op for n in g.nodes] == ["flatten"] and g.tensors["y"].shape == (1, 12)
    model = make([helper.make_node("Flatten", ["x"], ["y"], name="f", axis=2)], [1, 3, 2, 2])
    assert hosted(model, "f") == "f (Flatten): axis 2 is not supported (supported: axis 1)"


@pytest.mark.parametrize(("opset", "axis"), [(9, None), (13, None), (13, 1), (13, -1)])
def test_softmax_axis(opset: int, axis: int | None) -> None:
    kw: dict[str, Any] = {} if axis is None else {"axis": axis}
    g = load_onnx(make([helper.make_node("Softmax", ["x"], ["y"], **kw)], [1, 10], opset=opset))
    assert [n.op for n in g.nodes] == ["softmax"]


def test_softmax_other_axis_rejected() -> None:
    reason = hosted(
        make([helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=0)], [1, 10]), "sm"
    )
    assert "Softmax over axis 0" in reason and "supported: the last axis" in reason


def test_symbolic_batch_is_set_to_one() -> None:
    w = rand(np.random.default_rng(2), 2, 3, 1, 1)
    model = make([helper.make_node("Conv", ["x", "w"], ["y"])], ["N", 3, 4, 4], {"w": w})
    g = load_onnx(model)
    assert g.tensors["x"].shape == (1, 3, 4, 4) and g.tensors["y"].shape == (1, 2, 4, 4)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"  # not modified


@pytest.mark.parametrize("opset", [7, 8])
def test_old_opsets_are_converted(opset: int) -> None:
    w = rand(np.random.default_rng(opset), 2, 3, 1, 1)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    g = load_onnx(make(nodes, [1, 3, 4, 4], {"w": w}, opset=opset))
    assert [n.op for n in g.nodes] == ["conv", "relu"] and g.tensors["y"].shape == (1, 2, 4, 4)


def test_load_from_path(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(kitchen_sink(17, np.random.default_rng(0)), path)
    assert len(load_onnx(path).nodes) == len(load_onnx(str(path)).nodes) == 15


# --------------------------------------------------------------------------- error paths


def _conv(**attrs: Any) -> onnx.ModelProto:
    group = attrs.get("group", 1)
    assert isinstance(group, int)
    w = rand(np.random.default_rng(3), 4, 4 // group, 3, 3)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="layer1.0.conv1", **attrs)
    return make([node], [1, 4, 8, 8], {"w": w})


def test_dilated_conv_is_an_accelerator_conv() -> None:
    [conv] = load_onnx(_conv(dilations=[2, 3], pads=[2, 3, 2, 3])).nodes
    assert (conv.op, conv.attrs["dilation"]) == ("conv", (2, 3))


def test_dilated_pool_goes_to_the_host() -> None:
    node = helper.make_node(
        "MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2], dilations=[2, 2]
    )
    reason = hosted(make([node], [1, 4, 8, 8], opset=13), "pool")
    assert reason == "pool (MaxPool): dilation (2, 2) is not supported (supported: 1)"


def test_grouped_conv_is_an_accelerator_conv() -> None:
    [conv] = load_onnx(_conv(group=2)).nodes
    assert (conv.op, conv.attrs["group"], conv.params["weight"].shape) == ("conv", 2, (4, 2, 3, 3))


def test_depthwise_conv_is_an_accelerator_conv() -> None:
    [conv] = load_onnx(_conv(group=4)).nodes
    assert (conv.op, conv.attrs["group"], conv.params["weight"].shape) == ("conv", 4, (4, 1, 3, 3))


def test_op_without_mapping_goes_to_the_host() -> None:
    node = helper.make_node("Hardmax", ["x"], ["y"], name="pick")
    assert hosted(make([node], [1, 8]), "pick") == (
        "pick (Hardmax): op Hardmax has no accelerator mapping"
    )


def test_nodes_nothing_can_run_are_all_named_in_one_error() -> None:
    nodes = [
        helper.make_node("FancyOp", ["x"], ["a"], name="fancy", domain="com.example"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("Tanh", ["b"], ["c"], name="tanh"),
        helper.make_node("OtherOp", ["c"], ["y"], name="other", domain="com.example"),
    ]
    model = make(nodes, [1, 8])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    err = error(model)
    assert str(err).startswith(
        "model: 2 node(s) can run neither on the accelerator nor on the host"
    )
    assert "'fancy' (com.example.FancyOp)" in str(err) and "'other' (com.example.OtherOp)" in str(
        err
    )
    assert "tanh" not in str(err) and "relu" not in str(err)


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ([2, 3, 8, 8], "node 'x' (graph input): batch 2 is not supported; supported: batch 1"),
        ([1, 3, "H", 8], "dimension 2 is dynamic ('H') and cannot be fixed"),
    ],
)
def test_batch_and_dynamic_shapes(shape: list[int | str], message: str) -> None:
    w = rand(np.random.default_rng(4), 2, 3, 1, 1)
    err = error(make([helper.make_node("Conv", ["x", "w"], ["y"])], shape, {"w": w}))
    assert message in str(err)


def test_conv3d_input_goes_to_the_host() -> None:
    w = rand(np.random.default_rng(4), 2, 3, 3, 3, 3)
    model = make([helper.make_node("Conv", ["x", "w"], ["y"], name="c")], [1, 3, 4, 8, 8], {"w": w})
    assert "supported: 4-D input" in hosted(model, "c")


def test_conv1d_is_a_conv_of_height_1() -> None:
    w = rand(np.random.default_rng(4), 2, 3, 3)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="c", pads=[1, 1], strides=[2])
    graph = load_onnx(make([node], [1, 3, 8], {"w": w}))
    [conv] = graph.nodes
    assert conv.op == "conv" and graph.tensors["x"].shape == (1, 3, 1, 8)
    assert (conv.attrs["kernel"], conv.attrs["stride"], conv.attrs["pads"]) == (
        (1, 3),
        (1, 2),
        (0, 1, 0, 1),
    )
    assert conv.params["weight"].shape == (2, 3, 1, 3) and graph.tensors["y"].shape == (1, 2, 1, 4)


def test_ceil_mode_that_changes_the_shape() -> None:
    """MaxPool: extra bottom/right padding (it never wins); AveragePool: the host, whose edge
    windows onnxruntime divides by fewer values than the kernel's."""
    nodes = {
        op: helper.make_node(
            op, ["x"], ["y"], name="pool", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1
        )
        for op in ("MaxPool", "AveragePool")
    }
    graph = load_onnx(make([nodes["MaxPool"]], [1, 2, 8, 8], opset=13))
    assert graph.nodes[0].op == "maxpool" and graph.nodes[0].attrs["pads"] == (0, 0, 1, 1)
    reason = hosted(make([nodes["AveragePool"]], [1, 2, 8, 8], opset=13), "pool")
    assert "ceil_mode=1 gives 4x4 outputs, not 3x3" in reason


def test_avgpool_padding_needs_count_include_pad() -> None:
    def pool(include: int) -> onnx.ModelProto:
        node = helper.make_node(
            "AveragePool",
            ["x"],
            ["y"],
            name="avg",
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
            count_include_pad=include,
        )
        return make([node], [1, 2, 6, 6])

    reason = hosted(pool(0), "avg")
    assert "count_include_pad=0 are not supported" in reason
    assert "supported: pads 0, or count_include_pad=1" in reason
    assert load_onnx(pool(1)).nodes[0].attrs["count_include_pad"] == 1


def test_same_lower_goes_to_the_host() -> None:
    reason = hosted(_conv(auto_pad="SAME_LOWER"), "layer1.0.conv1")
    assert "auto_pad SAME_LOWER is not supported" in reason and "SAME_UPPER" in reason


@pytest.mark.parametrize(
    ("attrs", "message"),
    [({"transA": 1}, "transA=1"), ({"alpha": 2.0}, "alpha 2.0"), ({"beta": 0.5}, "beta 0.5")],
)
def test_gemm_attributes_go_to_the_host(attrs: dict[str, Any], message: str) -> None:
    node = helper.make_node("Gemm", ["x", "B", "C"], ["y"], name="fc", transB=1, **attrs)
    rng = np.random.default_rng(0)
    b_shape = (3, 1) if "transA" in attrs else (3, 4)  # x^T (4, 1) @ B^T (1, 3)
    model = make([node], [1, 4], {"B": rand(rng, *b_shape), "C": rand(rng, 3)})
    assert message in hosted(model, "fc")


def test_standalone_mul_rejected() -> None:
    node = helper.make_node("Mul", ["x", "k"], ["y"], name="scale")
    assert "ConvInteger" in hosted(make([node], [1, 4], {"k": np.float32(2.0)}), "scale")


def test_two_inputs_rejected() -> None:
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])],
        "g",
        [helper.make_tensor_value_info(n, F, [1, 4]) for n in "ab"],
        [helper.make_tensor_value_info("y", F, None)],
    )
    err = error(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert "has 2 inputs" in str(err) and "exactly 1 input" in str(err)


def test_int_input_rejected() -> None:
    err = error(make([helper.make_node("Relu", ["x"], ["y"])], [1, 4], x_type=TensorProto.INT8))
    assert "dtype INT8 is not supported" in str(err)


def test_missing_and_garbage_files(tmp_path: Path) -> None:
    err = error(tmp_path / "nope.onnx")
    assert "no such file" in str(err) and "nope.onnx" in str(err)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, np.uint8).tobytes())
    assert "is not an ONNX model" in str(error(garbage))
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    assert "not an ONNX model" in str(error(empty))


def test_graph_without_nodes() -> None:
    graph = helper.make_graph([], "g", [helper.make_tensor_value_info("x", F, [1, 4])], [])
    err = error(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert "has no nodes" in str(err)


# --------------------------------------------------------------------------- quantized forms


def test_qdq_conv_records_scales_and_int8_weights() -> None:
    rng = np.random.default_rng(7)
    wq = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    ws = rng.uniform(0.001, 0.01, 4).astype(np.float32)
    s_x, s_y = np.float32(0.03), np.float32(0.05)
    bq = rng.integers(-500, 500, 4).astype(np.int32)
    zero = np.int8(0)
    inits = {
        "s_x": s_x, "s_y": s_y, "z": np.array(zero), "wq": wq, "ws": ws,
        "wz": np.zeros(4, np.int8), "bq": bq, "bs": (s_x * ws).astype(np.float32),
        "bz": np.zeros(4, np.int32),
    }  # fmt: skip
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_x", "z"], ["xq"], name="q_in"),
        helper.make_node("DequantizeLinear", ["xq", "s_x", "z"], ["xd"], name="dq_in"),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], name="dq_w", axis=0),
        helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["b"], name="dq_b", axis=0),
        helper.make_node("Conv", ["xd", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "s_y", "z"], ["cq"], name="q_out"),
        helper.make_node("DequantizeLinear", ["cq", "s_y", "z"], ["y"], name="dq_out"),
    ]
    g = load_onnx(make(nodes, [1, 3, 6, 6], inits, opset=13))
    (conv,) = g.nodes
    assert g.tensors["x"].scale == pytest.approx(0.03) and g.tensors["c"].scale == pytest.approx(
        0.05
    )
    assert g.outputs == ["c"]
    np.testing.assert_array_equal(conv.params["weight_q"], wq)
    np.testing.assert_array_equal(conv.params["weight_scale"], ws)
    np.testing.assert_array_equal(conv.params["bias_q"], bq)
    np.testing.assert_allclose(conv.params["weight"], wq * ws[:, None, None, None], rtol=1e-6)


def _q_model(zp: np.ndarray | None) -> onnx.ModelProto:
    inputs = ["x", "s"] + (["z"] if zp is not None else [])
    inits = {"s": np.float32(0.1)} | ({"z": zp} if zp is not None else {})
    nodes = [
        helper.make_node("QuantizeLinear", inputs, ["q"], name="quant"),
        helper.make_node("DequantizeLinear", ["q", *inputs[1:]], ["y"], name="dequant"),
    ]
    return make(nodes, [1, 4], inits, opset=13)


def _zero_point_of_input(model: onnx.ModelProto) -> int:
    """The int8 zero point the importer gives the input of a Q -> DQ -> Relu model."""
    relu = helper.make_node("Relu", ["y"], ["r"], name="relu")
    model.graph.node.append(relu)
    model.graph.output[0].name = "r"
    g = load_onnx(model)
    return g.tensors[g.inputs[0]].zero_point


def test_activation_zero_points_become_int8_zero_points() -> None:
    """An asymmetric int8 zero point is kept; a uint8 code u is the int8 code u - 128, so a
    uint8 zero point z is the int8 zero point z - 128 (absent: uint8 0, so -128)."""
    assert _zero_point_of_input(_q_model(np.array(3, np.int8))) == 3
    assert _zero_point_of_input(_q_model(np.array(0, np.uint8))) == -128
    assert _zero_point_of_input(_q_model(np.array(200, np.uint8))) == 72
    assert _zero_point_of_input(_q_model(None)) == -128  # QuantizeLinear's default: uint8


def test_per_axis_activation_zero_point_runs_on_the_host() -> None:
    model = _q_model(np.array([3, -5, 0, 7], np.int8))
    for init in model.graph.initializer:
        if init.name == "s":
            init.CopyFrom(numpy_helper.from_array(np.full(4, 0.1, np.float32), "s"))
    reason = hosted(model, "quant")
    assert "per-axis y_zero_point (shape (4,)) is not supported" in reason, reason


def _qlinear_conv_model(rng: np.random.Generator) -> tuple[onnx.ModelProto, np.ndarray]:
    wq = rng.integers(-127, 128, (6, 3, 3, 3)).astype(np.int8)
    ws = rng.uniform(0.002, 0.01, 6).astype(np.float32)
    s_x, s_y = np.float32(0.025), np.float32(0.04)
    bq = rng.integers(-3000, 3000, 6).astype(np.int32)
    z = np.array(0, np.int8)
    inits = {
        "s_x": s_x,
        "s_y": s_y,
        "z": z,
        "wq": wq,
        "ws": ws,
        "wz": np.zeros(6, np.int8),
        "bq": bq,
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_x", "z"], ["xq"], name="q"),
        helper.make_node(
            "QLinearConv",
            ["xq", "s_x", "z", "wq", "ws", "wz", "s_y", "z", "bq"],
            ["yq"],
            name="qconv",
            pads=[1, 1, 1, 1],
            strides=[2, 2],
        ),
        helper.make_node("DequantizeLinear", ["yq", "s_y", "z"], ["y"], name="dq"),
    ]
    return make(nodes, [1, 3, 9, 9], inits, opset=13), wq


def test_qlinear_conv_matches_onnxruntime() -> None:
    from arch.reference import evaluate, quantize_input
    from compiler.frontend import compile_front

    rng = np.random.default_rng(11)
    model, wq = _qlinear_conv_model(rng)
    g = compile_front(model)
    (conv,) = g.nodes
    np.testing.assert_array_equal(conv.params["weight"], wq)  # kept, not re-quantized
    assert g.tensors["x"].scale == pytest.approx(0.025) and g.tensors["yq"].scale == pytest.approx(
        0.04
    )
    x = rand(rng, 1, 3, 9, 9)
    ours = evaluate(g, quantize_input(x, 0.025))["yq"].astype(np.int32)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.output.append(helper.make_tensor_value_info("yq", TensorProto.INT8, None))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    theirs = ort.InferenceSession(m.SerializeToString(), options).run(["yq"], {"x": x})[0]
    assert np.abs(ours - theirs.astype(np.int32)).max() <= 1  # ORT rounds half to even
    assert np.mean(ours == theirs) > 0.95 and np.abs(theirs).max() > 20


def test_conv_integer_cast_mul() -> None:
    rng = np.random.default_rng(12)
    wq = rng.integers(-127, 128, (5, 3, 1, 1)).astype(np.int8)
    scale = rng.uniform(1e-4, 1e-3, 5).astype(np.float32)  # s_x * s_w per output channel
    inits = {
        "s_x": np.float32(0.05),
        "z": np.array(0, np.int8),
        "wq": wq,
        "k": scale.reshape(1, 5, 1, 1),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_x", "z"], ["xq"], name="q"),
        helper.make_node("ConvInteger", ["xq", "wq"], ["acc"], name="convint"),
        helper.make_node("Cast", ["acc"], ["accf"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["accf", "k"], ["y"], name="scale"),
    ]
    g = load_onnx(make(nodes, [1, 3, 4, 4], inits, opset=13))
    (conv,) = g.nodes
    assert conv.name == "convint" and conv.output == "y" and conv.onnx_nodes == ["convint", "scale"]
    np.testing.assert_array_equal(conv.params["weight_q"], wq)
    np.testing.assert_allclose(conv.params["weight_scale"], scale / 0.05, rtol=1e-6)
    np.testing.assert_allclose(
        conv.params["weight"], wq * (scale / 0.05)[:, None, None, None], rtol=1e-6
    )


def test_conv_integer_without_scale_rejected() -> None:
    wq = np.random.default_rng(0).integers(-127, 128, (5, 3, 1, 1)).astype(np.int8)
    inits = {"s_x": np.float32(0.05), "z": np.array(0, np.int8), "wq": wq}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_x", "z"], ["xq"], name="q"),
        helper.make_node("ConvInteger", ["xq", "wq"], ["acc"], name="convint"),
        helper.make_node("Cast", ["acc"], ["y"], name="cast", to=TensorProto.FLOAT),
    ]
    err = error(make(nodes, [1, 3, 4, 4], inits, opset=13))
    assert err.node == "convint" and "never scaled" in str(err)


def test_qlinear_matmul_and_matmul_integer() -> None:
    rng = np.random.default_rng(13)
    bq = rng.integers(-127, 128, (8, 3)).astype(np.int8)
    z = np.array(0, np.int8)
    inits = {
        "s_a": np.float32(0.02), "z": z, "bq": bq, "bs": np.float32(0.004), "s_y": np.float32(0.1),
        "k": np.float32(0.02 * 0.004),
    }  # fmt: skip
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_a", "z"], ["xq"], name="q"),
        helper.make_node(
            "QLinearMatMul", ["xq", "s_a", "z", "bq", "bs", "z", "s_y", "z"], ["y1"], name="qmm"
        ),
        helper.make_node("MatMulInteger", ["xq", "bq"], ["acc"], name="mmi"),
        helper.make_node("Cast", ["acc"], ["accf"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["k", "accf"], ["y2"], name="scale"),
        helper.make_node("DequantizeLinear", ["y1", "s_y", "z"], ["y"], name="dq"),
    ]
    g = load_onnx(make(nodes, [1, 8], inits, outputs=["y", "y2"], opset=13))
    assert [n.op for n in g.nodes] == ["matmul", "matmul"]
    for n in g.nodes:
        np.testing.assert_array_equal(n.params["weight_q"], bq.T)
        np.testing.assert_allclose(n.params["weight_scale"], np.full(3, 0.004), rtol=1e-6)
    assert g.tensors["y1"].scale == pytest.approx(0.1) and g.outputs == ["y1", "y2"]


def test_int8_maxpool_between_qlinear_convs_matches_onnxruntime() -> None:
    from arch.reference import evaluate, quantize_input
    from compiler.frontend import compile_front

    rng = np.random.default_rng(14)
    z = np.array(0, np.int8)
    inits: dict[str, Any] = {"z": z, "wz": np.zeros(4, np.int8)}
    inits |= {"s_x": np.float32(0.03), "s_1": np.float32(0.05), "s_2": np.float32(0.08)}
    for i, cin in ((1, 3), (2, 4)):
        inits[f"w{i}"] = rng.integers(-127, 128, (4, cin, 3, 3)).astype(np.int8)
        inits[f"ws{i}"] = rng.uniform(0.002, 0.01, 4).astype(np.float32)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_x", "z"], ["xq"], name="q"),
        helper.make_node(
            "QLinearConv", ["xq", "s_x", "z", "w1", "ws1", "wz", "s_1", "z"], ["c1"],
            name="qconv1", pads=[1, 1, 1, 1],
        ),
        helper.make_node("MaxPool", ["c1"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node(
            "QLinearConv", ["mp", "s_1", "z", "w2", "ws2", "wz", "s_2", "z"], ["c2"],
            name="qconv2", pads=[1, 1, 1, 1],
        ),
        helper.make_node("DequantizeLinear", ["c2", "s_2", "z"], ["y"], name="dq"),
    ]  # fmt: skip
    model = make(nodes, [1, 3, 8, 8], inits, opset=13)
    g = compile_front(model)
    assert [n.op for n in g.nodes] == ["conv", "maxpool", "conv"]
    assert g.tensors["mp"].scale == pytest.approx(0.05) and g.tensors["c2"].scale == pytest.approx(
        0.08
    )
    x = rand(rng, 1, 3, 8, 8)
    ours = evaluate(g, quantize_input(x, 0.03))["c2"].astype(np.int32)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    y = ort.InferenceSession(model.SerializeToString(), options).run(["y"], {"x": x})[0]
    theirs = np.rint(y / 0.08).astype(np.int32)
    assert np.abs(ours - theirs).max() <= 1 and np.mean(ours == theirs) > 0.95

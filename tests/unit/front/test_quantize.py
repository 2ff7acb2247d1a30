"""quantize: scales, int8 weights, int32 biases and rescales against independent numpy math.

Activation ranges come from a separate onnxruntime run in the test; integer results are checked
against plain Python integers (``floor(x * m / 2**s + 1/2)``), not against arch.reference_ops.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from arch.reference import evaluate
from compiler import quantizers
from compiler.calibrate import default_calibration
from compiler.errors import CompileError
from compiler.frontend import compile_front, dequantize, quantize_input
from compiler.ir import Graph, Node, Tensor
from compiler.onnx import load_onnx
from compiler.op_rules import RULES
from compiler.passes import canonicalize, quantize, run_front
from tests.onnx_graphs import make_model

F = TensorProto.FLOAT
make = functools.partial(make_model, opset=13)


def ranges(model: onnx.ModelProto, names: Sequence[str], xs: Sequence[np.ndarray]) -> list[float]:
    """max |tensor| over ``xs`` for each of ``names``, by onnxruntime."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for n in names:
        if n not in [o.name for o in m.graph.output]:
            m.graph.output.append(helper.make_tensor_value_info(n, F, None))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), options)
    outs = [sess.run(list(names), {"x": x}) for x in xs]
    return [max(float(np.abs(o[i]).max()) for o in outs) for i in range(len(names))]


def rescale(x: int, mult: int, shift: int) -> int:
    """The stated fixed-point rule in Python integers: floor(x * mult / 2**shift + 1/2)."""
    return (x * mult + (1 << shift >> 1)) >> shift


def real(mult: np.ndarray, shift: np.ndarray) -> np.ndarray:
    return mult.astype(np.float64) / 2.0 ** shift.astype(np.float64)


def cal(shape: Sequence[int], count: int = 3, seed: int = 99) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(shape)).astype(np.float32) for _ in range(count)]


# --------------------------------------------------------------------------- fp32 models


def test_conv_per_channel_weights_bias_and_rescale() -> None:
    rng = np.random.default_rng(31)
    w = rng.normal(0, 0.2, (6, 3, 3, 3)).astype(np.float32)
    w[2] *= 10  # channels with very different ranges
    w[4] *= 0.05
    b = rng.normal(0, 0.3, 6).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    model = make(nodes, [1, 3, 8, 8], {"w": w, "b": b})
    xs = cal((1, 3, 8, 8))
    g = run_front(load_onnx(model), xs)
    (conv,) = g.nodes
    p = conv.params
    s_in = max(float(np.abs(x).max()) for x in xs) / 127
    (y_max,) = ranges(model, ["y"], xs)
    s_out = y_max / 127
    s_w = np.abs(w.astype(np.float64)).reshape(6, -1).max(axis=1) / 127
    assert g.tensors["x"].scale == pytest.approx(s_in, rel=1e-12)
    assert g.tensors["y"].scale == pytest.approx(s_out, rel=1e-6)
    np.testing.assert_array_equal(p["weight"], np.rint(w / s_w[:, None, None, None]))
    assert np.all(np.abs(p["weight"]).reshape(6, -1).max(axis=1) == 127)
    np.testing.assert_array_equal(p["bias"], np.rint(b / (s_in * s_w)))
    s_y = g.tensors["y"].scale
    assert s_y is not None
    np.testing.assert_allclose(real(p["mult"], p["shift"]), s_in * s_w / s_y, rtol=1e-8)
    assert p["mult"].dtype == np.int64 and np.all(p["mult"] < 2**31)
    np.testing.assert_array_equal(p["clamp"], [0, 127])


def _residual_mlp(rng: np.random.Generator) -> onnx.ModelProto:
    inits = {
        "w1": rng.normal(0, 0.5, (8, 8)).astype(np.float32),
        "b1": rng.normal(0, 0.1, 8).astype(np.float32),
        "w2": rng.normal(0, 0.5, (8, 8)).astype(np.float32),
        "b2": rng.normal(0, 0.1, 8).astype(np.float32),
    }
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["g1"], name="fc1", transB=1),
        helper.make_node("Relu", ["g1"], ["r1"], name="relu1"),
        helper.make_node("Gemm", ["r1", "w2", "b2"], ["g2"], name="fc2", transB=1),
        helper.make_node("Add", ["g2", "r1"], ["y"], name="add"),
    ]
    return make(nodes, [1, 8], inits)


def test_gemm_residual_is_bit_exact_with_python_ints() -> None:
    model = _residual_mlp(np.random.default_rng(32))
    xs = cal((1, 8))
    g = run_front(load_onnx(model), xs)
    fc1, fc2 = g.nodes
    assert fc2.inputs == ["r1", "r1"] and fc2.output == "y" and fc2.attrs["act"] is None
    s_r = g.tensors["r1"].scale
    assert s_r is not None
    w2 = numpy_helper.to_array(model.graph.initializer[2]).astype(np.float64)
    s_w = np.abs(w2).max(axis=1) / 127
    p = fc2.params
    np.testing.assert_allclose(real(p["res_mult"], p["res_shift"]), s_r / (s_r * s_w), rtol=1e-8)
    np.testing.assert_array_equal(p["clamp"], [-128, 127])

    x = xs[0] * 0.7
    values = evaluate(g, quantize_input(x, g.tensors["x"].scale or 0))
    r = [int(v) for v in values["r1"][0]]
    expected = []
    for o in range(8):
        acc = sum(r[k] * int(p["weight"][o, k]) for k in range(8)) + int(p["bias"][o])
        acc += rescale(r[o], int(p["res_mult"][o]), int(p["res_shift"][o]))
        expected.append(min(127, max(-128, rescale(acc, int(p["mult"][o]), int(p["shift"][o])))))
    assert values["y"].dtype == np.int8
    np.testing.assert_array_equal(values["y"][0], expected)


def test_add_and_pool_rescales() -> None:
    rng = np.random.default_rng(33)
    inits = {f"w{i}": rng.normal(0, 0.4, (4, 3, 1, 1)).astype(np.float32) for i in (1, 2)}
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1"),
        helper.make_node("Relu", ["c1"], ["a"], name="relu1"),
        helper.make_node("Conv", ["x", "w2"], ["c2"], name="conv2"),
        helper.make_node("Relu", ["c2"], ["b"], name="relu2"),
        helper.make_node("Add", ["a", "b"], ["s"], name="add"),
        helper.make_node("MaxPool", ["s"], ["m"], name="max", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("AveragePool", ["m"], ["p"], name="avg", kernel_shape=[3, 3]),
        helper.make_node("GlobalAveragePool", ["p"], ["y"], name="gap"),
    ]
    model = make(nodes, [1, 3, 12, 12], inits)
    xs = cal((1, 3, 12, 12))
    g = run_front(load_onnx(model), xs)
    scale = {k: t.scale for k, t in g.tensors.items()}
    a_max, b_max, s_max, p_max, y_max = ranges(model, ["a", "b", "s", "p", "y"], xs)
    assert scale["a"] == pytest.approx(a_max / 127, rel=1e-6)
    assert scale["s"] == pytest.approx(s_max / 127, rel=1e-6)
    assert scale["m"] == scale["s"]  # max pool keeps the scale
    add, avg, gap = g.node("add").params, g.node("avg").params, g.node("gap").params
    s_acc = s_max / 127 / 256
    assert real(add["a_mult"], add["a_shift"])[0] == pytest.approx(a_max / 127 / s_acc, rel=1e-6)
    assert real(add["b_mult"], add["b_shift"])[0] == pytest.approx(b_max / 127 / s_acc, rel=1e-6)
    assert (int(add["mult"][0]), int(add["shift"][0])) == (2**30, 38)  # exactly 2**-8
    np.testing.assert_array_equal(add["clamp"], [-128, 127])
    assert real(avg["mult"], avg["shift"])[0] == pytest.approx(s_max / (p_max * 9), rel=1e-6)
    assert real(gap["mult"], gap["shift"])[0] == pytest.approx(p_max / (y_max * 16), rel=1e-6)

    values = evaluate(g, quantize_input(xs[1], scale["x"] or 0))
    qa, qb = values["a"].astype(np.int64), values["b"].astype(np.int64)
    m = (
        int(add["a_mult"][0]),
        int(add["a_shift"][0]),
        int(add["b_mult"][0]),
        int(add["b_shift"][0]),
    )
    flat = [
        max(
            -128,
            min(127, rescale(rescale(int(u), m[0], m[1]) + rescale(int(v), m[2], m[3]), 2**30, 38)),
        )
        for u, v in zip(qa.ravel(), qb.ravel(), strict=True)
    ]
    np.testing.assert_array_equal(values["s"].ravel(), flat)
    y = dequantize(values["y"], scale["y"] or 0)
    fp32 = ranges(model, ["y"], [xs[1]])[0]
    assert np.abs(y).max() == pytest.approx(fp32, rel=0.1)


# --------------------------------------------------------------------------- given quantization


def qdq_model(out_scale: float = 0.1) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """x -Q/DQ(0.03)-> Conv(DQ int8 per-channel weights, DQ int32 bias) -Q/DQ-> Clip(0, 6)
    -Q/DQ-> y, all scales given."""
    rng = np.random.default_rng(34)
    s_x = np.float32(0.03)
    ws = rng.uniform(0.002, 0.02, 5).astype(np.float32)
    inits = {
        "s_x": s_x,
        "s_c": np.float32(out_scale),
        "z": np.array(0, np.int8),
        "wq": rng.integers(-127, 128, (5, 3, 3, 3)).astype(np.int8),
        "ws": ws,
        "wz": np.zeros(5, np.int8),
        "bq": rng.integers(-2000, 2000, 5).astype(np.int32),
        "bs": (s_x * ws).astype(np.float32),
        "bz": np.zeros(5, np.int32),
        "lo": np.array(0, np.float32),
        "hi": np.array(6, np.float32),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_x", "z"], ["xq"], name="q_x"),
        helper.make_node("DequantizeLinear", ["xq", "s_x", "z"], ["xd"], name="dq_x"),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], name="dq_w", axis=0),
        helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["b"], name="dq_b", axis=0),
        helper.make_node("Conv", ["xd", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "s_c", "z"], ["cq"], name="q_c"),
        helper.make_node("DequantizeLinear", ["cq", "s_c", "z"], ["cd"], name="dq_c"),
        helper.make_node("Clip", ["cd", "lo", "hi"], ["r"], name="relu6"),
        helper.make_node("QuantizeLinear", ["r", "s_c", "z"], ["rq"], name="q_r"),
        helper.make_node("DequantizeLinear", ["rq", "s_c", "z"], ["y"], name="dq_r"),
    ]
    return make(nodes, [1, 3, 6, 6], inits), inits


def test_qdq_model_keeps_given_scales_and_weights() -> None:
    model, inits = qdq_model()
    g = compile_front(model)
    (conv,) = g.nodes
    assert conv.attrs["act"] == "relu6" and conv.output == "r"
    assert g.tensors["x"].scale == pytest.approx(0.03) and g.tensors["r"].scale == pytest.approx(
        0.1
    )
    p = conv.params
    np.testing.assert_array_equal(p["weight"], inits["wq"])
    np.testing.assert_array_equal(p["bias"], inits["bq"])
    np.testing.assert_allclose(real(p["mult"], p["shift"]), 0.03 * inits["ws"] / 0.1, rtol=1e-6)
    np.testing.assert_array_equal(p["clamp"], [0, 60])  # round(6 / 0.1)

    x = cal((1, 3, 6, 6), 1, seed=5)[0]
    ours = evaluate(g, quantize_input(x, 0.03))["r"].astype(np.int32)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    # The model's own semantics: ORT's extended level fuses the QDQ group into an int8 kernel
    # that saturates intermediate sums on some x86 CPUs and is off by several LSBs.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    theirs = ort.InferenceSession(model.SerializeToString(), options).run(["y"], {"x": x})[0]
    theirs_q = np.rint(theirs / 0.1).astype(np.int32)
    assert np.abs(ours - theirs_q).max() <= 1 and np.mean(ours == theirs_q) > 0.99
    assert theirs_q.max() > 30


def hosted_reason(model: onnx.ModelProto, node: str) -> str:
    """``node`` cannot be quantized for the accelerator, so it runs on the host: the reason."""
    graph = compile_front(model)
    [host] = [n for n in graph.nodes if n.op == "host" and node in n.onnx_nodes]
    return graph.host_reasons[host.name]


def test_out_of_range_multiplier_sends_the_node_to_the_host() -> None:
    model, _ = qdq_model(out_scale=1e-30)
    assert "out of range" in hosted_reason(model, "conv")


def test_bias_that_does_not_fit_int32_sends_the_node_to_the_host() -> None:
    w = np.full((2, 3, 1, 1), 1e-4, np.float32) * np.array([1, -1, 1], np.float32)[:, None, None]
    b = np.array([1e9, -1e9], np.float32)
    model = make(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv")],
        [1, 3, 2, 2],
        {"w": w, "b": b},
    )
    assert re.search(r"bias .* does not fit int32", hosted_reason(model, "conv"))
    with pytest.raises(CompileError, match=r"node 'conv' \(conv\): bias .* does not fit int32"):
        quantize.run(canonicalize.run(load_onnx(model)), [np.ones((1, 3, 2, 2), np.float32)])


# --------------------------------------------------------------------------- pass hygiene


def _canonical(seed: int = 35) -> Graph:
    return canonicalize.run(load_onnx(_residual_mlp(np.random.default_rng(seed))))


def test_quantize_does_not_modify_its_input() -> None:
    g = _canonical()
    before = g.summary()
    weights = {n.name: n.params["weight"].copy() for n in g.nodes}
    q = quantize.run(g, cal((1, 8)))
    assert q.quantized and not g.quantized and g.summary() == before
    assert all(t.scale is None for t in g.tensors.values())
    for n in g.nodes:
        assert n.params["weight"].dtype == np.float32
        np.testing.assert_array_equal(n.params["weight"], weights[n.name])
    with pytest.raises(CompileError, match="already quantized"):
        quantize.run(q, cal((1, 8)))


@pytest.mark.parametrize(
    ("inputs", "reason"),
    [
        ([], "expected a non-empty list of input arrays"),
        (np.zeros((2, 1, 8), np.float32), "expected a non-empty list of input arrays"),
        ([np.zeros((1, 8), np.float32), np.zeros((1, 9), np.float32)], "input 1 is float32 (1, 9)"),
        ([np.zeros((1, 8), np.int64)], "input 0 is int64 (1, 8)"),
    ],
)
def test_bad_calibration_inputs(inputs: list[np.ndarray], reason: str) -> None:
    with pytest.raises(CompileError) as info:
        quantize.run(_canonical(), inputs)
    assert (info.value.node, info.value.op, info.value.reason) == (None, "calibration", reason)
    assert "(1, 8)" in str(info.value.supported)


def test_calibration_without_batch_axis_is_accepted() -> None:
    xs = cal((1, 8))
    a = quantize.run(_canonical(), xs)
    b = quantize.run(_canonical(), [x[0] for x in xs])
    assert a.summary() == b.summary()


def test_default_calibration_is_seeded() -> None:
    g = load_onnx(_residual_mlp(np.random.default_rng(0)))
    a, b, c = (
        default_calibration(g, seed=1),
        default_calibration(g, seed=1),
        default_calibration(g, seed=2),
    )
    assert len(a) == 4 and all(x.shape == (1, 8) and x.dtype == np.float32 for x in a)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a[0], c[0]) and not np.array_equal(a[0], a[1])


def test_quantize_input_rounds_half_away_from_zero() -> None:
    x = np.array([0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49, 200.0, -200.0, 1e9], np.float32) * 0.25
    q = quantize_input(x, 0.25)
    np.testing.assert_array_equal(q, [1, -1, 2, -2, 3, -3, 0, 127, -128, 127])
    assert q.dtype == np.int8
    np.testing.assert_array_equal(dequantize(q, 0.25), q.astype(np.float32) * 0.25)


# --------------------------------------------------------------------------- per-op rescales
# Each quantizer on a hand-made int8 graph: the rescale it writes is the real ratio of the
# scales (worked out here from the op's definition), the clamp is derived by hand from the
# activation, and a ratio out of the fixed-point range names the node and the operand.


def _graph(node: Node, scales: dict[str, float], zero_point: int = 0) -> Graph:
    tensors = {
        name: Tensor(name, (1, 8, 4, 4), scale, zero_point if name == node.output else 0)
        for name, scale in scales.items()
    }
    return Graph([node], tensors, [node.inputs[0]], [node.output])


def _close(mult: np.ndarray, shift: np.ndarray, ratio: float) -> None:
    assert mult.shape == shift.shape == (1,)
    assert abs(real(mult, shift)[0] - ratio) <= ratio * 2.0**-28, (mult, shift, ratio)


# relu6 at scale 0.1 with zero point 3: real 0 is code 3, real 6 is 3 + 60 = 63.
RELU6 = ("relu6", 0.1, 3, [3, 63])


def test_add_rescales_each_input_to_the_accumulator_and_back() -> None:
    rng = np.random.default_rng(71)
    s_a, s_b = rng.uniform(0.01, 0.2, 2)
    act, s_out, zp, clamp = RELU6
    node = Node("sum", "add", ["a", "b"], "y", {"act": act})
    quantizers.add(_graph(node, {"a": s_a, "b": s_b, "y": s_out}, zp), node)
    s_acc = s_out / 256  # ADD_EXTRA_BITS = 8 extra fraction bits
    _close(node.params["a_mult"], node.params["a_shift"], s_a / s_acc)
    _close(node.params["b_mult"], node.params["b_shift"], s_b / s_acc)
    _close(node.params["mult"], node.params["shift"], 1 / 256)
    assert node.params["clamp"].tolist() == clamp


@pytest.mark.parametrize("which", ["a", "b"])
def test_add_input_out_of_range_names_the_node_and_the_input(which: str) -> None:
    node = Node("sum", "add", ["a", "b"], "y", {"act": None})
    scales = {"a": 0.05, "b": 0.05, "y": 0.1} | {which: 1e-30}
    with pytest.raises(CompileError) as info:
        quantizers.add(_graph(node, scales), node)
    assert (info.value.node, info.value.op) == ("sum", "add")
    # 1e-30 / (0.1 / 2**8) = 2.56e-27, far below 2**-32
    assert f"input '{which}' rescale 2.56e-27..2.56e-27 is out of range" in str(info.value)


@pytest.mark.parametrize("gated", [False, True])
def test_scale_rescales_the_product_of_its_inputs(gated: bool) -> None:
    act, s_out, zp, clamp = RELU6
    inputs = ["x", "g"] if gated else ["x"]
    node = Node("se", "scale", inputs, "y", {"act": act})
    scales = {"x": 0.04, "g": 1 / 127, "y": s_out}
    quantizers.scale(_graph(node, scales, zp), node)
    ratio = 0.04 * (1 / 127 if gated else 1) / s_out
    _close(node.params["mult"], node.params["shift"], ratio)
    assert node.params["clamp"].tolist() == clamp
    node.attrs["act"] = "relu"
    quantizers.scale(_graph(node, scales, zp), node)
    assert node.params["clamp"].tolist() == [3, 127]


def test_batch_matmul_rescales_by_both_scales_and_alpha() -> None:
    act, s_out, zp, clamp = RELU6
    node = Node("qk", "batch_matmul", ["q", "k"], "y", {"act": act})
    scales = {"q": 0.03, "k": 0.05, "y": s_out}
    quantizers.batch_matmul(_graph(node, scales, zp), node)  # no alpha: 1
    _close(node.params["mult"], node.params["shift"], 0.03 * 0.05 / s_out)
    assert node.params["clamp"].tolist() == clamp
    node.params = {"alpha": np.array([0.125])}
    quantizers.batch_matmul(_graph(node, scales, zp), node)
    _close(node.params["mult"], node.params["shift"], 0.03 * 0.05 * 0.125 / s_out)


def test_pools_rescale_by_the_window_size() -> None:
    pool = Node("p", "avgpool", ["x"], "y", {"kernel": (2, 3)})
    quantizers.avgpool(_graph(pool, {"x": 0.06, "y": 0.02}), pool)
    _close(pool.params["mult"], pool.params["shift"], 0.06 / (0.02 * 6))
    gap = Node("gap", "global_avgpool", ["x"], "y", {})
    quantizers.global_avgpool(_graph(gap, {"x": 0.06, "y": 0.02}), gap)  # 4 x 4 pixels
    _close(gap.params["mult"], gap.params["shift"], 0.06 / (0.02 * 16))


@pytest.mark.parametrize(
    ("op", "inputs", "attrs"),
    [
        ("avgpool", ["x"], {"kernel": (2, 2)}),
        ("global_avgpool", ["x"], {}),
        ("scale", ["x"], {"act": None}),
        ("batch_matmul", ["x", "x2"], {"act": None}),
    ],
)
def test_an_output_rescale_out_of_range_names_the_node(op: str, inputs: list[str], attrs) -> None:
    node = Node("n1", op, inputs, "y", attrs)
    scales = {"x": 1e-30, "x2": 1.0, "y": 1.0}
    with pytest.raises(CompileError) as info:
        quantizer = RULES[op].quantize
        assert quantizer is not None
        quantizer(_graph(node, scales), node)
    assert (info.value.node, info.value.op) == ("n1", op)
    assert re.search(r": output rescale [0-9.e+-]+\.\.[0-9.e+-]+ is out of range", str(info.value))


def _concat_model(two_concats: bool) -> onnx.ModelProto:
    """x -> conv a, conv b; Concat(x, a) or, with ``two_concats``, Concat(a, b) and
    Concat(a, c)."""
    rng = np.random.default_rng(43)
    inits = {f"w{k}": rng.normal(0, 0.5, (4, 4, 1, 1)).astype(np.float32) for k in ("a", "b", "c")}
    convs = [helper.make_node("Conv", ["x", f"w{k}"], [k], name=f"conv_{k}") for k in "abc"]
    if two_concats:
        cats = [
            helper.make_node("Concat", ["a", "b"], ["y"], name="cat1", axis=1),
            helper.make_node("Concat", ["a", "c"], ["z"], name="cat2", axis=1),
        ]
        return make([*convs, *cats], [1, 4, 3, 3], inits, ("y", "z"))
    cat = helper.make_node("Concat", ["x", "a"], ["y"], name="cat", axis=1)
    return make([convs[0], cat], [1, 4, 3, 3], {"wa": inits["wa"]})


@pytest.mark.parametrize(
    ("two_concats", "node", "reason"),
    [
        (False, "cat", "input 'x' comes from the graph input and cannot take the concat's scale"),
        (
            True,
            "cat2",
            "input 'a' shares 'a' with concat 'cat1' and cannot take the concat's scale",
        ),
    ],
)
def test_a_concat_input_that_cannot_take_its_scale_is_named(two_concats, node, reason) -> None:
    """An int8 concat copies codes, so each input's producer must requantize to the concat's
    scale: the graph input cannot, nor can a tensor two concats read."""
    graph = canonicalize.run(load_onnx(_concat_model(two_concats)))
    with pytest.raises(CompileError) as info:
        quantize.run(graph, cal((1, 4, 3, 3)))
    assert (info.value.node, info.value.op, info.value.reason) == (node, "concat", reason)
    assert info.value.supported == (
        "inputs made by conv, FC, add, average pool or host nodes, one concat each"
    )


def _conv(params: dict[str, np.ndarray]) -> tuple[Graph, Node]:
    node = Node("c", "conv", ["x"], "y", {"act": None}, params)
    return _graph(node, {"x": 1.0, "y": 1.0}), node


def test_weighted_bias_bounds_zero_channels_and_given_int_biases() -> None:
    """Weights of max |w| = 127 have scale 1, so at input scale 1 the accumulator scale is 1 and
    a bias is its own code: int32's ends are accepted, one past is refused by name. An all-zero
    output channel gets scale 1 (not 0). A given int bias (bias_q) is kept when it is the
    float bias at the accumulator scale within rtol 1e-5 / atol 1e-3 codes, else recomputed."""
    w = np.array([127.0, -127.0, 0.0, 0.0]).reshape(4, 1, 1, 1)
    ends = np.array([2**31 - 1, -(2**31), 5.0, -3.0])
    g, node = _conv({"weight": w, "bias": ends})
    quantizers.weighted(g, node)
    assert node.params["bias"].tolist() == [2**31 - 1, -(2**31), 5, -3]
    assert node.params["weight"][:, 0, 0, 0].tolist() == [127, -127, 0, 0]
    for past in (2.0**31, -(2.0**31) - 1):
        g, node = _conv({"weight": w, "bias": np.array([past, 0, 0, 0])})
        with pytest.raises(CompileError) as info:
            quantizers.weighted(g, node)
        assert (info.value.node, info.value.op) == ("c", "conv")
        assert info.value.reason.startswith(f"bias {past:.4g} does not fit int32")
        assert info.value.supported == "|bias / (s_in * s_w)| < 2**31"
    rng = np.random.default_rng(47)
    w = rng.normal(0, 1, (3, 2, 1, 1))
    wq = rng.integers(-127, 128, (3, 2, 1, 1)).astype(np.int8)
    sw = np.array([1e-4, 2e-4, 4e-4])
    acc = 1.0 * sw
    b = np.array([1_000_000.3, 5.0002, -2.0]) * acc  # in accumulator codes
    for given, kept in (
        ([1_000_005, 5, -2], [1_000_005, 5, -2]),  # 5 codes off 1e6: within rtol 1e-5
        ([2_000_000, 6, -2], [1_000_000, 5, -2]),  # far off
        ([1_000_005, 6, -2], [1_000_000, 5, -2]),  # one code off 5: beyond atol (all or none)
    ):
        params = {"weight": w, "weight_q": wq, "weight_scale": sw, "bias": b}
        g, node = _conv(params | {"bias_q": np.array(given)})
        quantizers.weighted(g, node)
        assert node.params["bias"].tolist() == kept
        np.testing.assert_array_equal(node.params["weight"], wq)


def test_clamps_of_each_activation() -> None:
    """Real 0 is the code z_out; relu6's top is z_out + 6 / s_out rounded, at most 127."""
    assert quantizers.store_clamp(None, 0.1, 3).tolist() == [-128, 127]
    assert quantizers.store_clamp("table", 0.1, 3).tolist() == [-128, 127]  # the table maps after
    assert quantizers.store_clamp("relu", 0.1, 3).tolist() == [3, 127]
    assert quantizers.store_clamp("relu6", 0.1, -5).tolist() == [-5, 55]
    assert quantizers.store_clamp("relu6", 0.04, 3).tolist() == [3, 127]  # 3 + 150 saturates
    assert quantizers.store_clamp("relu6", 0.09, 0).tolist() == [0, 67]  # 66.67 -> 67


def test_only_single_input_host_nodes_of_moving_ops_keep_codes() -> None:
    def host(ops: list[str], inputs: list[str]) -> Node:
        return Node("h", "host", inputs, "y", {"onnx_ops": ops})

    assert quantize._code_exact(host(["Transpose", "Reshape"], ["a"]))
    assert not quantize._code_exact(host(["Transpose"], ["a", "b"]))
    assert not quantize._code_exact(host(["Transpose", "Add"], ["a"]))
    assert not quantize._code_exact(Node("c", "maxpool", ["a"], "y", {"onnx_ops": ["MaxPool"]}))


def test_rescale_refusal_says_what_is_supported() -> None:
    node = Node("n1", "avgpool", ["x"], "y", {"kernel": (2, 2)})
    with pytest.raises(CompileError) as info:
        quantizers.avgpool(_graph(node, {"x": 1e-30, "y": 1.0}), node)
    assert info.value.supported == "rescales of about 2**-32 .. 2**31"
    with pytest.raises(ValueError, match=r"^scales must be finite and > 0, got 0.0$"):
        quantizers.quantize_multipliers(np.array([0.5, 0.0]))
    with pytest.raises(ValueError, match=r"^scales must be a real-valued array, got dtype bool$"):
        quantizers.quantize_multipliers(np.array([True]))


def _sigmoid_table(s_in: float, z_in: int, s_out: float, z_out: int) -> list[int]:
    """Entry t: sigmoid of input code t - 128, at the output scale, rounded half away from
    zero and saturated (computed here in Python floats)."""
    out = []
    for t in range(256):
        y = 1 / (1 + math.exp(-s_in * (t - 128 - z_in))) / s_out
        code = math.floor(abs(y) + 0.5) * (1 if y >= 0 else -1) + z_out
        out.append(min(127, max(-128, code)))
    return out


@pytest.mark.parametrize("fused", [True, False])
def test_a_table_with_zero_points_fuses_or_stands_alone(fused: bool) -> None:
    """A sigmoid after a conv (the conv's STORE maps its own output through the table) or after
    a max pool (a one-input scale of its own): the table is the function from the input's scale
    and zero point to the output's, and the input zero point travels as table_zp."""
    first = Node("p", "conv" if fused else "maxpool", ["x"], "a", {"act": None})
    table = Node("t", "table", ["a"], "y", {"function": "sigmoid", "args": ()})
    tensors = {
        "x": Tensor("x", (1, 4, 2, 2), 0.05, 0),
        "a": Tensor("a", (1, 4, 2, 2), 0.04, -7),
        "y": Tensor("y", (1, 4, 2, 2), 1 / 255, -128),
    }
    g = Graph([first, table], tensors, ["x"], ["y"])
    quantize._fuse_tables(g)
    want = _sigmoid_table(0.04, -7, 1 / 255, -128)
    node = first if fused else table
    assert [n.name for n in g.nodes] == (["p"] if fused else ["p", "t"])
    assert node.attrs["act"] == "table" and node.output == "y"
    assert node.params["table"].tolist() == want
    assert node.params["table_zp"].tolist() == [-7]
    if not fused:
        assert node.op == "scale"
        assert [node.params[k].tolist() for k in ("mult", "shift", "clamp")] == [
            [1], [0], [-128, 127]
        ]  # fmt: skip


# --------------------------------------------------------------------------- mutmut survivors
# Directed cases for what `make mutate` found untested in quantize.py; each expected value is
# worked out by hand from the pass's stated rules (docstrings), never read off its output.


def test_an_already_quantized_graph_is_refused_in_one_line() -> None:
    """Catches a wrong op or reason in the refusal of a graph quantized twice."""
    g = _canonical()
    g.quantized = True
    with pytest.raises(CompileError) as info:
        quantize.run(g, cal((1, 8)))
    assert (info.value.node, info.value.op, info.value.reason, info.value.supported) == (
        None,
        "quantize",
        "the graph is already quantized",
        None,
    )


def test_clamp_zero_point_defaults_to_zero() -> None:
    """Without a zero point real 0 is code 0: relu [0, 127], relu6 [0, round(6 / 0.1)]."""
    assert quantizers.store_clamp("relu", 0.1).tolist() == [0, 127]
    assert quantizers.store_clamp("relu6", 0.1).tolist() == [0, 60]


def _requant_case() -> tuple[Graph, set[str]]:
    """Three convs of x into Concat(b, a, c) -> y: b given at the concat's scale and zero point,
    a given at its own, c calibrated (not given); a tensor 'a#requant' already exists."""
    shape = (1, 4, 3, 3)
    t = {
        "x": Tensor("x", shape, 0.02, 0),
        "a": Tensor("a", shape, 0.05, 3),
        "b": Tensor("b", shape, 0.1, -2),
        "c": Tensor("c", shape, 0.07, 0),
        "y": Tensor("y", (1, 12, 3, 3), 0.1, -2),
        "a#requant": Tensor("a#requant", (1, 5), 0.5, 1),  # a name already taken
    }
    convs = [Node(f"conv_{k}", "conv", ["x"], k, {"act": None}) for k in "abc"]
    cat = Node("cat", "concat", ["b", "a", "c"], "y", {"axis": 1})
    return Graph([*convs, cat], t, ["x"], ["y"]), {"x", "a", "b", "y"}


def test_a_given_concat_input_at_another_scale_gets_a_requantizing_pool() -> None:
    """Only a (given, at another scale) is requantized: by a 1x1 stride-1 unpadded average pool
    into a new tensor at the concat's scale and zero point, named 'a#requant' plus '_' until
    free, placed just before the concat, which then reads it. b (given, same scale) is skipped
    before a; c (calibrated) is left alone."""
    g, given = _requant_case()
    before = dict(g.tensors)
    quantize._requantize_concat_inputs(g, given)
    name = "a#requant_"
    assert [n.name for n in g.nodes] == ["conv_a", "conv_b", "conv_c", name, "cat"]
    pool = g.nodes[3]
    attrs = {"kernel": (1, 1), "stride": (1, 1), "pads": (0, 0, 0, 0), "count_include_pad": 1}
    assert pool == Node(name, "avgpool", ["a"], name, attrs, {}, [])
    assert g.node("cat").inputs == ["b", name, "c"]
    assert g.tensors[name] == Tensor(name, (1, 4, 3, 3), 0.1, -2)
    assert {k: v for k, v in g.tensors.items() if k != name} == before


def test_quantize_calibrates_by_the_given_method() -> None:
    """percentile:50 on one input whose |x| are 0.1 .. 0.7 and 1.0: amax 1.0, 2048 bins of
    1/2048; half the count (4 of 8) is reached in the bin of 0.4, floor(0.4 * 2048) = 819, so
    T = 820 / 2048 (min-max would give 1.0)."""
    mags = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 1.0], np.float32)
    rng = np.random.default_rng(72)
    x = (rng.permutation(mags) * rng.choice([-1, 1], 8)).astype(np.float32)[None]
    g = quantize.run(_canonical(), [x], method="percentile:50")
    assert g.tensors["x"].scale == pytest.approx(820 / 2048 / 127, rel=1e-12)


def _table_codes(f: Any, s_in: float, z_in: int, s_out: float, z_out: int) -> list[int]:
    """Entry t: f of input code t - 128 at the output scale and zero point, rounded half away
    from zero and saturated (Python floats)."""
    out = []
    for t in range(256):
        y = f(s_in * (t - 128 - z_in)) / s_out
        code = math.floor(abs(y) + 0.5) * (1 if y >= 0 else -1) + z_out
        out.append(min(127, max(-128, code)))
    return out


def _sigmoid(v: float) -> float:
    return 1 / (1 + math.exp(-v))


def _table_graph(nodes: list[Node], outputs: list[str]) -> Graph:
    scales = {"x": (0.05, 4), "a": (0.04, -7), "s": (1 / 255, -128), "y": (0.008, 5)}
    scales |= {"z": (0.04, -7), "b": (0.03, 2), "w": (1 / 255, -128)}
    tensors = {k: Tensor(k, (1, 4, 2, 2), s, z) for k, (s, z) in scales.items()}
    return Graph(nodes, tensors, ["x"], outputs)


def _sig(name: str, x: str, y: str) -> Node:
    return Node(name, "table", [x], y, {"function": "sigmoid", "args": ()})


def _assert_alone(node: Node, table: list[int], z_in: int) -> None:
    """``node`` became a one-input scale: identity rescale, full int8 clamp, then the table."""
    assert (node.op, node.attrs) == ("scale", {"act": "table"})
    assert sorted(node.params) == ["clamp", "mult", "shift", "table", "table_zp"]
    assert [node.params[k].tolist() for k in ("mult", "shift", "clamp")] == [
        [1], [0], [-128, 127]
    ]  # fmt: skip
    assert node.params["table"].tolist() == table
    assert node.params["table_zp"].tolist() == [z_in]


def test_a_table_after_a_fused_table_stands_alone() -> None:
    """conv -> sigmoid -> tanh: the sigmoid fuses into the conv (whose output becomes 's'),
    the tanh cannot (the conv's STORE already applies a table) and becomes a scale."""
    conv = Node("p", "conv", ["x"], "a", {"act": None})
    tanh = Node("t2", "table", ["s"], "y", {"function": "tanh", "args": ()})
    g = _table_graph([conv, _sig("t1", "a", "s"), tanh], ["y"])
    quantize._fuse_tables(g)
    assert [n.name for n in g.nodes] == ["p", "t2"] and "a" not in g.tensors
    assert (conv.attrs["act"], conv.output, conv.params["table_zp"].tolist()) == (
        "table",
        "s",
        [-7],
    )
    assert conv.params["table"].tolist() == _table_codes(_sigmoid, 0.04, -7, 1 / 255, -128)
    _assert_alone(tanh, _table_codes(math.tanh, 1 / 255, -128, 0.008, 5), -128)


@pytest.mark.parametrize("case", ["graph output", "two readers", "graph input"])
def test_a_table_whose_input_is_not_the_producers_alone_stands_alone(case: str) -> None:
    """A conv's output that is also a graph output or has a second reader, or the graph input,
    keeps its codes: the sigmoid becomes a scale of its own. A later conv -> sigmoid (b -> w)
    still fuses."""
    conv = Node("p", "conv", ["x"], "a", {"act": None})
    later = [
        Node("m", "maxpool", ["a"], "z", {}),
        Node("q", "conv", ["z"], "b", {"act": None}),
        _sig("t3", "b", "w"),
    ]
    if case == "graph output":
        g = _table_graph([conv, _sig("t", "a", "y")], ["y", "a"])
    elif case == "two readers":
        g = _table_graph([conv, _sig("t", "a", "y"), *later], ["y", "w"])
    else:
        g = _table_graph([_sig("t", "x", "y")], ["y"])
    quantize._fuse_tables(g)
    s_in, z_in = (0.05, 4) if case == "graph input" else (0.04, -7)
    _assert_alone(g.node("t"), _table_codes(_sigmoid, s_in, z_in, 0.008, 5), z_in)
    assert conv.attrs == {"act": None} and conv.params == {} and conv.output == "a"
    assert "a" in g.tensors
    if case == "two readers":
        q = g.node("q")
        assert [n.name for n in g.nodes] == ["p", "t", "m", "q"]
        assert (q.attrs["act"], q.output, q.params["table_zp"].tolist()) == ("table", "w", [2])
        assert q.params["table"].tolist() == _table_codes(_sigmoid, 0.03, 2, 1 / 255, -128)


def test_given_scales_flow_back_through_scale_keeping_ops() -> None:
    """A given scale on a max pool's output also serves its input, back through two pools
    (x -> conv -> a -> pool -> a1 -> pool -> b, given), but never through a conv (x stays
    unscaled) and never over an input that has its own scale (p keeps 0.3)."""
    shape = (1, 4, 4, 4)
    given = {"b": (0.05, 3), "y": (0.1, 0), "p": (0.3, 0), "q": (0.07, -1)}
    tensors = {
        k: Tensor(k, shape, *given.get(k, (None, 0))) for k in ["x", "a", "a1", "b", "y", "p", "q"]
    }
    nodes = [
        Node("c", "conv", ["x"], "a", {"act": None}),
        Node("m1", "maxpool", ["a"], "a1", {}),
        Node("m2", "maxpool", ["a1"], "b", {}),
        Node("d", "conv", ["b"], "y", {"act": None}),
        Node("m3", "maxpool", ["p"], "q", {}),
    ]
    g = Graph(nodes, tensors, ["x", "p"], ["y", "q"])
    quantize._propagate_given_scales(g)
    got = {k: (t.scale, t.zero_point) for k, t in g.tensors.items()}
    assert got == given | {"x": (None, 0), "a": (0.05, 3), "a1": (0.05, 3)}


def test_calibrate_defaults_to_minmax() -> None:
    """Called without a method, the scales are max|t| / 127 (min-max) over the inputs."""
    model = _residual_mlp(np.random.default_rng(36))
    g = canonicalize.run(load_onnx(model))
    xs = cal((1, 8), seed=73)
    quantize._calibrate(g, xs, set())
    for name, amax in zip(["x", "r1", "y"], ranges(model, ["x", "r1", "y"], xs), strict=True):
        assert g.tensors[name].scale == pytest.approx(amax / 127, rel=1e-6)


def test_a_host_node_of_every_code_exact_op_keeps_codes() -> None:
    """The subset test includes the whole set (<=, not <)."""
    ops = sorted(quantize.CODE_EXACT_OPS)
    assert quantize._code_exact(Node("h", "host", ["a"], "y", {"onnx_ops": ops}))


def _concat_graph(nodes: list[Node], outputs: list[str]) -> Graph:
    names = {n.output for n in nodes} | {"x"}
    tensors = {
        k: Tensor(k, (1, 4, 2, 2), 0.01 * (1 + i), i - 2) for i, k in enumerate(sorted(names))
    }
    return Graph(nodes, tensors, ["x"], outputs)


def _convs(*names: str) -> list[Node]:
    return [Node(f"conv_{k}", "conv", ["x"], k, {"act": None}) for k in names]


def test_a_concat_scale_reaches_back_through_max_pools() -> None:
    """Concat(maxpool(maxpool(a)), b): a, both pool outputs and b take the concat's scale and
    zero point; x (before the conv that rescales) keeps its own."""
    pools = [Node("m1", "maxpool", ["a"], "a1", {}), Node("m2", "maxpool", ["a1"], "a2", {})]
    cat = Node("cat", "concat", ["a2", "b"], "y", {"axis": 1})
    g = _concat_graph([*_convs("a", "b"), *pools, cat], ["y"])
    x_before = (g.tensors["x"].scale, g.tensors["x"].zero_point)
    want = (g.tensors["y"].scale, g.tensors["y"].zero_point)
    quantize._share_concat_scales(g)
    assert {k: (t.scale, t.zero_point) for k, t in g.tensors.items()} == {
        "x": x_before,
        **{k: want for k in ("a", "a1", "a2", "b", "y")},
    }


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("concat of a concat", "input 'u' comes from concat"),
        ("pooled twice", "input 'a1' shares 'a' with concat 'cat1'"),
    ],
)
def test_a_concat_input_from_a_concat_or_a_taken_chain_is_named(case: str, reason: str) -> None:
    """A concat cannot requantize (its codes are its inputs'), and a pool chain back to a
    tensor another concat already took cannot serve a second scale."""
    if case == "concat of a concat":
        cats = [
            Node("cat1", "concat", ["a", "b"], "u", {"axis": 1}),
            Node("cat2", "concat", ["u", "c"], "y", {"axis": 1}),
        ]
        nodes = [*_convs("a", "b", "c"), *cats]
    else:
        nodes = [
            *_convs("a", "b", "c"),
            Node("cat1", "concat", ["a", "b"], "u", {"axis": 1}),
            Node("m", "maxpool", ["a"], "a1", {}),
            Node("cat2", "concat", ["c", "a1"], "y", {"axis": 1}),
        ]
    g = _concat_graph(nodes, ["u", "y"])
    with pytest.raises(CompileError) as info:
        quantize._share_concat_scales(g)
    assert (info.value.node, info.value.op, info.value.reason) == (
        "cat2",
        "concat",
        f"{reason} and cannot take the concat's scale",
    )
    assert info.value.supported == (
        "inputs made by conv, FC, add, average pool or host nodes, one concat each"
    )


def test_calibration_without_a_source_model_is_refused() -> None:
    """x and the conv's output need measuring, and a hand-built graph has no ONNX model."""
    shape = (1, 4, 2, 2)
    tensors = {k: Tensor(k, shape) for k in "xy"}
    g = Graph([Node("c", "conv", ["x"], "y", {"act": None})], tensors, ["x"], ["y"])
    with pytest.raises(CompileError) as info:
        quantize._calibrate(g, cal(shape), set())
    assert (info.value.node, info.value.op, info.value.reason, info.value.supported) == (
        None,
        "quantize",
        "2 tensors need calibration but the graph has no source ONNX model",
        None,
    )


def test_weighted_clamp_uses_the_output_zero_point() -> None:
    """relu6 at output scale 0.1 and zero point 3: real 0 is code 3, real 6 is 3 + 60 = 63."""
    node = Node("c", "conv", ["x"], "y", {"act": "relu6"}, {"weight": np.ones((2, 1, 1, 1))})
    node.params["bias"] = np.zeros(2)
    quantizers.weighted(_graph(node, {"x": 0.05, "y": 0.1}, 3), node)
    assert node.params["clamp"].tolist() == [3, 63]


def test_a_bias_past_int32_is_named_by_its_own_value() -> None:
    """Weights of max |w| 127 have scale 1, so at input scale 1 a bias is its own code: the
    second channel's 3e9 is past int32 and is the one the message names."""
    w = np.array([127.0, -127.0]).reshape(2, 1, 1, 1)
    g, node = _conv({"weight": w, "bias": np.array([5.0, 3e9])})
    with pytest.raises(CompileError) as info:
        quantizers.weighted(g, node)
    assert info.value.reason == "bias 3e+09 does not fit int32 at accumulator scale 1"


def test_a_tensor_calibration_never_sees_nonzero_gets_scale_one() -> None:
    """relu(conv(x) - 100) with |conv(x)| far below 100: max |y| = 0, so y's scale is 1.0
    (not 0, which no rescale could reach)."""
    rng = np.random.default_rng(74)
    w = rng.normal(0, 0.1, (2, 3, 1, 1)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    model = make(nodes, [1, 3, 2, 2], {"w": w, "b": np.array([-100, -100], np.float32)})
    xs = cal((1, 3, 2, 2), seed=75)
    assert ranges(model, ["c"], xs)[0] > 90  # the conv's output is all below -90
    g = quantize.run(canonicalize.run(load_onnx(model)), xs)
    assert g.tensors["y"].scale == 1.0


def test_a_softmax_output_is_left_unscaled_even_when_given() -> None:
    """The host's softmax writes fp32: a scale the model gave its output is dropped, and the
    conv before it keeps its own."""
    tensors = {
        "x": Tensor("x", (1, 8), 0.02),
        "a": Tensor("a", (1, 8), 0.05),
        "y": Tensor("y", (1, 8), 1 / 255, -128),
    }
    nodes = [Node("fc", "gemm", ["x"], "a", {"act": None}), Node("sm", "softmax", ["a"], "y", {})]
    g = Graph(nodes, tensors, ["x"], ["y"])
    quantize._calibrate(g, cal((1, 8)), {"x", "a", "y"})
    assert [g.tensors[k].scale for k in "xay"] == [0.02, 0.05, None]


def test_rescale_flattens_its_scales() -> None:
    """A (1, 2) array of rescales gives one (mult, shift) pair per value: 0.5 = 2**30 / 2**31
    and 0.75 = 3 * 2**29 / 2**31 (mult normalized to [2**30, 2**31))."""
    mult, shift = quantizers.rescale(Node("n", "scale", ["x"], "y"), np.array([[0.5, 0.75]]), "o")
    assert mult.dtype == shift.dtype == np.int64
    assert (mult.tolist(), shift.tolist()) == ([2**30, 3 * 2**29], [31, 31])


@pytest.mark.parametrize(
    ("scales", "reason"),
    [
        # acc = s_in * s_w = [1, 0.5]; acc / s_out = [1e-40, 5e-41], far below 2**-32
        ({"x": 1.0, "r": 0.1, "y": 1e40}, "output rescale 5e-41..1e-40"),
        # s_r / acc = [1e-30, 2e-30]
        ({"x": 1.0, "r": 1e-30, "y": 0.5}, "residual rescale 1e-30..2e-30"),
    ],
    ids=["output", "residual"],
)
def test_a_conv_rescale_out_of_range_names_which(scales: dict[str, float], reason: str) -> None:
    """Weights of max |w| 127 and 63.5 have scales 1 and 0.5; the refusal names the output or
    the residual rescale with its range."""
    w = np.array([127.0, -63.5]).reshape(2, 1, 1, 1)
    params = {"weight": w, "bias": np.zeros(2)}
    node = Node("c", "conv", ["x", "r"], "y", {"act": None}, params)
    with pytest.raises(CompileError) as info:
        quantizers.weighted(_graph(node, scales), node)
    assert (info.value.node, info.value.op, info.value.reason, info.value.supported) == (
        "c",
        "conv",
        f"{reason} is out of range for a fixed-point multiplier",
        "rescales of about 2**-32 .. 2**31",
    )


def _qdq_concat_model() -> onnx.ModelProto:
    """x -Q/DQ(0.03)-> two 1x1 QDQ convs: a at (0.05, zero point 10), b at the concat's
    (0.08, -5); Concat(a, b) -Q/DQ(0.08, -5)-> y."""
    rng = np.random.default_rng(76)
    inits: dict[str, Any] = {
        "s_x": np.float32(0.03),
        "z": np.array(0, np.int8),
        "s_a": np.float32(0.05),
        "z_a": np.array(10, np.int8),
        "s_y": np.float32(0.08),
        "z_y": np.array(-5, np.int8),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_x", "z"], ["xq"], name="q_x"),
        helper.make_node("DequantizeLinear", ["xq", "s_x", "z"], ["xd"], name="dq_x"),
    ]
    for k, s, z in (("a", "s_a", "z_a"), ("b", "s_y", "z_y")):
        ws = rng.uniform(0.005, 0.02, 3).astype(np.float32)
        inits |= {
            f"wq{k}": rng.integers(-127, 128, (3, 3, 1, 1)).astype(np.int8),
            f"ws{k}": ws,
            f"wz{k}": np.zeros(3, np.int8),
            f"bq{k}": rng.integers(-500, 500, 3).astype(np.int32),
            f"bs{k}": (np.float32(0.03) * ws).astype(np.float32),
            f"bz{k}": np.zeros(3, np.int32),
        }
        nodes += [
            helper.make_node(
                "DequantizeLinear", [f"wq{k}", f"ws{k}", f"wz{k}"], [f"w{k}"], f"dq_w{k}", axis=0
            ),
            helper.make_node(
                "DequantizeLinear", [f"bq{k}", f"bs{k}", f"bz{k}"], [f"b{k}"], f"dq_b{k}", axis=0
            ),
            helper.make_node("Conv", ["xd", f"w{k}", f"b{k}"], [f"c{k}"], name=f"conv_{k}"),
            helper.make_node("QuantizeLinear", [f"c{k}", s, z], [f"{k}q"], name=f"q_{k}"),
            helper.make_node("DequantizeLinear", [f"{k}q", s, z], [k], name=f"dq_{k}"),
        ]
    nodes += [
        helper.make_node("Concat", ["a", "b"], ["cat"], name="cat", axis=1),
        helper.make_node("QuantizeLinear", ["cat", "s_y", "z_y"], ["catq"], name="q_cat"),
        helper.make_node("DequantizeLinear", ["catq", "s_y", "z_y"], ["y"], name="dq_cat"),
    ]
    return make(nodes, [1, 3, 4, 4], inits)


def test_a_qdq_concat_input_at_its_own_scale_is_requantized_like_onnxruntime() -> None:
    """conv a keeps its codes at (0.05, 10); the inserted pool requantizes them to the concat's
    (0.08, -5): floor((q - 10) * 0.05 / 0.08 + 1/2) - 5 (round half up, in fractions), b's
    codes are copied, and y is within one code of onnxruntime's QDQ run (ties to even)."""
    model = _qdq_concat_model()
    g = compile_front(model)
    assert g.node("cat").inputs == ["ca#requant", "cb"]
    x = cal((1, 3, 4, 4), 1, seed=77)[0] * 2
    values = evaluate(g, quantize_input(x, 0.03))
    ratio = Fraction(5, 8)  # 0.05 / 0.08
    want_a = [
        min(127, max(-128, math.floor((int(q) - 10) * ratio + Fraction(1, 2)) - 5))
        for q in values["ca"].ravel()
    ]
    ours = values["cat"].astype(np.int64)
    np.testing.assert_array_equal(ours[:, :3].ravel(), want_a)
    np.testing.assert_array_equal(ours[:, 3:], values["cb"])
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    theirs = ort.InferenceSession(model.SerializeToString(), options).run(["y"], {"x": x})[0]
    theirs_q = np.rint(theirs.astype(np.float64) / np.float32(0.08)) - 5
    assert np.abs(ours - theirs_q).max() <= 1 and len(set(want_a)) > 8

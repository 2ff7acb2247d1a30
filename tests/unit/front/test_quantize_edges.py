"""quantize at its edges: constants calibrated on their own values, float32 overflow named by
its node, a reused :class:`~compiler.calibrate.Ranges`, a table with nothing to fuse into.

Directed cases for what `make mutate` left alive in ``compiler/passes/quantize.py``; every
expected value follows from a stated rule (the minmax threshold is max |v|, a tensor that never
leaves zero gets scale 1, a percentile clips an outlier) or from numpy, never from the pass's
own output.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from onnx import helper

from compiler import calib_methods, calibrate
from compiler.errors import CompileError, Unplaceable
from compiler.ir import Graph, Node, Tensor
from compiler.onnx import load_onnx
from compiler.passes import canonicalize, quantize
from tests.onnx_graphs import make_model

make = functools.partial(make_model, opset=13)
SHAPE = (1, 3, 16, 16)


def _with_constant(value: np.ndarray) -> Graph:
    """x + c, with x's and the sum's scales given: only the constant c is left to calibrate."""
    tensors = {
        "x": Tensor("x", SHAPE, 0.05),
        "c": Tensor("c", SHAPE),
        "y": Tensor("y", SHAPE, 0.1),
    }
    nodes = [
        Node("c", "constant", [], "c", {}, {"value": value}),
        Node("add", "add", ["x", "c"], "y", {"act": None}),
    ]
    return Graph(nodes, tensors, ["x"], ["y"])


def _outlier_constant(seed: int = 41) -> np.ndarray:
    value = np.random.default_rng(seed).normal(0, 0.5, SHAPE).astype(np.float32)
    value[0, 1, 2, 3] = 40.0  # one value 80 standard deviations out
    return value


def test_a_constant_by_minmax_puts_its_largest_magnitude_at_code_127() -> None:
    value = _outlier_constant()
    g = _with_constant(value)
    quantize._calibrate(g, [], {"x", "y"}, "minmax")
    assert g.tensors["c"].scale == pytest.approx(40.0 / 127, rel=1e-12)


def test_a_constant_is_calibrated_by_the_given_method() -> None:
    """percentile:99 clips the outlier: the threshold is numpy's 99th percentile of |c| within
    one histogram bin (the method's resolution), far below the max."""
    value = _outlier_constant()
    g = _with_constant(value)
    quantize._calibrate(g, [], {"x", "y"}, "percentile:99")
    want = float(np.percentile(np.abs(value), 99))
    bin_width = 40.0 / calib_methods.BINS
    assert abs(g.tensors["c"].scale * 127 - want) <= 2 * bin_width, (g.tensors["c"].scale, want)


def test_an_all_zero_constant_gets_scale_one() -> None:
    g = _with_constant(np.zeros(SHAPE, np.float32))
    quantize._calibrate(g, [], {"x", "y"}, "minmax")
    assert g.tensors["c"].scale == 1.0


def _chain(weights: list[float], seed: int = 7) -> tuple[Graph, list[np.ndarray]]:
    """conv -> conv -> ... on (1, 3, 16, 16), each 1x1 conv's weights of magnitude ``w``."""
    rng = np.random.default_rng(seed)
    names = ["x"] + [f"h{i}" for i in range(len(weights) - 1)] + ["y"]
    nodes, inits = [], {}
    for i, w in enumerate(weights):
        inits[f"w{i}"] = (w * rng.uniform(0.5, 1.0, (3, 3, 1, 1))).astype(np.float32)
        nodes.append(helper.make_node("Conv", [names[i], f"w{i}"], [names[i + 1]], name=f"c{i}"))
    model = make(nodes, list(SHAPE), inits)
    xs = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(2)]
    return canonicalize.run(load_onnx(model)), xs


def test_a_tensor_that_overflows_float32_inside_the_graph_is_named_by_its_node() -> None:
    """c1's output reaches ~1e60 (inf in float32) and feeds c2, a conv, not a masked Softmax:
    refused naming c1, its op and its tensor."""
    g, xs = _chain([1e30, 1e30, 0.5])
    with pytest.raises(CompileError) as info:
        quantize.run(g, xs)
    e = info.value
    assert (e.node, e.op) == ("c1", "conv"), str(e)
    assert e.reason == (
        "its output 'h1' reaches inf on the calibration inputs (float32 overflows), so it has no "
        "int8 scale"
    )
    assert e.supported == "models whose float32 values stay finite on the calibration inputs"


def test_a_calibration_input_past_float32_is_named_as_the_graph_input() -> None:
    """No node computes x: the refusal names the input itself, as a graph input."""
    g, xs = _chain([0.7, -0.4])
    xs[1][0, 2, 5, 5] = np.inf
    with pytest.raises(CompileError) as info:
        quantize.run(g, xs)
    assert (info.value.node, info.value.op) == ("x", "graph input"), str(info.value)
    assert info.value.reason.startswith("its output 'x' reaches inf on the calibration inputs")


def test_float64_calibration_inputs_calibrate_like_float32() -> None:
    g, xs = _chain([0.7, -0.4])
    as32 = quantize.run(g, xs)
    as64 = quantize.run(g, [x.astype(np.float64) for x in xs])
    assert [as64.tensors[k].scale for k in ("x", "h0", "y")] == [
        as32.tensors[k].scale for k in ("x", "h0", "y")
    ]


def test_ranges_measured_once_serve_a_second_quantization() -> None:
    """The host placement's attempts share one Ranges: the second run measures nothing."""
    g, xs = _chain([0.7, -0.4])
    known = calibrate.Ranges()
    first = quantize.run(g, xs, ranges=known)
    assert known.runs == 1 and set(known.known) == {"x", "h0", "y"}
    second = quantize.run(g, xs, ranges=known)
    assert known.runs == 1
    assert second.tensors["h0"].scale == first.tensors["h0"].scale == known.known["h0"] / 127


def test_a_table_on_a_vector_with_nothing_to_fuse_into_is_unplaceable() -> None:
    """A sigmoid on the graph input (1, 8): no producer, and a scale layer runs on (1, C, H, W)
    only - the host takes it, with the node, the shape and what is supported named."""
    tensors = {"x": Tensor("x", (1, 8), 0.05), "y": Tensor("y", (1, 8), 1 / 255, -128)}
    node = Node("sig", "table", ["x"], "y", {"function": "sigmoid", "args": ()})
    with pytest.raises(Unplaceable) as info:
        quantize._fuse_tables(Graph([node], tensors, ["x"], ["y"]))
    assert str(info.value) == (
        "node 'sig' (table): a lookup table on a (1, 8) tensor with no conv, gemm or add before "
        "it to fuse into is not supported; supported: tables on (1, C, H, W) tensors, or right "
        "after a Conv, Gemm, MatMul or Add"
    )

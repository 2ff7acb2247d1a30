"""``scale`` layers on the ISA simulator against onnxruntime: the squeeze-excitation product
``x * gate`` (ACCUM with use_gate) and activations no conv, gemm or add can take (a one-input
scale: an ACCUM copy, then a STORE through a clamp or a table)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from arch.config import PRESETS
from arch.executable import HostStep
from arch.reference import dequantize, evaluate, quantize_input
from compiler.compile import compile_model
from sim.quality.accuracy import compare_fp32
from sim.runtime.run import run
from tests.unit.front.test_partition import _saved, conv, model_of


def se_model(channels: int, seed: int, swish: bool = False) -> onnx.ModelProto:
    """conv -> [GAP -> 1x1 conv -> Relu -> 1x1 conv -> Sigmoid] gate -> Mul(x, gate) -> conv;
    ``swish``: the gated tensor is x * Sigmoid(x) first (EfficientNet's order)."""
    rng = np.random.default_rng(seed)
    squeeze = max(channels // 4, 2)
    c1, i1 = conv("c1", "x", "a", 3, channels, rng)
    fc1, i2 = conv("fc1", "g0", "g1", channels, squeeze, rng, k=1)
    fc2, i3 = conv("fc2", "g2", "g3", squeeze, channels, rng, k=1)
    out, i4 = conv("c2", "m", "y", channels, 8, rng)
    x = "a"
    nodes = [c1]
    if swish:
        nodes += [
            helper.make_node("Sigmoid", ["a"], ["sa"], name="swish_gate"),
            helper.make_node("Mul", ["a", "sa"], ["s"], name="swish"),
        ]
        x = "s"
    nodes += [
        helper.make_node("GlobalAveragePool", [x], ["g0"], name="gap"),
        fc1,
        helper.make_node("Relu", ["g1"], ["g2"], name="relu"),
        fc2,
        helper.make_node("Sigmoid", ["g3"], ["g"], name="sigmoid"),
        helper.make_node("Mul", [x, "g"] if seed % 2 else ["g", x], ["m"], name="se"),
        out,
    ]
    return model_of(nodes, {**i1, **i2, **i3, **i4}, [1, 3, 12, 12])


def _run_on_array(model: onnx.ModelProto, config: str, tmp_path, seed: int):
    compiled = compile_model(_saved(model, tmp_path), PRESETS[config])
    exe = compiled.executable
    assert not [s for s in exe.steps if isinstance(s, HostStep)]
    x = np.random.default_rng(seed).standard_normal(exe.input.shape).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert compare_fp32(compiled.source, exe.reference, x)["cosine_vs_fp32"] > 0.99
    return exe, result


@pytest.mark.parametrize("config", ["tiny", "default"])
@pytest.mark.parametrize(("channels", "seed", "swish"), [(16, 1, False), (20, 2, True)])
def test_squeeze_excitation_runs_on_the_array(config, channels, seed, swish, tmp_path) -> None:
    """The gate's Mul is a gated scale layer (either input order; 20 channels pad to whole
    lines); with the swish, its table fuses into the conv, and the gated product's input is
    read by the pool too. Everything on the array, bit-exact, close to fp32."""
    exe, result = _run_on_array(se_model(channels, seed, swish), config, tmp_path, seed)
    [se] = [n for n in exe.reference.nodes if n.name == "se"]
    assert se.op == "scale" and len(se.inputs) == 2
    assert exe.reference.tensors[se.inputs[1]].shape == (1, channels, 1, 1)
    assert all(la.device == "accel" for la in result.layers)


def test_gate_rescale_matches_the_real_product(tmp_path) -> None:
    """The scale layer's int8 output against the real product of its dequantized inputs,
    quantized at the output scale (independent of the requantization arithmetic): within one
    code everywhere, equal almost everywhere - a wrong rescale, a gate from the wrong channel or
    block, or a truncating rounding would show."""
    exe, _ = _run_on_array(se_model(12, 3), "tiny", tmp_path, 4)
    graph = exe.reference
    [se] = [n for n in graph.nodes if n.name == "se"]
    x = np.random.default_rng(4).standard_normal(exe.input.shape).astype(np.float32)
    values = evaluate(graph, quantize_input(x, graph.tensors[graph.inputs[0]].scale))
    x_q, g_q = (values[name] for name in se.inputs)
    scales = [graph.tensors[name].scale for name in (*se.inputs, se.output)]
    real = dequantize(x_q, scales[0]).astype(np.float64) * dequantize(g_q, scales[1])
    want = np.clip(np.round(real / scales[2]), -128, 127)
    diff = np.abs(values[se.output].astype(np.int64) - want)
    assert diff.max() <= 1 and (diff == 0).mean() > 0.98
    assert len(np.unique(values[se.output])) > 20  # the data exercises the range


def unfused_acts_model(seed: int = 9) -> onnx.ModelProto:
    """Sigmoid on the graph input, two convs, Concat, Relu, conv."""
    rng = np.random.default_rng(seed)
    c1, i1 = conv("c1", "s", "a", 3, 8, rng)
    c2, i2 = conv("c2", "s", "b", 3, 8, rng)
    c3, i3 = conv("c3", "r", "y", 16, 4, rng)
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"], name="in_sigmoid"),
        c1,
        c2,
        helper.make_node("Concat", ["a", "b"], ["cat"], name="cat", axis=1),
        helper.make_node("Relu", ["cat"], ["r"], name="cat_relu"),
        c3,
    ]
    return model_of(nodes, {**i1, **i2, **i3}, [1, 3, 8, 8])


def test_relu_after_concat_and_table_on_the_input(tmp_path) -> None:
    """A Relu after a Concat and a Sigmoid on the graph input have no producer to fuse into:
    scale layers of their own (clamp; table)."""
    exe, _ = _run_on_array(unfused_acts_model(), "tiny", tmp_path, 5)
    acts = {n.name: (n.op, n.attrs.get("act")) for n in exe.reference.nodes}
    assert acts["in_sigmoid"] == ("scale", "table") and acts["cat_relu"] == ("scale", "relu")

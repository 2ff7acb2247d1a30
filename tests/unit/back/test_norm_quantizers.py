"""The norm unit's quantizers (``compiler/quantizers.py``: norm, mask_codes) and a constant's
codes, at their edges: zero points on both sides of a norm, RMSNorm of rows whose mean is not
zero, mask values on the masking and the range bounds.

Each quantized node runs on the integer reference (``arch.reference.evaluate``) and is compared
with float math in numpy on the dequantized input - never with the quantizer's own numbers.
Directed cases for what `make mutate` left alive in ``compiler/quantizers.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from arch.norm_ops import MASKED_BELOW
from arch.reference import check_graph, evaluate
from compiler import quantizers
from compiler.errors import Unplaceable
from compiler.ir import Graph, Node, Tensor

T, F = 6, 24


def _norm_case(op: str, zp_in: int, zp_out: int, seed: int) -> tuple[Graph, np.ndarray, np.ndarray]:
    """A quantized ``op`` node over rows with a mean far from zero, its int8 input codes and
    the float result of the op on the dequantized input (at the output's scale and zero point)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((T, F)) * rng.uniform(0.5, 2.0, (T, 1)) + rng.uniform(2.0, 4.0, (T, 1))
    s_in = float(np.abs(x).max()) / 100
    codes = np.clip(np.rint(x / s_in) + zp_in, -128, 127)
    xr = (codes - zp_in) * s_in  # what the node sees
    gamma = rng.uniform(0.5, 1.5, F)
    beta = rng.normal(0, 0.3, F) if op == "layer_norm" else np.zeros(F)
    eps = 1e-5
    if op == "layer_norm":
        centred = xr - xr.mean(axis=1, keepdims=True)
        want = centred / np.sqrt((centred**2).mean(axis=1, keepdims=True) + eps) * gamma + beta
    else:
        want = xr / np.sqrt((xr**2).mean(axis=1, keepdims=True) + eps) * gamma
    s_out = float(np.abs(want).max()) / 110
    params = {"gamma": gamma.astype(np.float32)}
    if op == "layer_norm":
        params["beta"] = beta.astype(np.float32)
    node = Node("norm", op, ["x"], "y", {"epsilon": eps}, params)
    tensors = {
        "x": Tensor("x", (1, T, 1, F), s_in, zp_in),
        "y": Tensor("y", (1, T, 1, F), s_out, zp_out),
    }
    g = Graph([node], tensors, ["x"], ["y"])
    quantizers.norm(g, node)
    g.quantized = True
    return g, codes.astype(np.int8).reshape(1, T, 1, F), want / s_out + zp_out


@pytest.mark.parametrize(("op", "zp_in", "zp_out"), [("layer_norm", 9, -5), ("rms_norm", -7, 4)])
def test_a_norm_with_zero_points_on_rows_off_zero_matches_float(op, zp_in, zp_out) -> None:
    """Within 1.5 output codes of the float op (the unit's Q12/Q8 steps and the output's own
    rounding): a dropped zero point moves every code, a layer norm for an rms norm (or back)
    moves rows whose mean is 2-4 standard deviations off zero by far more."""
    g, codes, want = _norm_case(op, zp_in, zp_out, seed=31)
    check_graph(g)
    got = evaluate(g, codes)["y"].reshape(T, F).astype(np.float64)
    assert np.abs(got - np.clip(want, -128, 127)).max() <= 1.5


def test_a_norm_whose_scales_leave_the_units_range_names_the_node() -> None:
    """gamma over s_out past the unit's multiplier range (s_out tiny): the host takes it."""
    node = Node("ln", "layer_norm", ["x"], "y", {"epsilon": 1e-5}, {"gamma": np.ones(F)})
    tensors = {
        "x": Tensor("x", (1, T, 1, F), 0.05),
        "y": Tensor("y", (1, T, 1, F), 1e-30),
    }
    with pytest.raises(Unplaceable) as info:
        quantizers.norm(Graph([node], tensors, ["x"], ["y"]), node)
    assert (info.value.node, info.value.op) == ("ln", "layer_norm")
    assert info.value.reason.startswith("gamma / s_out out of range for the norm unit: ")
    assert info.value.supported == "gamma / s_out and eps in the norm unit's range"


def _softmax(bias: np.ndarray, s_in: float) -> Node:
    return Node("sm", "row_softmax", ["s"], "p", {"causal": False}, {"bias_mask": bias})


def test_mask_values_at_the_masking_bound_mask_and_others_round_to_score_codes() -> None:
    """-1e4 itself masks (-128), -inf masks, and masked positions never count against the
    +-127 range even where the scores' scale is fine (1/s_in = 200 codes)."""
    s_in = 0.005
    bias = np.array([[MASKED_BELOW, -np.inf, 0.3, -0.31, 0.0, MASKED_BELOW / 2]])
    bias[0, 5] = 0.6  # 120 codes: inside the range
    node = _softmax(bias, s_in)
    got = quantizers.mask_codes(node, bias, s_in)
    assert got.dtype == np.int8
    assert got.tolist() == [[-128, -128, 60, -62, 0, 120]]


@pytest.mark.parametrize(("value", "codes"), [(0.635, 127), (-0.635, -127)])
def test_a_mask_value_of_127_codes_is_accepted(value: float, codes: int) -> None:
    got = quantizers.mask_codes(_softmax(np.array([[value]]), 0.005), np.array([[value]]), 0.005)
    assert got.tolist() == [[codes]]


def test_a_mask_value_past_127_codes_is_unplaceable_naming_it() -> None:
    """0.64 at scale 0.005 is 128 codes: the Softmax stays on the host, the value named."""
    bias = np.array([[0.1, 0.64, MASKED_BELOW]])
    with pytest.raises(Unplaceable) as info:
        quantizers.mask_codes(_softmax(bias, 0.005), bias, 0.005)
    assert str(info.value) == (
        "node 'sm' (row_softmax): mask value 0.64 is 128 codes at the scores' scale 0.005; "
        "supported: mask values within +-127 codes of the scores, or <= -1e4 / -inf (masked)"
    )


def test_a_constant_takes_its_tensors_zero_point() -> None:
    """A constant given scale 0.1 and zero point 20 (a QDQ model's): code = round(v / 0.1) + 20."""
    value = np.array([[-1.0, 0.25, 0.7, 2.0]], np.float32)
    node = Node("c", "constant", [], "c", {}, {"value": value})
    g = Graph([node], {"c": Tensor("c", (1, 4), 0.1, 20)}, [], ["c"])
    quantizers.constant(g, node)
    assert node.params["value"].tolist() == [[10, 23, 27, 40]]

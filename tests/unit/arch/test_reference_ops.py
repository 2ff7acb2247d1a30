"""The integer reference ops against independent references.

References: naive loops over Python ints, exact rational arithmetic (``fractions.Fraction``) and
onnxruntime (float32 graphs holding small integers, so the float results are exact).
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from arch import reference_ops as ro

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT32 = st.integers(INT32_MIN, INT32_MAX)
SEEDS = st.integers(0, 2**32 - 1)
FAST = settings(max_examples=60, deadline=None)
ORT = settings(max_examples=25, deadline=None)


def wrap32(value: int) -> int:
    """A Python int reduced to int32 two's complement."""
    return (value + 2**31) % 2**32 - 2**31


def round_half_up(value: Fraction) -> int:
    """The stated rounding rule: floor(value + 1/2)."""
    return math.floor(value + Fraction(1, 2))


def run_onnx(op_type: str, inputs: dict[str, np.ndarray], **attrs: object) -> np.ndarray:
    """Run a one-node float32 ONNX graph ``y = op_type(*inputs)`` on onnxruntime's CPU."""
    node = helper.make_node(op_type, list(inputs), ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        op_type.lower(),
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    feeds = {k: v.astype(np.float32) for k, v in inputs.items()}
    return np.asarray(session.run(None, feeds)[0])


def exact_ints(y: np.ndarray) -> np.ndarray:
    """Float results that must be integers, as int64."""
    assert np.array_equal(y, np.rint(y)), "float reference is not integral"
    return np.rint(y).astype(np.int64)


# --------------------------------------------------------------------------- conv2d


def naive_conv2d(x, w, stride, pads, dilation, groups):
    """Direct nested-loop convolution over Python ints, wrapped to int32."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (dh, dw) = stride, dilation
    top, left, bottom, right = pads
    oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + left + right - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    out = np.zeros((n, o, oh, ow), dtype=np.int32)
    for b in range(n):
        for oc in range(o):
            g = oc // og
            for i in range(oh):
                for j in range(ow):
                    acc = 0
                    for ic in range(cg):
                        for p in range(kh):
                            for q in range(kw):
                                r, s = i * sh - top + p * dh, j * sw - left + q * dw
                                if 0 <= r < h and 0 <= s < wd:
                                    acc += int(x[b, g * cg + ic, r, s]) * int(w[oc, ic, p, q])
                    out[b, oc, i, j] = wrap32(acc)
    return out


@st.composite
def conv_cases(draw):
    """Random conv shapes/params: plain, grouped and depthwise; stride, padding, dilation."""
    kind = draw(st.sampled_from(["plain", "grouped", "depthwise"]))
    if kind == "plain":
        groups, cg, og = 1, draw(st.integers(1, 4)), draw(st.integers(1, 4))
    elif kind == "grouped":
        groups, cg, og = draw(st.integers(2, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    else:
        groups, cg, og = draw(st.integers(1, 5)), 1, draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    eh, ew = dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1
    h = draw(st.integers(max(1, eh - pads[0] - pads[2]), 7))
    w = draw(st.integers(max(1, ew - pads[1] - pads[3]), 7))
    n = draw(st.integers(1, 2))
    rng = np.random.default_rng(draw(SEEDS))
    x = rng.integers(-128, 128, size=(n, groups * cg, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, size=(groups * og, cg, kh, kw), dtype=np.int8)
    return x, wt, stride, pads, dilation, groups


@FAST
@given(conv_cases())
def test_conv2d_matches_naive_loops(case):
    x, w, stride, pads, dilation, groups = case
    got = ro.conv2d(x, w, stride=stride, padding=pads, dilation=dilation, groups=groups)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, naive_conv2d(x, w, stride, pads, dilation, groups))


@ORT
@given(conv_cases())
def test_conv2d_matches_onnxruntime(case):
    # int8 products are < 2**14 and K <= 27, so every float32 partial sum is exact.
    x, w, stride, pads, dilation, groups = case
    want = run_onnx(
        "Conv",
        {"x": x, "w": w},
        strides=list(stride),
        pads=list(pads),
        dilations=list(dilation),
        group=groups,
        kernel_shape=list(w.shape[2:]),
    )
    got = ro.conv2d(x, w, stride=stride, padding=pads, dilation=dilation, groups=groups)
    np.testing.assert_array_equal(got, exact_ints(want))


def test_conv2d_int_stride_and_dilation_mean_both_axes():
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, size=(1, 2, 9, 8), dtype=np.int8)
    w = rng.integers(-128, 128, size=(3, 2, 2, 3), dtype=np.int8)
    got = ro.conv2d(x, w, stride=2, dilation=2, padding=1)
    np.testing.assert_array_equal(got, naive_conv2d(x, w, (2, 2), (1, 1, 1, 1), (2, 2), 1))


def test_conv2d_accumulator_wraps_modulo_2_32():
    # Full-range int32 operands: products reach 2**62 and the int64 sum itself overflows,
    # yet the result must still equal the true sum modulo 2**32.
    rng = np.random.default_rng(2)
    x = rng.integers(INT32_MIN, INT32_MAX, size=(1, 3, 4, 4), endpoint=True, dtype=np.int32)
    w = rng.integers(INT32_MIN, INT32_MAX, size=(2, 3, 3, 3), endpoint=True, dtype=np.int32)
    got = ro.conv2d(x, w, padding=(1, 0, 0, 1))
    want = naive_conv2d(x, w, (1, 1), (1, 0, 0, 1), (1, 1), 1)
    np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------- matmul, add_wrap32


@FAST
@given(SEEDS, st.integers(1, 6), st.integers(1, 40), st.integers(1, 6))
def test_matmul_matches_python_ints(seed, m, k, n):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
    b = rng.integers(-128, 128, size=(k, n), dtype=np.int8)
    want = [
        [sum(int(a[i, t]) * int(b[t, j]) for t in range(k)) for j in range(n)] for i in range(m)
    ]
    got = ro.matmul(a, b)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.array(want))


def test_matmul_batched_broadcasts_like_numpy():
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, size=(2, 1, 4, 5), dtype=np.int8)
    b = rng.integers(-128, 128, size=(3, 5, 6), dtype=np.int8)
    got = ro.matmul(a, b)
    assert got.shape == (2, 3, 4, 6)
    for i in range(2):
        for j in range(3):
            want = [
                [sum(int(a[i, 0, r, t]) * int(b[j, t, c]) for t in range(5)) for c in range(6)]
                for r in range(4)
            ]
            np.testing.assert_array_equal(got[i, j], want)


def test_matmul_wraps_on_int32_overflow():
    a = np.array([[2**30, 2**30, -7]], dtype=np.int32)
    b = np.array([[2], [1], [3]], dtype=np.int32)
    # True value 3 * 2**30 - 21 = 3221225451 does not fit in int32.
    assert ro.matmul(a, b)[0, 0] == 3 * 2**30 - 21 - 2**32
    rng = np.random.default_rng(4)
    a = rng.integers(INT32_MIN, INT32_MAX, size=(3, 7), endpoint=True, dtype=np.int64)
    b = rng.integers(INT32_MIN, INT32_MAX, size=(7, 2), endpoint=True, dtype=np.int64)
    want = [
        [wrap32(sum(int(a[i, t]) * int(b[t, j]) for t in range(7))) for j in range(2)]
        for i in range(3)
    ]
    np.testing.assert_array_equal(ro.matmul(a, b), want)


def test_matmul_is_exact_at_the_float64_bound():
    # int8 operands go through float64 (exact below 2**53); sums that could reach 2**53 must
    # not: 3 * (2**26 + 1)**2 is odd and above 2**53, where float64 holds only even integers.
    big = 2**26 + 1
    for k, path in ((3, "int64"), (1, "float64")):
        a = np.full((1, k), big, dtype=np.int64)
        b = np.full((k, 1), big, dtype=np.int64)
        exact = k * big * big
        assert (k * big * big < ro.EXACT_FLOAT_INT) == (path == "float64")
        assert ro.matmul(a, b)[0, 0] == wrap32(exact), path
    x = np.full((1, 3, 1, 1), big, dtype=np.int64)
    w = np.full((1, 3, 1, 1), big, dtype=np.int64)
    assert ro.conv2d(x, w)[0, 0, 0, 0] == wrap32(3 * big * big)


def test_add_wrap32_matches_python_ints():
    rng = np.random.default_rng(5)
    a = rng.integers(INT32_MIN, INT32_MAX, size=200, endpoint=True, dtype=np.int32)
    b = rng.integers(INT32_MIN, INT32_MAX, size=200, endpoint=True, dtype=np.int32)
    got = ro.add_wrap32(a, b)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [wrap32(int(p) + int(q)) for p, q in zip(a, b, strict=True)])
    assert ro.add_wrap32(np.int32(INT32_MAX), np.int32(1)) == INT32_MIN


# --------------------------------------------------------------------------- requantize


def fraction_requantize(x: int, mult: int, shift: int) -> int:
    return round_half_up(Fraction(x * mult, 2**shift))


@settings(max_examples=400, deadline=None)
@given(INT32, INT32, st.integers(0, 62))
def test_requantize_matches_exact_rational_rounding(x, mult, shift):
    got = ro.requantize(np.int32(x), mult, shift)
    assert got.dtype == np.int64
    assert int(got) == fraction_requantize(x, mult, shift)


@pytest.mark.parametrize(
    ("x", "shift", "want"),
    [
        (5, 1, 3),  # 2.5 -> 3
        (-5, 1, -2),  # -2.5 -> -2
        (3, 1, 2),  # 1.5 -> 2
        (-3, 1, -1),  # -1.5 -> -1
        (-1, 1, 0),  # -0.5 -> 0
        (1, 1, 1),  # 0.5 -> 1
        (-13, 2, -3),  # -3.25 -> -3
        (-14, 2, -3),  # -3.5 -> -3
        (-15, 2, -4),  # -3.75 -> -4
        (14, 2, 4),  # 3.5 -> 4
        (-7, 0, -7),  # shift 0: no rounding
    ],
)
def test_requantize_half_way_cases(x, shift, want):
    assert ro.requantize(np.array([x]), 1, shift)[0] == want


def test_requantize_extremes_do_not_overflow():
    assert ro.requantize(INT32_MIN, INT32_MIN, 0) == 2**62
    assert ro.requantize(INT32_MIN, INT32_MIN, 62) == 1
    assert ro.requantize(INT32_MAX, INT32_MIN, 62) == -1  # -1 + 2**-31 -> -1
    assert ro.requantize(INT32_MIN, INT32_MAX, 62) == -1


@FAST
@given(SEEDS, st.integers(1, 5), st.booleans(), st.booleans())
def test_requantize_per_channel_broadcasts_along_axis(seed, channels, per_ch_mult, per_ch_shift):
    rng = np.random.default_rng(seed)
    x = rng.integers(INT32_MIN, INT32_MAX, size=(2, channels, 3, 2), endpoint=True, dtype=np.int32)
    mult = rng.integers(INT32_MIN, INT32_MAX, size=channels, endpoint=True)
    shift = rng.integers(0, 62, size=channels, endpoint=True)
    m = mult if per_ch_mult else int(mult[0])
    s = shift if per_ch_shift else int(shift[0])
    got = ro.requantize(x, m, s)
    for idx in np.ndindex(x.shape):
        c = idx[1]
        mc = int(mult[c]) if per_ch_mult else m
        sc = int(shift[c]) if per_ch_shift else s
        assert got[idx] == fraction_requantize(int(x[idx]), mc, sc), idx

    # (M, N) data with per-column scales: axis=1 and axis=-1 agree; axis=0 is per row.
    mat = x[0, :, :, 0].T  # (3, channels)
    col = ro.requantize(mat, mult, shift, axis=-1)
    np.testing.assert_array_equal(col, ro.requantize(mat, mult, shift, axis=1))
    for (i, j), v in np.ndenumerate(col):
        assert v == fraction_requantize(int(mat[i, j]), int(mult[j]), int(shift[j]))
    row = ro.requantize(mat.T, mult, shift, axis=0)
    np.testing.assert_array_equal(row, col.T)


def test_requantize_with_quantize_multiplier_approximates_real_scale():
    rng = np.random.default_rng(6)
    x = rng.integers(-(2**20), 2**20, size=500)
    for scale in (0.0123, 0.5, 0.999, 1.0, 3.7, 1e-5):
        mult, shift = ro.quantize_multiplier(scale)
        got = ro.requantize(x, mult, shift)
        want = np.array([round_half_up(Fraction(int(v)) * Fraction(scale)) for v in x])
        assert np.max(np.abs(got - want)) <= 1


# --------------------------------------------------------------------------- clamp, to_int8


def test_clamp_relu_and_relu6_bounds():
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, size=300, dtype=np.int8)
    q6 = 57  # quantized 6.0 for some scale
    relu6 = ro.clamp(x, 0, q6)
    assert relu6.dtype == np.int8
    np.testing.assert_array_equal(relu6, [min(max(int(v), 0), q6) for v in x])
    relu = ro.clamp(x, 0)
    np.testing.assert_array_equal(relu, [max(int(v), 0) for v in x])
    np.testing.assert_array_equal(ro.clamp(x, hi=-3), [min(int(v), -3) for v in x])
    assert ro.clamp(x, np.int32(0), np.int32(6)).dtype == np.clip(x, np.int32(0), np.int32(6)).dtype


def test_to_int8_saturates_and_casts():
    rng = np.random.default_rng(8)
    x = rng.integers(-1000, 1000, size=(4, 50), dtype=np.int32)
    got = ro.to_int8(x)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, [[min(max(int(v), -128), 127) for v in r] for r in x])
    relu6 = ro.to_int8(x, 0, 99)
    np.testing.assert_array_equal(relu6, [[min(max(int(v), 0), 99) for v in r] for r in x])
    big = np.array([2**40, -(2**40), 2**62], dtype=np.int64)
    np.testing.assert_array_equal(ro.to_int8(big), [127, -128, 127])


# --------------------------------------------------------------------------- add_rescale


def fraction_add_rescale(a, am, ash, b, bm, bsh, lo, hi):
    total = fraction_requantize(a, am, ash) + fraction_requantize(b, bm, bsh)
    return min(max(total, lo), hi)


@FAST
@given(SEEDS, st.floats(1e-3, 4.0), st.floats(1e-3, 4.0), st.sampled_from([(-128, 127), (0, 127)]))
def test_add_rescale_matches_fractions_int8(seed, scale_a, scale_b, bounds):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, size=(2, 3, 4, 4), dtype=np.int8)
    b = rng.integers(-128, 128, size=(2, 3, 4, 4), dtype=np.int8)
    am, ash = ro.quantize_multiplier(scale_a)
    bm, bsh = ro.quantize_multiplier(scale_b)
    lo, hi = bounds
    got = ro.add_rescale(a, am, ash, b, bm, bsh, lo, hi)
    assert got.dtype == np.int8
    for idx in np.ndindex(a.shape):
        want = fraction_add_rescale(int(a[idx]), am, ash, int(b[idx]), bm, bsh, lo, hi)
        assert got[idx] == want, idx


@settings(max_examples=300, deadline=None)
@given(INT32, INT32, st.integers(0, 62), INT32, INT32, st.integers(0, 62))
def test_add_rescale_full_range_matches_fractions(a, am, ash, b, bm, bsh):
    got = ro.add_rescale(np.array([a]), am, ash, np.array([b]), bm, bsh)
    assert got[0] == fraction_add_rescale(a, am, ash, b, bm, bsh, -128, 127)


def test_add_rescale_per_channel_and_int64_overflow_corner():
    rng = np.random.default_rng(9)
    a = rng.integers(-128, 128, size=(1, 4, 3, 3), dtype=np.int8)
    b = rng.integers(-128, 128, size=(1, 4, 3, 3), dtype=np.int8)
    am, ash = ro.quantize_multipliers(rng.uniform(0.01, 2.0, size=4))
    bm, bsh = ro.quantize_multipliers(rng.uniform(0.01, 2.0, size=4))
    got = ro.add_rescale(a, am, ash, b, bm, bsh, 0, 127)
    for idx in np.ndindex(a.shape):
        c = idx[1]
        want = fraction_add_rescale(
            int(a[idx]), int(am[c]), int(ash[c]), int(b[idx]), int(bm[c]), int(bsh[c]), 0, 127
        )
        assert got[idx] == want
    # Both terms are 2**62: the exact sum 2**63 does not fit int64 but must saturate high.
    x = np.array([INT32_MIN], dtype=np.int32)
    assert ro.add_rescale(x, INT32_MIN, 0, x, INT32_MIN, 0)[0] == 127
    assert ro.add_rescale(x, INT32_MIN, 0, x, INT32_MAX, 0)[0] == 127  # 2**31 left over
    assert ro.add_rescale(x, INT32_MAX, 0, x, INT32_MAX, 0)[0] == -128
    with warnings.catch_warnings():  # the wrapped int64 sum warns of nothing, scalars included
        warnings.simplefilter("error")
        assert ro.add_rescale(INT32_MIN, INT32_MIN, 0, INT32_MIN, INT32_MIN, 0) == 127


# --------------------------------------------------------------------------- pooling


def naive_pool(x, kernel, stride, pads, reduce):
    """Loop pooling over Python ints; ``reduce`` sees only the in-bounds values and the count
    of padded positions."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw) = kernel, stride
    top, left, bottom, right = pads
    oh, ow = (h + top + bottom - kh) // sh + 1, (w + left + right - kw) // sw + 1
    out = np.zeros((n, c, oh, ow), dtype=np.int64)
    for b, ch, i, j in np.ndindex(n, c, oh, ow):
        vals = [
            int(x[b, ch, r, s])
            for r in range(i * sh - top, i * sh - top + kh)
            for s in range(j * sw - left, j * sw - left + kw)
            if 0 <= r < h and 0 <= s < w
        ]
        out[b, ch, i, j] = reduce(vals)
    return out


@st.composite
def pool_cases(draw, pad_below_kernel=True):
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    strided = draw(st.booleans())
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3))) if strided else None
    if pad_below_kernel:
        pads = (*(draw(st.integers(0, k - 1)) for k in (kh, kw, kh, kw)),)
    else:
        pads = tuple(draw(st.integers(0, 3)) for _ in range(4))
    h = draw(st.integers(max(1, kh - pads[0] - pads[2]), 7))
    w = draw(st.integers(max(1, kw - pads[1] - pads[3]), 7))
    rng = np.random.default_rng(draw(SEEDS))
    negative = draw(st.booleans())  # all-negative inputs: a zero pad would win if it could
    x = rng.integers(-128, 0 if negative else 128, size=(2, 3, h, w), dtype=np.int8)
    return x, (kh, kw), stride, pads


@FAST
@given(pool_cases())
def test_max_pool2d_matches_naive_loops(case):
    x, kernel, stride, pads = case
    got = ro.max_pool2d(x, kernel, stride=stride, padding=pads)
    assert got.dtype == x.dtype
    want = naive_pool(x, kernel, stride or kernel, pads, max)
    np.testing.assert_array_equal(got, want)


@ORT
@given(pool_cases())
def test_max_pool2d_matches_onnxruntime(case):
    x, kernel, stride, pads = case
    want = run_onnx(
        "MaxPool",
        {"x": x},
        kernel_shape=list(kernel),
        strides=list(stride or kernel),
        pads=list(pads),
    )
    got = ro.max_pool2d(x, kernel, stride=stride, padding=pads)
    np.testing.assert_array_equal(got, exact_ints(want))


@FAST
@given(pool_cases(pad_below_kernel=False))
def test_sum_pool2d_matches_naive_loops(case):
    x, kernel, stride, pads = case
    got = ro.sum_pool2d(x, kernel, stride=stride, padding=pads)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, naive_pool(x, kernel, stride or kernel, pads, sum))


@ORT
@given(pool_cases())
def test_sum_pool2d_matches_onnxruntime_average_pool(case):
    x, kernel, stride, pads = case
    avg = run_onnx(
        "AveragePool",
        {"x": x},
        kernel_shape=list(kernel),
        strides=list(stride or kernel),
        pads=list(pads),
        count_include_pad=1,
    )
    area = kernel[0] * kernel[1]
    # avg * area is an integer up to float32 rounding of the division (|sum| < 2**11).
    scaled = avg.astype(np.float64) * area
    assert np.max(np.abs(scaled - np.rint(scaled)), initial=0.0) < 1e-3
    got = ro.sum_pool2d(x, kernel, stride=stride, padding=pads)
    np.testing.assert_array_equal(got, np.rint(scaled).astype(np.int64))


def test_max_pool2d_keeps_dtype_and_padding_never_wins():
    x = np.array([[[[-5, -9], [-7, -6]]]], dtype=np.int32)
    got = ro.max_pool2d(x, 2, stride=1, padding=1)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got[0, 0], [[-5, -5, -9], [-5, -5, -6], [-7, -6, -6]])
    u = np.array([[[[0, 3], [1, 0]]]], dtype=np.uint8)  # dtype minimum 0 stands for -inf
    got = ro.max_pool2d(u, 2, stride=1, padding=(1, 1, 0, 0))
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got[0, 0], [[0, 3], [1, 3]])


def test_global_sum_pool_matches_python_and_wraps():
    rng = np.random.default_rng(10)
    x = rng.integers(-128, 128, size=(2, 5, 6, 7), dtype=np.int8)
    got = ro.global_sum_pool(x)
    assert got.shape == (2, 5, 1, 1)
    assert got.dtype == np.int32
    for b, c in np.ndindex(2, 5):
        assert got[b, c, 0, 0] == sum(int(v) for v in x[b, c].ravel())
    big = rng.integers(2**30, 2**31, size=(1, 2, 3, 3), dtype=np.int64)
    want = [wrap32(sum(int(v) for v in big[0, c].ravel())) for c in range(2)]
    np.testing.assert_array_equal(ro.global_sum_pool(big)[0, :, 0, 0], want)


# --------------------------------------------------------------------------- quantize_multiplier


@settings(max_examples=300, deadline=None)
@given(st.floats(-32.0, 30.99))
def test_quantize_multiplier_relative_error(log2_scale):
    scale = 2.0**log2_scale
    mult, shift = ro.quantize_multiplier(scale)
    assert isinstance(mult, int)
    assert isinstance(shift, int)
    assert 2**30 <= mult < 2**31
    assert 0 <= shift <= 62
    error = abs(Fraction(mult, 2**shift) - Fraction(scale)) / Fraction(scale)
    assert error < Fraction(1, 2**30)
    assert error <= Fraction(1, 2**31)  # mult rounded to nearest: half an ulp of 2**30


@pytest.mark.parametrize("k", [-20, -1, 0, 1, 7, 30])
def test_a_scale_just_below_a_power_of_two_carries_into_the_next(k):
    """frac * 2**31 rounds up to 2**31 just below 2**k: the multiplier is 2**30 at one shift
    less, which is 2**k itself - not twice or half of it (found by the hypothesis test above only
    by chance)."""
    for scale in (float(np.nextafter(2.0**k, 0)), (1 - 2**-34) * 2.0**k):
        assert ro.quantize_multiplier(scale) == (2**30, 30 - k)
        mults, shifts = ro.quantize_multipliers(np.array([scale]))
        assert (int(mults[0]), int(shifts[0])) == (2**30, 30 - k)


def test_quantize_multipliers_vectorised_agrees_with_scalar():
    rng = np.random.default_rng(11)
    scales = 2.0 ** rng.uniform(-32.0, 30.99, size=(40, 25))
    mults, shifts = ro.quantize_multipliers(scales)
    assert mults.shape == shifts.shape == scales.shape
    assert mults.dtype == shifts.dtype == np.int64
    approx = mults.astype(np.float64) * np.exp2(-shifts.astype(np.float64))  # exact in float64
    assert np.max(np.abs(approx - scales) / scales) <= 2.0**-31
    for idx in [(0, 0), (7, 3), (39, 24), (20, 11)]:
        assert ro.quantize_multiplier(float(scales[idx])) == (mults[idx], shifts[idx])


@pytest.mark.parametrize(
    ("scale", "want"),
    [(1.0, (2**30, 30)), (0.5, (2**30, 31)), (0.75, (3 * 2**29, 31)), (2.0**-32, (2**30, 62))],
)
def test_quantize_multiplier_known_values(scale, want):
    assert ro.quantize_multiplier(scale) == want


@pytest.mark.parametrize(
    ("scale", "text"),
    [
        (0.0, "0.0"),
        (-0.25, "-0.25"),
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        (1e-12, "1e-12"),
        (2.0**31, "2147483648.0"),
        (5e9, "5000000000.0"),
    ],
)
def test_quantize_multiplier_rejects_unrepresentable_scales(scale, text):
    with pytest.raises(ValueError, match="real_scale") as info:
        ro.quantize_multiplier(scale)
    assert text in str(info.value)
    with pytest.raises(ValueError, match="scales") as info:
        ro.quantize_multipliers(np.array([0.5, scale, 1.0]))
    assert text in str(info.value)


# --------------------------------------------------------------------------- bad arguments

X4 = np.zeros((1, 2, 4, 4), dtype=np.int8)
W4 = np.zeros((3, 2, 3, 3), dtype=np.int8)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ro.conv2d(X4, W4, stride=0), r"stride .*got 0"),
        (lambda: ro.conv2d(X4, W4, stride=(1, 2, 3)), r"stride .*got \(1, 2, 3\)"),
        (lambda: ro.conv2d(X4, W4, dilation=(1, -1)), r"dilation .*got \(1, -1\)"),
        (lambda: ro.conv2d(X4, W4, padding=(1, 1)), r"padding .*got \(1, 1\)"),
        (lambda: ro.conv2d(X4, W4, padding=(0, 0, -1, 0)), r"padding .*got \(0, 0, -1, 0\)"),
        (lambda: ro.conv2d(X4, W4, groups=0), r"groups .*got 0"),
        (lambda: ro.conv2d(X4, np.zeros((3, 1, 3, 3), np.int8), groups=2), r"groups \(2\)"),
        (lambda: ro.conv2d(X4, np.zeros((3, 3, 3, 3), np.int8)), r"w has 3 input channels"),
        (lambda: ro.conv2d(X4.astype(np.float32), W4), r"x must be an integer .*float32"),
        (lambda: ro.conv2d(X4[0], W4), r"x must be 4-D .*\(2, 4, 4\)"),
        (lambda: ro.conv2d(X4, W4[0]), r"w must be 4-D"),
        (lambda: ro.conv2d(X4, W4, dilation=2), r"dilated kernel height \(5\)"),
        (lambda: ro.matmul(np.zeros((2, 3), np.int8), np.zeros((4, 2), np.int8)), r"K=3.*K=4"),
        (lambda: ro.matmul(np.zeros((2, 3)), np.zeros((3, 2), np.int8)), r"a must be an integer"),
        (lambda: ro.requantize(5, 1, 63), r"^shift must be in 0\.\.62, got 63$"),
        (lambda: ro.requantize(5, 1, -1), r"shift must be in 0\.\.62, got -1"),
        (lambda: ro.requantize(5, 2**31, 3), r"mult must be in int32 range, got 2147483648"),
        (lambda: ro.requantize(np.array([0, -(2**31) - 1]), 1, 3), r"x must .* got -2147483649"),
        (lambda: ro.requantize(5, 1.5, 3), r"mult must be an integer .*float64"),
        (lambda: ro.requantize(X4 + 0.5, 1, 3), r"^x must be an integer array, got dtype float64$"),
        (lambda: ro.requantize(5, 1, 3.0), r"^shift must be an integer array, got dtype float64$"),
        (
            lambda: ro.requantize(np.array([2**31]), 1, 3),
            r"^x must be in int32 range, got 2147483648$",
        ),
        (lambda: ro.requantize(X4, 1, 3, axis=1.0), r"^axis must be an int, got 1\.0$"),
        (lambda: ro.requantize(X4, [1, 2, 3], 3), r"mult has 3 channels .* 2 along axis 1"),
        (lambda: ro.requantize(X4, 1, [[1, 2]]), r"shift must be a scalar or 1-D"),
        (lambda: ro.requantize(X4, [1, 2], 3, axis=4), r"axis must be in -4\.\.3 .*got 4"),
        (lambda: ro.clamp(X4, 5, 3), r"lo must be <= hi, got lo=5, hi=3"),
        (lambda: ro.clamp(X4, 0.5, 3), r"lo must be an integer"),
        (lambda: ro.clamp(X4, 0, 3.0), r"^hi must be an integer array, got dtype float64$"),
        (lambda: ro.clamp(X4.astype(float), 0), r"^x must be an integer array, got dtype float64$"),
        (
            lambda: ro.to_int8(X4.astype(np.float32)),
            r"^x must be an integer array, got dtype float32$",
        ),
        (
            lambda: ro.add_wrap32(X4.astype(float), X4),
            r"^a must be an integer array, got dtype float64$",
        ),
        (
            lambda: ro.add_wrap32(X4, X4.astype(float)),
            r"^b must be an integer array, got dtype float64$",
        ),
        (lambda: ro.to_int8(X4, -129), r"lo must be an int in -128\.\.127, got -129"),
        (lambda: ro.to_int8(X4, 0, 128), r"hi must be an int in -128\.\.127, got 128"),
        (lambda: ro.to_int8(X4, 10, 0), r"lo must be <= hi"),
        (lambda: ro.add_rescale(X4, 1, 0, X4, 1, 0, hi=200), r"hi must be .*got 200"),
        (lambda: ro.add_rescale(X4, 1, 99, X4, 1, 0), r"shift must be in 0\.\.62, got 99"),
        (lambda: ro.add_rescale(X4, 1, 0, X4[:, :1, :2], 1, 0), r"a and b do not broadcast"),
        (lambda: ro.add_wrap32(X4, np.zeros(3, np.int8)), r"a and b do not broadcast"),
        (lambda: ro.max_pool2d(X4, 2, padding=(0, 2, 0, 0)), r"padding \(0, 2, 0, 0\) .*kernel"),
        (lambda: ro.max_pool2d(X4, 0), r"kernel .*got 0"),
        (lambda: ro.max_pool2d(X4, 2, stride=(1, 0)), r"stride .*got \(1, 0\)"),
        (lambda: ro.sum_pool2d(X4, (5, 1)), r"kernel height \(5\)"),
        (lambda: ro.global_sum_pool(X4[0]), r"x must be 4-D"),
        (lambda: ro.quantize_multiplier("0.5"), r"real_scale must be a real number, got '0.5'"),
        (
            lambda: ro.quantize_multipliers(np.array(["a"])),
            r"scales must be a real-valued array, got dtype <U1",
        ),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_per_channel_axis_may_count_from_the_end_down_to_minus_ndim():
    """axis -x.ndim is the first axis: per-row multipliers of a (2, 3) matrix, each row times
    its own multiplier (shift 0: exact)."""
    x = np.random.default_rng(23).integers(-100, 100, size=(2, 3))
    got = ro.requantize(x, np.array([3, -2]), 0, axis=-2)
    assert np.array_equal(got, x * np.array([[3], [-2]]))


def test_equal_bounds_are_accepted_and_pin_every_value():
    """lo == hi is a valid (degenerate) clamp: every value becomes that bound."""
    x = np.random.default_rng(17).integers(-300, 300, size=(2, 3, 4, 4))
    assert np.array_equal(ro.clamp(x, 7, 7), np.full(x.shape, 7))
    assert np.array_equal(ro.to_int8(x, -5, -5), np.full(x.shape, -5, np.int8))


# --------------------------------------------------------------------------- edges and errors
# Each bad argument is refused with a message naming the argument and the value; the bounds
# themselves (int8 -128..127, a pad smaller than its kernel) are accepted.


def test_lookup_bounds_and_errors_name_the_argument():
    rng = np.random.default_rng(17)
    table = rng.integers(-128, 128, 256)
    x = np.array([-128, -1, 0, 127])
    np.testing.assert_array_equal(ro.lookup(x, table), table[[0, 127, 128, 255]])
    for bad, message in (
        (np.array([128]), "x must be in int8 range, got 128"),
        (np.array([-129]), "x must be in int8 range, got -129"),
        (np.array([0.5]), "x must be an integer array, got dtype float64"),
    ):
        with pytest.raises(ValueError) as info:
            ro.lookup(bad, table)
        assert str(info.value) == message
    for bad_table, message in (
        (np.where(np.arange(256) == 9, 128, table), "table must be in int8 range, got 128"),
        (np.where(np.arange(256) == 9, -129, table), "table must be in int8 range, got -129"),
        (table[:255], "table must have shape (256,), got (255,)"),
        (table.astype(np.float32), "table must be an integer array, got dtype float32"),
    ):
        with pytest.raises(ValueError) as info:
            ro.lookup(x, bad_table)
        assert str(info.value) == message


def test_add_rescale_bounds_axis_and_errors():
    rng = np.random.default_rng(29)
    a, b = rng.integers(-128, 128, (2, 3, 5))
    ma, mb = rng.integers(2**29, 2**31, (2, 3))
    sa, sb = rng.integers(28, 34, (2, 3))
    got = ro.add_rescale(a, ma, sa, b, mb, sb, -7, 7, axis=0)  # per row of (3, 5)
    want = [
        [
            min(7, max(-7, round_half_up(Fraction(int(a[i, j]) * int(ma[i]), 2 ** int(sa[i])))
                + round_half_up(Fraction(int(b[i, j]) * int(mb[i]), 2 ** int(sb[i])))))
            for j in range(5)
        ]
        for i in range(3)
    ]  # fmt: skip
    np.testing.assert_array_equal(got, want)
    same = ro.add_rescale(a, ma, sa, b, mb, sb, 3, 3, axis=0)  # lo == hi is allowed
    assert (same == 3).all()
    for lo, hi, message in (
        (-129, 127, "lo must be an int in -128..127, got -129"),
        (-128, 128, "hi must be an int in -128..127, got 128"),
        (4, 3, "lo must be <= hi, got lo=4, hi=3"),
    ):
        with pytest.raises(ValueError) as info:
            ro.add_rescale(a, ma, sa, b, mb, sb, lo, hi, axis=0)
        assert str(info.value) == message
    assert ro.add_rescale([5], 1, 0, [6], 1, 0, -128, 127).tolist() == [11]  # bounds accepted


def test_pool_edges_and_errors_name_the_axis():
    x = np.random.default_rng(31).integers(-128, 128, (1, 2, 4, 5)).astype(np.int8)
    with pytest.raises(ValueError, match=r"padding \(2, 0, 0, 0\) must be smaller than kernel"):
        ro.max_pool2d(x, (2, 2), padding=(2, 0, 0, 0))  # a pad as large as the kernel
    with pytest.raises(ValueError, match=r"padding \(0, 0, 0, 3\) must be smaller than kernel"):
        ro.max_pool2d(x, (2, 3), padding=(0, 0, 0, 3))
    for pool in (ro.max_pool2d, ro.sum_pool2d):
        with pytest.raises(ValueError) as info:
            pool(x, (5, 1))
        assert str(info.value) == "kernel height (5) is larger than the padded input (4)"
        with pytest.raises(ValueError) as info:
            pool(x, (1, 6))
        assert str(info.value) == "kernel width (6) is larger than the padded input (5)"
        with pytest.raises(ValueError) as info:
            pool(x[0], 2)
        assert str(info.value) == "x must be 4-D (NCHW), got shape (2, 4, 5)"


def test_window_sums_wrap_exactly_beyond_float_precision():
    """Sums are exact integers wrapped modulo 2**32, also for int64 inputs that float64 cannot
    hold: 2**53 + 1 + 1 = 2**53 + 2, which is 2 modulo 2**32."""
    x = np.array([2**53 + 1, 1], dtype=np.int64).reshape(1, 1, 1, 2)
    assert ro.sum_pool2d(x, (1, 2)).ravel().tolist() == [2]
    assert ro.global_sum_pool(x).ravel().tolist() == [2]
    with pytest.raises(ValueError, match="^real_scale must be finite and > 0, got 0.0$"):
        ro.quantize_multiplier(0.0)


def test_matmul_and_conv2d_argument_errors_name_the_argument():
    rng = np.random.default_rng(37)
    a = rng.integers(-128, 128, (2, 3))
    v = rng.integers(-128, 128, 3)
    want = [sum(int(a[i, k]) * int(v[k]) for k in range(3)) for i in range(2)]
    assert ro.matmul(a, v).tolist() == want  # a 1-D b is a vector
    for x, y, message in (
        (a, v.astype(float), "b must be an integer array, got dtype float64"),
        (np.int64(3), v, "a and b must be at least 1-D, got shapes () and (3,)"),
        (v, np.int64(3), "a and b must be at least 1-D, got shapes (3,) and ()"),
        (
            np.zeros((2, 3, 4), int),
            np.zeros((3, 4, 5), int),
            "a and b batch dimensions do not broadcast: shapes (2, 3, 4) and (3, 4, 5)",
        ),
    ):
        with pytest.raises(ValueError) as info:
            ro.matmul(x, y)
        assert str(info.value) == message
    x = rng.integers(-128, 128, (1, 4, 5, 5))
    w = rng.integers(-128, 128, (4, 4, 1, 3))
    for kwargs, message in (
        ({"w": w.astype(float)}, "w must be an integer array, got dtype float64"),
        ({"w": w[:, :, :0]}, "w kernel must be at least 1x1, got shape (4, 4, 0, 3)"),
        ({"w": w[:, :, :, :0]}, "w kernel must be at least 1x1, got shape (4, 4, 1, 0)"),
        ({"w": w[:, :1], "groups": 3}, "groups (3) must divide the input channels of x (4)"),
        (
            {"w": w, "dilation": (1, 3)},  # taps 0, 3, 6: 7 columns of a 5-wide input
            "dilated kernel width (7) is larger than the padded input (5)",
        ),
        (
            {"w": w, "stride": True},
            "stride must be a positive int or a pair of positive ints, got True",
        ),
    ):
        with pytest.raises(ValueError) as info:
            ro.conv2d(x, **kwargs)
        assert str(info.value) == message

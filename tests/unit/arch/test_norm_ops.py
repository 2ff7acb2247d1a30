"""The norm unit's integer row ops (arch/norm_ops.py) against float64 references.

LayerNorm, RMSNorm and Softmax as the ONNX operators define them, computed in float64 on the
dequantized int8 input; the integer result must stay within one output code of the float result
rounded to the output's codes, and keep cosine close to 1 over seeded random rows.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from arch import norm_ops as no


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def int8_rows(rng: np.random.Generator, rows: int, c: int) -> tuple[np.ndarray, float]:
    """Realistic token rows: an offset, a spread varying by row, and outlier channels."""
    real = rng.normal(0.3, 2.0, (rows, c)) * rng.uniform(0.5, 2.0, (rows, 1))
    real[:, rng.integers(0, c, 2)] *= 6.0
    s_in = float(np.abs(real).max()) / 127
    return np.clip(np.rint(real / s_in), -128, 127).astype(np.int8), s_in


def layer_norm_f64(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    centred = x - x.mean(-1, keepdims=True)
    return centred / np.sqrt((centred**2).mean(-1, keepdims=True) + eps) * g + b


def rms_norm_f64(x: np.ndarray, g: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * g


def softmax_f64(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("rms", [False, True], ids=["layernorm", "rmsnorm"])
@pytest.mark.parametrize("c", [7, 64, 192, 768])
def test_norm_within_one_code_of_fp64(rms: bool, c: int) -> None:
    rng = np.random.default_rng(c + 1000 * rms)
    x, s_in = int8_rows(rng, 24, c)
    g, b = rng.normal(1.0, 0.3, c), rng.normal(0.0, 0.5, c)
    xr = x.astype(np.float64) * s_in
    eps, zp_out = (1e-6, 0) if rms else (1e-5, -3)
    ref = rms_norm_f64(xr, g, eps) if rms else layer_norm_f64(xr, g, b, eps)
    s_out = float(np.abs(ref).max()) / 127 if rms else float(np.ptp(ref)) / 255
    beta = None if rms else b
    p = no.norm_params(g, beta, eps=eps, s_in=s_in, s_out=s_out, zp_out=zp_out, rms=rms)
    y = no.norm_rows(x, p)
    want = np.clip(np.rint(ref / s_out) + zp_out, -128, 127)
    assert np.abs(y.astype(np.int64) - want).max() <= 1
    got = cosine((y.astype(np.float64) - zp_out) * s_out, ref)
    assert got >= cosine((want - zp_out) * s_out, ref) - 2e-4


def test_rmsnorm_subtracts_the_input_zero_point() -> None:
    rng = np.random.default_rng(5)
    x, s_in = int8_rows(rng, 8, 96)
    x = np.clip(x.astype(np.int64) // 2 + 20, -128, 127).astype(np.int8)  # zero point 20
    g = rng.normal(1.0, 0.2, 96)
    ref = rms_norm_f64((x.astype(np.float64) - 20) * s_in, g, 1e-6)
    s_out = float(np.abs(ref).max()) / 127
    p = no.norm_params(g, None, eps=1e-6, s_in=s_in, s_out=s_out, zp_in=20, rms=True)
    assert np.abs(no.norm_rows(x, p) - np.rint(ref / s_out)).max() <= 1


def test_layernorm_of_all_equal_rows_is_beta() -> None:
    rng = np.random.default_rng(9)
    c = 40
    x = np.repeat(np.array([[-128], [0], [127], [-5]], dtype=np.int8), c, axis=1)
    g, b = rng.normal(1.0, 0.3, c), rng.normal(0.0, 0.4, c)
    s_out = 0.01
    y = no.norm_rows(x, no.norm_params(g, b, eps=1e-5, s_in=0.05, s_out=s_out))
    want = np.clip(np.rint(b / s_out), -128, 127)
    assert (y == want).all()


def test_layernorm_of_extreme_rows_saturates_like_fp64() -> None:
    c = 32
    x = np.full((2, c), -128, dtype=np.int8)
    x[0, 0], x[1, ::2] = 127, 127
    g, b = np.full(c, 1.5), np.zeros(c)
    ref = layer_norm_f64(x.astype(np.float64) * 0.1, g, b, 1e-5)
    s_out = 2.0 / 127  # channel 0 of row 0 (about 8.4) saturates
    y = no.norm_rows(x, no.norm_params(g, b, eps=1e-5, s_in=0.1, s_out=s_out))
    assert np.abs(y - np.clip(np.rint(ref / s_out), -128, 127)).max() <= 1
    assert y[0, 0] == 127


@pytest.mark.parametrize("v", [1, 2, 3, 1000, 123456789, 2**40 + 17, 2**62 - 1])
def test_row_rsqrt_is_close_to_the_real_reciprocal_square_root(v: int) -> None:
    r, t = no.row_rsqrt(np.array([v]))
    approx = int(r[0]) / 2.0 ** (int(t[0]) + 12)
    assert abs(approx * math.sqrt(v) - 1) < 2**-15


@pytest.mark.parametrize("c", [5, 64, 197, 768])
@pytest.mark.parametrize("s_in", [0.02, 0.08, 0.2])
def test_softmax_within_one_code_of_fp64(c: int, s_in: float) -> None:
    rng = np.random.default_rng(c * 7 + int(s_in * 100))
    x = rng.integers(-128, 128, (32, c)).astype(np.int8)
    ref = softmax_f64(x.astype(np.float64) * s_in)
    y = no.softmax_rows(x, no.softmax_params(s_in))
    want = np.clip(np.rint(ref * 256), 0, 255) - 128
    assert np.abs(y.astype(np.int64) - want).max() <= 1
    got = (y.astype(np.float64) + 128) / 256
    assert cosine(got, ref) >= cosine((want + 128) / 256, ref) - 1e-3


def test_softmax_masked_positions_are_exactly_zero() -> None:
    rng = np.random.default_rng(3)
    c = 50
    x = rng.integers(-128, 128, (6, c)).astype(np.int8)
    masked = np.zeros((6, c), dtype=bool)
    masked[1, 30:] = True
    masked[2, :] = True  # every position masked: all zero
    masked[3, 1:] = True  # all masked but one: that one is 1.0 (saturates to 255/256)
    masked[4] = np.triu(np.ones((c, c), dtype=bool), 1)[10]  # causal row 10
    bias = rng.integers(-40, 40, (1, c))
    y = no.softmax_rows(x, no.softmax_params(0.05), mask=bias, masked=masked)
    assert (y[masked] == -128).all()
    assert y[3, 0] == 127
    keep = ~masked[4]
    ref = softmax_f64((x[4, keep].astype(np.float64) + bias[0, keep]) * 0.05)
    assert np.abs(y[4, keep] - (np.clip(np.rint(ref * 256), 0, 255) - 128)).max() <= 1


def test_softmax_of_all_equal_and_negative_rows_is_uniform() -> None:
    for code in (-128, -1, 0, 127):
        y = no.softmax_rows(np.full((1, 8), code, dtype=np.int8), no.softmax_params(0.1))
        assert (y == 32 - 128).all()  # 1/8 is code 32


def test_softmax_large_mask_offsets_do_not_overflow() -> None:
    x = np.array([[127, -128, 0, 5]], dtype=np.int8)
    y = no.softmax_rows(x, no.softmax_params(1.0), mask=np.array([[0, 2**30, -(2**30), 0]]))
    assert y.tolist() == [[-128, 127, -128, -128]]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: no.norm_rows(np.zeros((2, 3)), _params(3)), "x must be an integer array"),
        (lambda: no.norm_rows(np.zeros((2, 4), np.int8), _params(3)), "x rows have 4 channels"),
        (lambda: no.softmax_params(0.0), "softmax input scale 0.0 out of range"),
        (lambda: no.row_rsqrt(np.array([0])), "variance term must be in 1..2**62-1"),
        (lambda: no.norm_params([1.0], [0.0], eps=1e-5, s_in=0.1, s_out=0.0), "need s_in, s_out"),
        (lambda: no.norm_params([1.0, 2.0], [0.0], eps=0, s_in=1, s_out=1), "gamma and beta"),
        (lambda: no.norm_params([1.0], None, eps=1.0, s_in=1e-5, s_out=1), "above 2**31-1"),
    ],
)
def test_bad_arguments_name_what_was_wrong(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("*", r"\*").replace(".", r"\.")):
        call()  # type: ignore[operator]


def _params(c: int) -> no.NormParams:
    return no.norm_params(np.ones(c), np.zeros(c), eps=1e-5, s_in=0.1, s_out=0.02)

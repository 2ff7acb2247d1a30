"""Integer row ops of the norm unit: LayerNormalization, RMSNorm and masked Softmax.

The semantic spec the ISA simulator and (stage 2) the RTL are held to, in the style of
:mod:`arch.reference_ops`. A *row* is the last axis of a token tensor (``C`` channels, which the
hardware streams as ``ceil(C / rows)`` lines of ``rows`` int8 codes). Everything is integer; every
rounding is stated. Sums are int64 (the hardware needs ``ceil(log2(C * 2**16)) + 1`` bits).

**Norm** (:func:`norm_rows`; parameters from :func:`norm_params`). Input int8 codes ``x`` at scale
``s_in``, output int8 codes at the calibrated ``s_out`` (zero point folded into ``bias``):

1. Statistics pass: ``S1 = sum(x)``, ``S2 = sum(x*x)`` (for RMSNorm on ``x - zp_in``).
2. ``d_i = C*x_i - S1`` and ``V = C*S2 - S1**2 + E`` (LayerNorm; the input zero point cancels),
   or ``d_i = C*x_i`` and ``V = C*S2 + E`` (RMSNorm), with ``E = max(1, round(C**2 * eps /
   s_in**2))`` (below 2**31: NORM holds it in a PARAM res_mult). Then ``d / sqrt(V)`` is
   exactly ``(x - mean) / sqrt(var + eps)``.
3. Reciprocal square root (once per row): ``k = (62 - bitlen(V)) // 2``; ``q = isqrt(V << 2k)``
   (exact floor square root, 31 result bits: a digit-by-digit unit, one bit per step);
   ``R = (2**46 + q // 2) // q`` (round half up, 16-17 bits: a restoring divider), so
   ``1 / sqrt(V) ~= R * 2**(k - 46)`` to about 2**-16 relative.
4. Normalize pass: ``h_i = (d_i * R + 2**(t-1)) >> t`` with ``t = 34 - k`` (``x_hat`` in Q12,
   round half up), then per channel, in the accelerator's requant style, ``a_i = (h_i * mult_i)
   >> (shift_i - 8)`` (Q8, floor) and ``y_i = clamp((a_i + bias_i + 128) >> 8, -128, 127)``
   (round half up), where ``mult_i / 2**shift_i = gamma_i / (s_out * 2**12)`` (signed int32
   ``mult``, ``shift`` in 8..62) and ``bias_i = round(256 * (beta_i / s_out + zp_out))`` (Q8).

**Softmax** (:func:`softmax_rows`; parameters from :func:`softmax_params`). Input int8 codes at
``s_in`` plus an optional additive mask in input codes (int32) and a boolean ``masked`` (positions
whose real mask is <= -1e4 or -inf); output int8 codes at the FIXED scale 1/256 with zero point
-128 (probability ``p`` is code ``round(256 p) - 128``, 1.0 saturates to 127), which the next
batch_matmul consumes as any zero-pointed activation:

1. ``z_i = x_i + mask_i``; ``m = max`` over unmasked ``z``; ``delta_i = m - z_i >= 0``.
2. Integer exp (I-BERT style): ``u = delta * K`` with ``K = round(s_in * log2(e) * 2**16)``,
   so ``exp(-delta * s_in) = 2**(-u / 2**16)``; ``n = u >> 16``, ``f = u & 0xFFFF``;
   ``2**-f ~= P(f) = 32768 + ((A*f + B*((f*f) >> 16) + 2**15) >> 16)`` (Q15, ``A = -21951``,
   ``B = 5567``: the second-order fit with ``P(0) = 1``, ``P(1) = 1/2``, max relative error 0.27%);
   ``e_i = P(f) >> n`` (0 for ``n >= 16`` and for masked positions).
3. ``S = sum(e)``; ``L = bitlen(S)``; ``R = (2**(L+15) + S // 2) // S`` (16-17 bits);
   ``y_i = clamp((e_i * R * 256 + 2**(L+14)) >> (L+15), 0, 255) - 128`` (round half up).
   Masked positions give exactly -128 (probability 0); a row with every position masked gives
   all -128.

Measured against fp32 (``tests/unit/arch/test_norm_ops.py``, seeded random rows, C = 7..768):
LayerNorm and RMSNorm at most 1 output code from fp32 rounded to the output codes, cosine
>= 0.9998; Softmax at most 1 code (1/256) from fp32 rounded to 1/256, and the same cosine as
that rounded fp32 to 1e-3 (0.9999 at C = 64 and input scale 0.08; at C = 768 with nearly
uniform rows, scale 0.02, the 1/256 output format itself limits cosine to 0.92).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "EXP_POLY",
    "MASKED_BELOW",
    "MAX_ROW",
    "SOFTMAX_SCALE",
    "SOFTMAX_ZERO_POINT",
    "NormParams",
    "norm_params",
    "norm_rows",
    "norm_rows_q8",
    "row_rsqrt",
    "softmax_params",
    "softmax_rows",
    "softmax_rows_q8",
]

MAX_ROW = 65535  # channels per row: keeps every sum and product below 2**62
SOFTMAX_SCALE = 1.0 / 256.0  # softmax output: probability p is code round(256 p) - 128
SOFTMAX_ZERO_POINT = -128
MASKED_BELOW = -1.0e4  # a real additive mask value <= this (or -inf) masks the position
EXP_POLY = (-21951, 5567)  # Q15 A, B of 2**-f ~= 1 + A f + B f**2 on [0, 1)
Q_NORM = 12  # fraction bits of the normalized x_hat


@dataclass(frozen=True)
class NormParams:
    """Folded LayerNorm / RMSNorm parameters: ``eps_codes`` and per-channel Q8 requant."""

    rms: bool
    eps_codes: int
    mult: npt.NDArray[np.int64]
    shift: npt.NDArray[np.int64]
    bias: npt.NDArray[np.int64]
    zp_in: int = 0


def _codes(name: str, x: npt.ArrayLike) -> npt.NDArray[np.int64]:
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must be an integer array, got dtype {arr.dtype}")
    if arr.ndim == 0 or not 1 <= arr.shape[-1] <= MAX_ROW:
        raise ValueError(f"{name} rows must have 1..{MAX_ROW} channels, got shape {arr.shape}")
    return arr.astype(np.int64)


def _bitlen(v: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Bit length of positive int64 values (exact, no float rounding)."""
    return np.array([int(a).bit_length() for a in v.ravel()], dtype=np.int64).reshape(v.shape)


def row_rsqrt(v: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``(R, t)`` with ``1 / sqrt(v) ~= R / 2**(t + 12)`` for int64 ``v`` in 1..2**62-1 (step 3)."""
    v = np.asarray(v, dtype=np.int64)
    if v.size and (int(v.min()) < 1 or int(v.max()) >= 2**62):
        raise ValueError(f"variance term must be in 1..2**62-1, got {int(v.min())}")
    k = (62 - _bitlen(v)) // 2
    q = np.array(
        [math.isqrt(int(a) << (2 * int(b))) for a, b in zip(v.ravel(), k.ravel(), strict=True)],
        dtype=np.int64,
    ).reshape(v.shape)
    r = ((1 << 46) + q // 2) // q
    return r, 34 - k


def norm_params(
    gamma: npt.ArrayLike,
    beta: npt.ArrayLike | None,
    *,
    eps: float,
    s_in: float,
    s_out: float,
    zp_out: int = 0,
    zp_in: int = 0,
    rms: bool = False,
) -> NormParams:
    """Fold fp32 ``gamma``/``beta``, ``eps`` and the scales into :class:`NormParams` (step 2, 4)."""
    g = np.asarray(gamma, dtype=np.float64).ravel()
    b = np.zeros_like(g) if beta is None else np.asarray(beta, dtype=np.float64).ravel()
    if g.shape != b.shape or not 1 <= g.size <= MAX_ROW:
        raise ValueError(f"gamma and beta must be 1..{MAX_ROW} channels, got {g.shape}, {b.shape}")
    if not (s_in > 0 and s_out > 0 and eps >= 0 and np.all(np.isfinite(g))):
        raise ValueError(
            f"need s_in, s_out > 0, eps >= 0, finite gamma; got {s_in}, {s_out}, {eps}"
        )
    c = g.size
    eps_codes = max(1, round(c * c * eps / (s_in * s_in)))
    if eps_codes >= 2**31:
        raise ValueError(f"eps {eps} is {eps_codes} in squared input codes x C**2: above 2**31-1")
    real = np.abs(g) / (s_out * 2.0**Q_NORM)
    frac, exp = np.frexp(np.where(real > 0, real, 1.0))
    mult = np.rint(frac * 2.0**31).astype(np.int64)
    shift = 31 - exp.astype(np.int64)
    carry = mult == 2**31
    mult, shift = np.where(carry, 2**30, mult), np.where(carry, shift - 1, shift)
    if np.any((shift < 8) | (shift > 62)):
        raise ValueError(f"gamma / s_out out of range for the norm unit: {float(real.max())!r}")
    mult = np.where(real > 0, np.sign(g).astype(np.int64) * mult, 0)
    bias = np.clip(np.rint(256.0 * (b / s_out + zp_out)), -(2**24), 2**24).astype(np.int64)
    return NormParams(rms, int(eps_codes), mult, shift, bias, int(zp_in))


def norm_rows(x: npt.ArrayLike, p: NormParams) -> npt.NDArray[np.int8]:
    """LayerNorm (``p.rms`` False) or RMSNorm of each row of int8 codes ``x``; see the module."""
    return np.clip((norm_rows_q8(x, p) + 128) >> 8, -128, 127).astype(np.int8)


def norm_rows_q8(x: npt.ArrayLike, p: NormParams) -> npt.NDArray[np.int64]:
    """``a_i + bias_i`` of step 4 (Q8 output codes): what NORM leaves for STORE to round."""
    xs = _codes("x", x)
    c = xs.shape[-1]
    if p.mult.shape != (c,):
        raise ValueError(f"x rows have {c} channels but the params have {p.mult.shape[0]}")
    if p.rms:
        xs = xs - p.zp_in
    s1 = xs.sum(axis=-1, keepdims=True)
    s2 = (xs * xs).sum(axis=-1, keepdims=True)
    if p.rms:
        d, v = c * xs, c * s2 + p.eps_codes
    else:
        d, v = c * xs - s1, c * s2 - s1 * s1 + p.eps_codes
    r, t = row_rsqrt(v)
    h = (d * r + (np.int64(1) << (t - 1))) >> t
    return ((h * p.mult) >> (p.shift - 8)) + p.bias


def softmax_params(s_in: float) -> int:
    """``K = round(s_in * log2(e) * 2**16)``: input codes to Q16 powers of two (step 2)."""
    k = round(s_in * math.log2(math.e) * 2**16) if math.isfinite(s_in) else 0
    if not 1 <= k < 2**24:
        raise ValueError(f"softmax input scale {s_in!r} out of range: about 2**-16 .. 2**7")
    return k


def _exp2_neg(u: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """``2**(-u / 2**16)`` in Q15 for ``u >= 0`` (step 2): shift + second-order polynomial."""
    n, f = u >> 16, u & 0xFFFF
    a, b = EXP_POLY
    poly = 32768 + ((a * f + b * ((f * f) >> 16) + (1 << 15)) >> 16)
    return np.where(n >= 16, 0, poly >> np.minimum(n, 16))


def softmax_rows(
    x: npt.ArrayLike,
    k: int,
    mask: npt.ArrayLike | None = None,
    masked: npt.ArrayLike | None = None,
) -> npt.NDArray[np.int8]:
    """Softmax of each row of int8 codes ``x`` with ``K = k``; see the module for every step.

    ``mask`` (int, input codes) and ``masked`` (bool) broadcast against ``x``.
    """
    q8 = softmax_rows_q8(x, k, mask, masked)
    return (np.clip((q8 + 128) >> 8, 0, 255) + SOFTMAX_ZERO_POINT).astype(np.int8)


def softmax_rows_q8(
    x: npt.ArrayLike,
    k: int,
    mask: npt.ArrayLike | None = None,
    masked: npt.ArrayLike | None = None,
) -> npt.NDArray[np.int64]:
    """``floor(256 * 256 * e_i / S)`` (Q8 probabilities in 1/256): what NORM leaves for STORE.

    ``(q8 + 128) >> 8`` equals step 3's rounding exactly (nested floors).
    """
    xs = _codes("x", x)
    z = xs if mask is None else xs + np.clip(_codes("mask", mask), -(2**24), 2**24)
    off = np.zeros(z.shape, dtype=bool)
    if masked is not None:
        off = np.broadcast_to(np.asarray(masked, dtype=bool), z.shape)
    top = np.where(off, np.iinfo(np.int64).min, z).max(axis=-1, keepdims=True)
    delta = np.where(off, 0, top - z)
    e = np.where(off, 0, _exp2_neg(delta * k))
    s = e.sum(axis=-1, keepdims=True)
    safe = np.maximum(s, 1)
    bl = _bitlen(safe)
    r = ((np.int64(1) << (bl + 15)) + safe // 2) // safe
    return (e * r * 256) >> (bl + 7)

"""Integer reference ops: the semantic spec the accelerator RTL and the ISA simulator are held to.

Every op here is bit-exact and defines what the hardware must compute. Conventions:

* Activations are NCHW, convolution weights OIHW (ONNX order). Inputs are integer numpy arrays
  (int8 typically; any integer dtype is accepted). Floats are rejected.
* All accumulation happens in int64. Ops that produce accumulators (:func:`conv2d`,
  :func:`matmul`, :func:`sum_pool2d`, :func:`global_sum_pool`, :func:`add_wrap32`) return int32:
  accumulators wrap modulo ``2**32``, like the hardware (two's complement). The int32 result is
  exact modulo ``2**32`` for any integer inputs, since int64 wrap-around preserves it.
* Padding is ONNX order ``(top, left, bottom, right)``. Convolution and sum pooling pad with zeros;
  max pooling pads with -infinity (padding never wins), as ONNX MaxPool does.
* Rescaling is fixed point: ``requantize(x, mult, shift)`` computes
  ``(x * mult + (1 << (shift - 1))) >> shift`` with an arithmetic shift, i.e.
  ``floor(x * mult / 2**shift + 1/2)``: round half up, towards +infinity (2.5 -> 3, -2.5 -> -2).
  :func:`quantize_multiplier` turns a real scale into such a ``(mult, shift)`` pair.
* Saturation to int8 (and ReLU/ReLU6, as clamps with ``lo=0``) is explicit: :func:`clamp`,
  :func:`to_int8`, :func:`add_rescale`. Any other activation is a 256-entry table applied to the
  saturated int8 code: :func:`lookup`.

Bad arguments raise :class:`ValueError` with a message naming the argument and the bad value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from arch.isa import INT32_MAX, INT32_MIN, MAX_SHIFT, TABLE_ENTRIES

__all__ = [
    "add_rescale",
    "add_wrap32",
    "clamp",
    "conv2d",
    "global_sum_pool",
    "lookup",
    "matmul",
    "max_pool2d",
    "quantize_multiplier",
    "quantize_multipliers",
    "requantize",
    "sum_pool2d",
    "to_int8",
]


IntPair = int | tuple[int, int]
Padding = int | Sequence[int]


# --------------------------------------------------------------------------- argument checking


def _int_array(name: str, value: npt.ArrayLike) -> np.ndarray:
    """``value`` as an integer ndarray, or ValueError naming ``name``."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must be an integer array, got dtype {arr.dtype}")
    return arr


def _check_range(name: str, arr: np.ndarray, lo: int, hi: int, what: str) -> None:
    """Raise ValueError if any element of ``arr`` lies outside ``lo..hi``."""
    if arr.size == 0:
        return
    amin, amax = int(arr.min()), int(arr.max())
    if amin < lo or amax > hi:
        bad = amin if amin < lo else amax
        raise ValueError(f"{name} must be in {what}, got {bad}")


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def _ints(value: object, count: int) -> tuple[int, ...] | None:
    """An int repeated ``count`` times, or a length-``count`` sequence of ints; else None."""
    if isinstance(value, int | np.integer) and _is_int(value):
        return (int(value),) * count
    if (
        isinstance(value, Sequence | np.ndarray)
        and len(value) == count
        and all(_is_int(v) for v in value)
    ):
        return tuple(int(v) for v in value)
    return None


def _pair(name: str, value: object) -> tuple[int, int]:
    """An int or a pair of ints, all >= 1, as a pair."""
    pair = _ints(value, 2)
    if pair is None or min(pair) < 1:
        raise ValueError(f"{name} must be a positive int or a pair of positive ints, got {value!r}")
    return pair[0], pair[1]


def _padding(value: object) -> tuple[int, int, int, int]:
    """ONNX pads ``(top, left, bottom, right)``, all >= 0; an int pads all four sides."""
    pads = _ints(value, 4)
    if pads is None or min(pads) < 0:
        raise ValueError(
            f"padding must be 4 non-negative ints (top, left, bottom, right), got {value!r}"
        )
    return pads[0], pads[1], pads[2], pads[3]


def _nchw(name: str, value: npt.ArrayLike) -> np.ndarray:
    arr = _int_array(name, value)
    if arr.ndim != 4:
        raise ValueError(f"{name} must be 4-D (NCHW), got shape {arr.shape}")
    return arr


def _out_size(size: int, pad_lo: int, pad_hi: int, extent: int, stride: int, what: str) -> int:
    """Output length along one axis (floor mode), or ValueError if the window does not fit."""
    padded = size + pad_lo + pad_hi
    if extent > padded:
        raise ValueError(f"{what} ({extent}) is larger than the padded input ({padded})")
    return (padded - extent) // stride + 1


def _windows(
    xp: np.ndarray, extent: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int]
) -> np.ndarray:
    """View of ``xp`` (N, C, H, W) as (N, C, OH, OW, KH, KW) windows; no copy."""
    win = sliding_window_view(xp, extent, axis=(2, 3))
    return win[:, :, :: stride[0], :: stride[1], :: dilation[0], :: dilation[1]]


# --------------------------------------------------------------------------- accumulating ops


def conv2d(
    x: npt.ArrayLike,
    w: npt.ArrayLike,
    *,
    stride: IntPair = (1, 1),
    padding: Padding = (0, 0, 0, 0),
    dilation: IntPair = (1, 1),
    groups: int = 1,
) -> npt.NDArray[np.int32]:
    """2-D convolution (cross-correlation, as ONNX Conv) with int32 wrap-around accumulators.

    Parameters
    ----------
    x : array_like of int, shape (N, C, H, W)
        Input activations.
    w : array_like of int, shape (O, C // groups, KH, KW)
        Weights, ONNX OIHW order.
    stride, dilation : int or (int, int)
        Per-axis (H, W) stride and dilation, >= 1.
    padding : int or (top, left, bottom, right)
        Zero padding, ONNX order.
    groups : int
        Number of groups; must divide C and O. ``groups == C == O`` is depthwise.

    Returns
    -------
    ndarray of int32, shape (N, O, OH, OW)
        ``OH = (H + top + bottom - dilation_h * (KH - 1) - 1) // stride_h + 1``, likewise OW.
        Sums wrap modulo 2**32.
    """
    x = _nchw("x", x)
    w = _int_array("w", w)
    if w.ndim != 4:
        raise ValueError(f"w must be 4-D (OIHW), got shape {w.shape}")
    sh, sw = _pair("stride", stride)
    dh, dw = _pair("dilation", dilation)
    top, left, bottom, right = _padding(padding)
    if not _is_int(groups) or groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if c % groups:
        raise ValueError(f"groups ({groups}) must divide the input channels of x ({c})")
    if o % groups:
        raise ValueError(f"groups ({groups}) must divide the output channels of w ({o})")
    if cg * groups != c:
        raise ValueError(
            f"w has {cg} input channels per group, expected C / groups = {c} / {groups}; "
            f"w shape {w.shape}, x shape {x.shape}"
        )
    if kh < 1 or kw < 1:
        raise ValueError(f"w kernel must be at least 1x1, got shape {w.shape}")
    eh, ew = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    oh = _out_size(h, top, bottom, eh, sh, "dilated kernel height")
    ow = _out_size(wd, left, right, ew, sw, "dilated kernel width")

    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    win = _windows(xp, (eh, ew), (sh, sw), (dh, dw))  # (N, C, OH, OW, KH, KW)
    og, k = o // groups, cg * kh * kw
    # im2col: (N, G, OH*OW, Cg*KH*KW) @ (G, Cg*KH*KW, Og) -> (N, G, OH*OW, Og)
    cols = win.reshape(n, groups, cg, oh, ow, kh, kw).transpose(0, 1, 3, 4, 2, 5, 6)
    cols = cols.reshape(n, groups, oh * ow, k)
    wm = w.astype(np.int64).reshape(groups, og, k).transpose(0, 2, 1)
    acc = _int_matmul(cols, wm)
    return acc.transpose(0, 1, 3, 2).reshape(n, o, oh, ow).astype(np.int32)


#: float64 represents every integer of magnitude up to 2**53 exactly.
EXACT_FLOAT_INT = 2**53


def _magnitude(x: np.ndarray) -> int:
    return max(abs(int(x.max())), abs(int(x.min()))) if x.size else 0


def _int_matmul(a: np.ndarray, b: np.ndarray) -> npt.NDArray[np.int64]:
    """Exact ``a @ b`` of integer arrays, as int64 (no wrap-around yet).

    When no partial sum can reach 2**53 (K * max|a| * max|b| below it, as for int8 operands)
    the product goes through float64 BLAS, exact in any summation order and many times faster
    than numpy's integer matmul (ResNet-50's whole reference: 3.4 s -> 0.5-0.8 s); other
    operands take the int64 path.
    """
    k = a.shape[-1]
    if k * _magnitude(a) * _magnitude(b) < EXACT_FLOAT_INT:
        return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.int64)
    return np.matmul(a.astype(np.int64), b.astype(np.int64))


def matmul(a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.int32]:
    """Integer matrix product ``a @ b`` with int32 wrap-around accumulators.

    Parameters
    ----------
    a : array_like of int, shape (..., M, K)
    b : array_like of int, shape (..., K, N)
        Batch dimensions broadcast as in :func:`numpy.matmul` (1-D operands too).

    Returns
    -------
    ndarray of int32, shape (..., M, N)
        Sums wrap modulo 2**32.
    """
    a = _int_array("a", a)
    b = _int_array("b", b)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"a and b must be at least 1-D, got shapes {a.shape} and {b.shape}")
    ka = a.shape[-1]
    # not mutated: for a 2-D b, shape[0] is shape[-2], so the bound 2 vs 3 changes nothing
    kb = b.shape[-2] if b.ndim >= 2 else b.shape[0]  # pragma: no mutate
    if ka != kb:
        raise ValueError(
            f"a has K={ka} (last axis) but b has K={kb}; shapes {a.shape} and {b.shape}"
        )
    try:
        acc = _int_matmul(a, b)
    except ValueError as exc:
        raise ValueError(
            f"a and b batch dimensions do not broadcast: shapes {a.shape} and {b.shape}"
        ) from exc
    return np.asarray(acc).astype(np.int32)


def add_wrap32(a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.int32]:
    """Elementwise ``a + b`` wrapping modulo 2**32 to int32 (accumulator add); broadcasts."""
    a = _int_array("a", a)
    b = _int_array("b", b)
    try:
        total = np.add(a.astype(np.int64), b.astype(np.int64))
    except ValueError as exc:
        raise ValueError(f"a and b do not broadcast: shapes {a.shape} and {b.shape}") from exc
    return np.asarray(total).astype(np.int32)


# --------------------------------------------------------------------------- rescaling


def _per_channel(name: str, arr: np.ndarray, x: np.ndarray, axis: int) -> np.ndarray:
    """Scalar ``arr`` as is; 1-D ``arr`` reshaped to broadcast along ``axis`` of ``x``."""
    if arr.ndim == 0:
        return arr
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a scalar or 1-D (per channel), got shape {arr.shape}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(
            f"axis must be in {-x.ndim}..{x.ndim - 1} for x of shape {x.shape}, got {axis}"
        )
    channels = x.shape[axis]
    if arr.shape[0] not in (1, channels):
        raise ValueError(
            f"{name} has {arr.shape[0]} channels but x has {channels} along axis {axis}"
        )
    shape = [1] * x.ndim
    shape[axis] = arr.shape[0]
    return arr.reshape(shape)


def requantize(
    x: npt.ArrayLike, mult: npt.ArrayLike, shift: npt.ArrayLike, *, axis: int = 1
) -> npt.NDArray[np.int64]:
    """Fixed-point rescale ``x * mult / 2**shift``, rounding half up (towards +infinity).

    For ``shift > 0`` the result is ``(x * mult + (1 << (shift - 1))) >> shift`` with an
    arithmetic right shift, which equals ``floor(x * mult / 2**shift + 1/2)`` exactly: the
    nearest integer, ties going up (2.5 -> 3, -2.5 -> -2, -2.6 -> -3). For ``shift == 0`` it is
    ``x * mult``. Computed in int64; the ranges below keep ``|x * mult| <= 2**62``, so nothing
    overflows.

    Parameters
    ----------
    x : array_like of int
        Values in int32 range (typically accumulators).
    mult : int or 1-D array_like of int
        Signed int32 multiplier, scalar or per channel.
    shift : int or 1-D array_like of int
        Right shift in 0..62, scalar or per channel.
    axis : int
        Channel axis of ``x`` along which 1-D ``mult`` / ``shift`` broadcast: 1 for NCHW and
        for (M, N) matrices with per-column scales (or -1). Ignored for scalar ``mult``/``shift``.

    Returns
    -------
    ndarray of int64
        Same shape as ``x``; not saturated (see :func:`to_int8`).
    """
    x = _int_array("x", x)
    mult_arr = _int_array("mult", mult)
    shift_arr = _int_array("shift", shift)
    _check_range("x", x, INT32_MIN, INT32_MAX, "int32 range")
    _check_range("mult", mult_arr, INT32_MIN, INT32_MAX, "int32 range")
    _check_range("shift", shift_arr, 0, MAX_SHIFT, f"0..{MAX_SHIFT}")
    if not _is_int(axis):
        raise ValueError(f"axis must be an int, got {axis!r}")
    m = _per_channel("mult", mult_arr, x, axis).astype(np.int64)
    s = _per_channel("shift", shift_arr, x, axis).astype(np.int64)
    half = (np.int64(1) << s) >> 1  # 2**(shift-1), or 0 for shift == 0
    return np.asarray((x.astype(np.int64) * m + half) >> s, dtype=np.int64)


def clamp(x: npt.ArrayLike, lo: Any = None, hi: Any = None) -> np.ndarray:
    """Clamp ``x`` to ``lo..hi`` (``None``: unbounded on that side), exactly as :func:`numpy.clip`.

    The dtype is numpy's: Python-int bounds keep ``x``'s dtype, numpy-typed bounds may promote.
    ReLU is ``clamp(x, 0)``, quantized ReLU6 ``clamp(x, zero_point, q6)``.
    """
    x = _int_array("x", x)
    for name, bound in (("lo", lo), ("hi", hi)):
        if bound is not None:
            _int_array(name, bound)
    if lo is not None and hi is not None and np.any(np.asarray(lo) > np.asarray(hi)):
        raise ValueError(f"lo must be <= hi, got lo={lo!r}, hi={hi!r}")
    return np.asarray(np.clip(x, lo, hi))


def to_int8(x: npt.ArrayLike, lo: int = -128, hi: int = 127) -> npt.NDArray[np.int8]:
    """Saturate ``x`` to ``lo..hi`` (within -128..127) and cast to int8."""
    x = _int_array("x", x)
    for name, bound in (("lo", lo), ("hi", hi)):
        if not _is_int(bound) or not -128 <= bound <= 127:
            raise ValueError(f"{name} must be an int in -128..127, got {bound!r}")
    if lo > hi:
        raise ValueError(f"lo must be <= hi, got lo={lo}, hi={hi}")
    return np.clip(x, lo, hi).astype(np.int8)


def lookup(x: npt.ArrayLike, table: npt.ArrayLike) -> npt.NDArray[np.int8]:
    """``table[x + 128]`` for int8 codes ``x``: an activation as a 256-entry int8 table.

    Parameters
    ----------
    x : array_like of int
        Codes in -128..127 (saturated outputs).
    table : 1-D array_like of int
        256 int8 values; entry ``t`` is the output for code ``t - 128``.
    """
    x = _int_array("x", x)
    _check_range("x", x, -128, 127, "int8 range")
    t = _int_array("table", table)
    if t.shape != (TABLE_ENTRIES,):
        raise ValueError(f"table must have shape ({TABLE_ENTRIES},), got {t.shape}")
    _check_range("table", t, -128, 127, "int8 range")
    # x - 128 would index the same entries (numpy wraps negative indices): not mutated
    return t.astype(np.int8)[x.astype(np.int64) + 128]  # pragma: no mutate


def add_rescale(
    a: npt.ArrayLike,
    a_mult: npt.ArrayLike,
    a_shift: npt.ArrayLike,
    b: npt.ArrayLike,
    b_mult: npt.ArrayLike,
    b_shift: npt.ArrayLike,
    lo: int = -128,
    hi: int = 127,
    *,
    axis: int = 1,
) -> npt.NDArray[np.int8]:
    """Saturating add of two tensors with different scales.

    ``clamp(requantize(a, a_mult, a_shift) + requantize(b, b_mult, b_shift), lo, hi)`` as int8,
    where the sum is exact (no int64 wrap-around).

    Parameters
    ----------
    a, b : array_like of int
        Operands (int8 typically, any int32-range values allowed); broadcast together.
    a_mult, a_shift, b_mult, b_shift : int or 1-D array_like of int
        Per-operand rescale, as for :func:`requantize` (per channel along ``axis``).
    lo, hi : int
        Output bounds within -128..127; ``lo`` above -128 fuses a ReLU.
    axis : int
        Channel axis for per-channel multipliers.

    Returns
    -------
    ndarray of int8
    """
    for name, bound in (("lo", lo), ("hi", hi)):
        if not _is_int(bound) or not -128 <= bound <= 127:
            raise ValueError(f"{name} must be an int in -128..127, got {bound!r}")
    if lo > hi:
        raise ValueError(f"lo must be <= hi, got lo={lo}, hi={hi}")
    ra = requantize(a, a_mult, a_shift, axis=axis)
    rb = requantize(b, b_mult, b_shift, axis=axis)
    try:
        np.broadcast_shapes(ra.shape, rb.shape)
    except ValueError as exc:
        raise ValueError(f"a and b do not broadcast: shapes {ra.shape} and {rb.shape}") from exc
    # Each term is within +-2**62, so the int64 sum can only overflow at 2**62 + 2**62 = 2**63,
    # which saturates to hi anyway. (Only then are both terms > 0 and the sum < 0: moving any of
    # the three bounds by one changes nothing, so the line is not mutated.) numpy wraps int64
    # arrays silently (0-d ones too: requantize returns arrays), so there is no warning to mute.
    total = ra + rb
    sat = (ra > 0) & (rb > 0) & (total < 0)  # pragma: no mutate
    total = np.where(sat, np.iinfo(np.int64).max, total)
    return np.clip(total, lo, hi).astype(np.int8)


def _multipliers(
    name: str, scales: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Shared body of :func:`quantize_multiplier` and :func:`quantize_multipliers`."""
    bad = ~np.isfinite(scales) | (scales <= 0)
    if np.any(bad):
        raise ValueError(f"{name} must be finite and > 0, got {float(scales[bad].flat[0])!r}")
    frac, exp = np.frexp(scales)  # scales == frac * 2**exp, frac in [0.5, 1)
    mults = np.rint(frac * 2.0**31).astype(np.int64)  # in [2**30, 2**31]
    shifts = 31 - exp.astype(np.int64)
    carry = mults == 2**31  # frac rounded up to 1.0
    mults = np.where(carry, 2**30, mults)
    shifts = np.where(carry, shifts - 1, shifts)
    out = (shifts < 0) | (shifts > MAX_SHIFT)
    if np.any(out):
        raise ValueError(
            f"{name} out of range, got {float(scales[out].flat[0])!r}: mult / 2**shift with "
            f"shift in 0..{MAX_SHIFT} covers about 2**-32 .. 2**31"
        )
    return mults, shifts


def quantize_multiplier(real_scale: float) -> tuple[int, int]:
    """Fixed-point ``(mult, shift)`` with ``mult / 2**shift ~= real_scale``, for :func:`requantize`.

    ``mult`` is in ``[2**30, 2**31)`` (a positive int32 with 31 significant bits) and ``shift``
    in 0..62. ``mult`` is rounded to nearest, so the relative error is at most 2**-31.

    Raises
    ------
    ValueError
        If ``real_scale`` is not finite and > 0, or lies outside about ``2**-32 .. 2**31``.
    """
    if isinstance(real_scale, bool) or not isinstance(real_scale, int | float | np.number):
        raise ValueError(f"real_scale must be a real number, got {real_scale!r}")
    mults, shifts = _multipliers("real_scale", np.array([float(real_scale)]))
    return int(mults[0]), int(shifts[0])


def quantize_multipliers(
    scales: npt.ArrayLike,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Vectorised :func:`quantize_multiplier`: int64 ``(mults, shifts)`` shaped like ``scales``."""
    arr = np.asarray(scales)
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"scales must be a real-valued array, got dtype {arr.dtype}")
    return _multipliers("scales", arr.astype(np.float64))


# --------------------------------------------------------------------------- pooling


def _pool_args(
    x: npt.ArrayLike, kernel: IntPair, stride: IntPair | None, padding: Padding
) -> tuple[np.ndarray, tuple[int, int], tuple[int, int], tuple[int, int, int, int]]:
    xa = _nchw("x", x)
    k = _pair("kernel", kernel)
    s = k if stride is None else _pair("stride", stride)
    pads = _padding(padding)
    return xa, k, s, pads


def max_pool2d(
    x: npt.ArrayLike,
    kernel: IntPair,
    *,
    stride: IntPair | None = None,
    padding: Padding = (0, 0, 0, 0),
) -> np.ndarray:
    """Max pooling with ONNX MaxPool semantics (floor mode, no dilation).

    Padded positions behave as -infinity, so padding never wins. Each pad must be smaller than
    the kernel along its axis (as ONNX requires), so every window holds a real element.

    Parameters
    ----------
    x : array_like of int, shape (N, C, H, W)
    kernel : int or (KH, KW)
    stride : int or (int, int), optional
        Defaults to ``kernel``.
    padding : int or (top, left, bottom, right)

    Returns
    -------
    ndarray, same dtype as ``x``, shape (N, C, OH, OW)
    """
    xa, (kh, kw), (sh, sw), (top, left, bottom, right) = _pool_args(x, kernel, stride, padding)
    if max(top, bottom) >= kh or max(left, right) >= kw:
        raise ValueError(
            f"padding {(top, left, bottom, right)} must be smaller than kernel {(kh, kw)} "
            f"along each axis"
        )
    _out_size(xa.shape[2], top, bottom, kh, sh, "kernel height")
    _out_size(xa.shape[3], left, right, kw, sw, "kernel width")
    # The dtype minimum acts as -infinity: every window also holds a real element >= it.
    neg_inf = np.iinfo(xa.dtype).min
    xp = np.pad(xa, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=neg_inf)
    out = _windows(xp, (kh, kw), (sh, sw), (1, 1)).max(axis=(-2, -1))
    return np.asarray(out)


def sum_pool2d(
    x: npt.ArrayLike,
    kernel: IntPair,
    *,
    stride: IntPair | None = None,
    padding: Padding = (0, 0, 0, 0),
) -> npt.NDArray[np.int32]:
    """Window sums with zero padding (floor mode), int32 wrapping modulo 2**32.

    The building block of average pooling: ONNX AveragePool with ``count_include_pad=1`` is
    ``sum_pool2d(...) / (KH * KW)``, which the caller applies by requantizing.

    Parameters
    ----------
    x : array_like of int, shape (N, C, H, W)
    kernel : int or (KH, KW)
    stride : int or (int, int), optional
        Defaults to ``kernel``.
    padding : int or (top, left, bottom, right)

    Returns
    -------
    ndarray of int32, shape (N, C, OH, OW)
    """
    xa, (kh, kw), (sh, sw), (top, left, bottom, right) = _pool_args(x, kernel, stride, padding)
    _out_size(xa.shape[2], top, bottom, kh, sh, "kernel height")
    _out_size(xa.shape[3], left, right, kw, sw, "kernel width")
    xp = np.pad(xa.astype(np.int64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    out = _windows(xp, (kh, kw), (sh, sw), (1, 1)).sum(axis=(-2, -1))  # int64, as xp
    return out.astype(np.int32)


def global_sum_pool(x: npt.ArrayLike) -> npt.NDArray[np.int32]:
    """Sum over H and W: (N, C, H, W) -> (N, C, 1, 1) int32, wrapping modulo 2**32."""
    xa = _nchw("x", x)
    return xa.astype(np.int64).sum(axis=(2, 3), keepdims=True).astype(np.int32)

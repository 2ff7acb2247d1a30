"""The input tensor of a run: a real, finite array of the model's input shape - never one
reshaped from another layout, cast from complex, or holding NaN."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["InputError", "check_input", "noise_input"]


class InputError(ValueError):
    """An input the model cannot take; the message says what is wrong and what it takes."""


def check_input(x: object, shape: Sequence[int], what: str = "input") -> np.ndarray:
    """``x`` as float32 of ``shape``. A missing leading batch dimension of 1 is added, a 3-D
    (1, C, L) input of a model held as (1, C, 1, L) gets its unit axis; any
    other shape (the right element count in another layout too), a non-numeric or complex dtype
    and NaN or infinite values are :class:`InputError`."""
    shape = tuple(int(n) for n in shape)
    array = np.asarray(x)
    if array.dtype.kind == "c":
        raise InputError(
            f"{what} holds complex values ({array.dtype}); the model takes real numbers (float32)"
        )
    if array.dtype.kind not in "fiub":
        raise InputError(f"{what} has dtype {array.dtype}; the model takes numbers (float32)")
    held = len(shape) == 4 and shape[2] == 1 and array.shape == (*shape[:2], shape[3])
    if held:  # a (1, C, L) input (Conv1d's, or tokens (1, T, F)) is held as (1, C, 1, L)
        array = array[:, :, None, :]
    if array.shape != shape and not (shape[:1] == (1,) and array.shape == shape[1:]):
        hint = ""
        if sorted(array.shape) == sorted(shape) and len(shape) == 4:
            hint = " (another layout? the model takes NCHW: transpose the array)"
        raise InputError(f"{what} has shape {array.shape}; the model takes {shape}{hint}")
    values = array.astype(np.float32).reshape(shape)
    bad = ~np.isfinite(values)
    if bad.any():
        index = [int(i) for i in np.argwhere(bad)[0]]
        raise InputError(
            f"{what} holds {int(bad.sum())} NaN or infinite values (first {values[tuple(index)]} "
            f"at index {index}); the model takes finite numbers"
        )
    return values


def noise_input(shape: Sequence[int], seed: int) -> np.ndarray:
    """Seeded standard-normal float32 input of ``shape``, drawn from the stream ``[seed, 1]``:
    never one of the calibration inputs, which :func:`compiler.calibrate.default_calibration`
    draws from the stream ``seed``."""
    rng = np.random.default_rng([seed, 1])
    return rng.standard_normal(tuple(shape)).astype(np.float32)

"""``CALIB=path``: the user's calibration inputs - a .npy batch (N, *input shape without its
batch of 1, or N inputs of the input shape) or a folder of images (each loaded like ``IMAGE=``,
:mod:`sim.app.images`) - as a function of the model's input shape (what compile_model takes)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from sim.app.files import regular_file
from sim.app.images import IMAGE_SUFFIXES, Preprocess, image_files, load_image
from sim.runtime.inputs import InputError, check_input

__all__ = ["calibration_loader"]


def _npy_batch(path: Path, shape: tuple[int, ...]) -> list[np.ndarray]:
    try:
        batch = np.load(path)
    except (OSError, ValueError, TypeError, EOFError) as exc:
        raise InputError(f"CALIB {path} is not a readable .npy array: {exc}") from None
    if batch.shape == shape[1:] or batch.shape == shape:
        batch = batch.reshape((1, *shape))
    elif shape[0] == 1 and batch.ndim == len(shape) and batch.shape[1:] == shape[1:]:
        batch = batch[:, None]
    if batch.ndim != len(shape) + 1 or batch.shape[1:] != shape or len(batch) == 0:
        raise InputError(
            f"CALIB {path} has shape {batch.shape}; calibration takes N >= 1 inputs: "
            f"(N, {', '.join(map(str, shape[1:]))}) or (N, {', '.join(map(str, shape))})"
        )
    return [check_input(x, shape, f"CALIB {path} sample {i}") for i, x in enumerate(batch)]


def calibration_loader(
    path: Path, preprocess: Preprocess
) -> Callable[[tuple[int, ...]], list[np.ndarray]]:
    """A function of the model's input shape giving the inputs at ``path`` (checked now: it
    exists and is a .npy file or a folder of images)."""
    if path.is_dir():
        files = image_files(path)
        return lambda shape: [load_image(f, tuple(shape), preprocess) for f in files]
    regular_file(path, "CALIB", "array")
    if path.suffix == ".npy":
        return lambda shape: _npy_batch(path, tuple(shape))
    raise InputError(
        f"CALIB {path}: use a .npy batch or a folder of images "
        f"({', '.join(s[1:] for s in IMAGE_SUFFIXES)})"
    )

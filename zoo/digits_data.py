"""The handwritten digits of scikit-learn (1797 8x8 images, bundled with the package: nothing is
downloaded) and one fixed train / held-out split of them."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["HELD_OUT", "SPLIT_SEED", "Split", "load", "to_input"]

#: Seed of the permutation that splits the 1797 images; the first HELD_OUT are held out.
SPLIT_SEED = 0
HELD_OUT = 360
#: The largest pixel value of the data set (16 levels of ink, 0 = background).
PIXEL_MAX = 16.0


class Split(NamedTuple):
    """Images as the model's input (N, 1, 8, 8) float32 in [0, 1] (ink = 1) and int64 labels."""

    x: np.ndarray
    y: np.ndarray


def to_input(pixels: np.ndarray) -> np.ndarray:
    """The data set's 0..16 pixels of (N, 8, 8) images as model input (N, 1, 8, 8) in [0, 1]."""
    return (np.asarray(pixels, np.float32) / PIXEL_MAX)[:, None]


def load() -> tuple[Split, Split]:
    """(train, held_out): 1437 and 360 images, the same on every call and machine."""
    from sklearn.datasets import load_digits  # imported here: only this model needs it

    digits = load_digits()
    order = np.random.default_rng(SPLIT_SEED).permutation(len(digits.target))
    held, train = np.sort(order[:HELD_OUT]), np.sort(order[HELD_OUT:])
    x, y = to_input(digits.images), digits.target.astype(np.int64)
    return Split(x[train], y[train]), Split(x[held], y[held])

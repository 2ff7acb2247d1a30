"""Model zoo: ONNX models built by code, with seeded random weights, for the compiler to eat -
and ``digits``, trained at build time on scikit-learn's bundled handwritten digits, and
``chargpt``, a character-level GPT trained on numpy's docstrings.

Nothing is downloaded. :func:`build` resolves the names in :data:`MODELS`;
``python -m zoo NAME -o model.onnx`` writes one to disk. Every model is float32,
opset 17, IR version 9, has one input ``"input"`` (batch 1) and one output ``"logits"``, and is
byte-identical for the same arguments.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from . import chargpt as _chargpt
from . import digits as _digits
from .efficientnet import efficientnet
from .googlenet import googlenet
from .mobilenet import mobilenetv2
from .resnets import RESIDUAL_GAMMA_SCALE, RESNET_SPECS, ResNetSpec, resnet
from .small import mlp, small_cnn
from .squeezenet import squeezenet
from .transformers import bert, vit
from .unet import unet

__all__ = [
    "DEFAULT_IMAGE_SIZES",
    "bert",
    "efficientnet",
    "googlenet",
    "MODELS",
    "RESIDUAL_GAMMA_SCALE",
    "RESNET_SPECS",
    "ResNetSpec",
    "build",
    "calibration",
    "held_out",
    "held_out_windows",
    "mlp",
    "mobilenetv2",
    "resnet",
    "small_cnn",
    "squeezenet",
    "unet",
    "vit",
]

#: Names :func:`build` knows; ``"resnet"`` is ResNet-18.
MODELS: tuple[str, ...] = (
    "resnet",
    "resnet18",
    "resnet34",
    "resnet50",
    "mobilenetv2",
    "efficientnet",
    "squeezenet",
    "googlenet",
    "unet",
    "vit",
    "bert",
    "cnn",
    "mlp",
    "digits",
    "chargpt",
)

#: Input height/width :func:`build` uses when ``image_size`` is None (the MLP takes no image).
DEFAULT_IMAGE_SIZES: dict[str, int] = {
    "resnet": 224,
    "resnet18": 224,
    "resnet34": 224,
    "resnet50": 224,
    "mobilenetv2": 224,
    "efficientnet": 224,
    "squeezenet": 224,
    "googlenet": 224,
    "unet": 224,
    "vit": 224,
    "cnn": 32,
}

_IMAGE_BUILDERS: dict[str, Callable[[int, int], onnx.ModelProto]] = {
    "resnet": lambda size, seed: resnet(18, image_size=size, seed=seed),
    "resnet18": lambda size, seed: resnet(18, image_size=size, seed=seed),
    "resnet34": lambda size, seed: resnet(34, image_size=size, seed=seed),
    "resnet50": lambda size, seed: resnet(50, image_size=size, seed=seed),
    "mobilenetv2": lambda size, seed: mobilenetv2(image_size=size, seed=seed),
    "efficientnet": lambda size, seed: efficientnet(image_size=size, seed=seed),
    "squeezenet": lambda size, seed: squeezenet(image_size=size, seed=seed),
    "googlenet": lambda size, seed: googlenet(image_size=size, seed=seed),
    "unet": lambda size, seed: unet(image_size=size, seed=seed),
    "vit": lambda size, seed: vit(image_size=size, seed=seed),
    "cnn": lambda size, seed: small_cnn(image_size=size, seed=seed),
}


#: Models whose input is not an image.
_TOKEN_BUILDERS: dict[str, Callable[[int], onnx.ModelProto]] = {
    "mlp": lambda seed: mlp(seed=seed),
    "bert": lambda seed: bert(seed=seed),
    "digits": lambda seed: _digits.digits(seed=seed),
    "chargpt": lambda seed: _chargpt.chargpt(seed=seed),
}


def build(name: str, *, image_size: int | None = None, seed: int = 0) -> onnx.ModelProto:
    """Build the zoo model ``name`` with its default number of classes.

    Parameters
    ----------
    name
        One of :data:`MODELS`.
    image_size
        Input height and width; None for the model's default (:data:`DEFAULT_IMAGE_SIZES`).
        Must be None for ``"mlp"``, ``"bert"``, ``"digits"`` (8x8) and ``"chargpt"``.
    seed
        Seed of the random weights (of ``"digits"`` and ``"chargpt"``: of their training).

    Raises
    ------
    ValueError
        On an unknown name (the message lists the known ones), an ``image_size`` given for the
        MLP, an ``image_size`` the model cannot take, or a negative seed.
    """
    if name in _TOKEN_BUILDERS:
        if image_size is not None:
            raise ValueError(f"model {name!r} takes no image size, got image_size={image_size!r}")
        return _TOKEN_BUILDERS[name](seed)
    if name not in _IMAGE_BUILDERS:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(MODELS)}")
    size = DEFAULT_IMAGE_SIZES[name] if image_size is None else image_size
    return _IMAGE_BUILDERS[name](size, seed)


def held_out(name: str) -> _digits.Split | None:
    """The held-out split of a zoo model trained on a data set (``digits``), else None."""
    return _digits.held_out() if name == "digits" else None


def held_out_windows(name: str, count: int) -> np.ndarray | None:
    """The first ``count`` held-out windows (count, T + 1) of a zoo language model trained on
    text (``chargpt``), else None."""
    return _chargpt.held_out_windows(count) if name == "chargpt" else None


def calibration(name: str) -> list[np.ndarray] | None:
    """Default calibration inputs of a zoo model trained on a data set (training images, never
    held-out ones), else None (seeded noise)."""
    if name == "chargpt":
        return _chargpt.calibration_set()
    return _digits.calibration_set() if name == "digits" else None

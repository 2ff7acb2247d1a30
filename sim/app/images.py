"""Images as users have them -> model input: any file Pillow reads (PNG, JPEG, BMP, GIF, TIFF,
WebP; any mode), converted to the model's channels (3: RGB, alpha dropped; 1: grayscale; 16-bit
scaled to 8), resized so that it covers the model's H x W (shorter side, bilinear) and
center-cropped, then scaled and normalized by a named preprocessing (:data:`PREPROCESS`)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.app.files import regular_file
from sim.runtime.inputs import InputError

__all__ = ["IMAGE_SUFFIXES", "PREPROCESS", "Preprocess", "image_files", "load_image"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")


@dataclass(frozen=True)
class Preprocess:
    """``x = (pixel * scale - mean) / std`` per channel (RGB order), pixels 0..255."""

    name: str
    scale: float
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)

    def describe(self) -> dict[str, Any]:
        """What the report states: name, scale, mean, std, channel order, layout."""
        return {
            "name": self.name,
            "scale": self.scale,
            "mean": list(self.mean),
            "std": list(self.std),
            "channels": "RGB (3-channel models) or grayscale (1-channel)",
            "resize": "shorter side to cover H x W (bilinear), center crop",
            "layout": "NCHW",
        }


PREPROCESS: dict[str, Preprocess] = {
    # torchvision's ImageNet normalization
    "imagenet": Preprocess("imagenet", 1 / 255, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "unit": Preprocess("unit", 1 / 255),  # pixels in [0, 1] (the digits model's input)
    "none": Preprocess("none", 1.0),  # raw 0..255
}


def image_files(folder: Path) -> list[Path]:
    """The image files of ``folder`` (by suffix), sorted by name; none is an error."""
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise InputError(
            f"folder {folder} holds no image ({', '.join(s[1:] for s in IMAGE_SUFFIXES)})"
        )
    return files


def _converted(image: Any, channels: int) -> Any:
    """A Pillow image in any mode as mode ``L`` / ``RGB`` (by ``channels``), or ``F`` holding
    0..255 for 16-bit and float grayscale (converted to 3 channels after resizing)."""
    from PIL import Image

    if image.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        wide = np.asarray(image, np.float64)
        if image.mode.startswith("I;16") or (image.mode == "I" and wide.max() > 255):
            wide = wide / 257.0  # 16-bit levels to 8-bit ones
        return Image.fromarray(np.clip(wide, 0, 255).astype(np.float32), "F")
    return image.convert("L" if channels == 1 else "RGB")


def _opened(path: Path) -> Any:
    """The image file ``path`` read by Pillow: a regular file of bounded size, of at most
    ``Image.MAX_IMAGE_PIXELS`` pixels (a decompression bomb is refused before it is decoded),
    every pixel finite (a float TIFF may hold NaN)."""
    from PIL import Image, UnidentifiedImageError

    regular_file(path, "image", "image")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as opened:
                opened.load()
                image = opened.copy()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise InputError(
            f"image {path} is too large to decode ({exc}); images may have at most "
            f"{Image.MAX_IMAGE_PIXELS:,} pixels"
        ) from None
    except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as exc:
        raise InputError(
            f"image {path} is not a readable image ({exc}); supported: "
            f"{', '.join(s[1:] for s in IMAGE_SUFFIXES)} in any mode"
        ) from None
    if image.mode == "F":
        bad = int(np.count_nonzero(~np.isfinite(np.asarray(image, np.float64))))
        if bad:
            raise InputError(
                f"image {path}: {bad} pixel(s) are not finite (NaN or infinite); a float "
                "image must hold finite values"
            )
    return image


def load_image(path: Path, shape: tuple[int, ...], preprocess: Preprocess) -> np.ndarray:
    """The image file ``path`` as a float32 input of ``shape`` (1, C, H, W); see the module
    docstring. An unreadable file, a model input that is not an image of 1 or 3 channels, or
    ImageNet normalization of a 1-channel model is :class:`InputError`."""
    from PIL import Image

    if len(shape) != 4 or shape[0] != 1 or shape[1] not in (1, 3):
        raise InputError(
            f"image {path}: the model takes {tuple(shape)}, not an image; images feed models "
            "with input (1, 1 or 3, H, W) (else give a .npy array)"
        )
    _, channels, height, width = shape
    if len(preprocess.mean) not in (1, channels):
        raise InputError(
            f"PREPROCESS={preprocess.name} normalizes {len(preprocess.mean)} channels; the model "
            f"takes {channels} (use unit or none)"
        )
    image = _opened(path)
    image = _converted(image, channels)
    w, h = image.size
    factor = max(width / w, height / h)
    size = (max(width, round(w * factor)), max(height, round(h * factor)))
    if size != (w, h):
        image = image.resize(size, Image.Resampling.BILINEAR)
    left, top = (size[0] - width) // 2, (size[1] - height) // 2
    image = image.crop((left, top, left + width, top + height))
    pixels = np.asarray(image, np.float64)
    if pixels.ndim == 2:
        pixels = np.repeat(pixels[..., None], channels, axis=2)
    mean = np.asarray(preprocess.mean, np.float64)
    std = np.asarray(preprocess.std, np.float64)
    x = (pixels * preprocess.scale - mean) / std
    return x.transpose(2, 0, 1)[None].astype(np.float32)

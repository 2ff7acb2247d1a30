"""Images as users have them (sim/app/images.py) against Pillow and hand-computed values: every
mode to the model's channels, resize + center crop, the preprocessing, and clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from sim.app.images import PREPROCESS, load_image
from sim.runtime.inputs import InputError

UNIT, NONE, IMAGENET = PREPROCESS["unit"], PREPROCESS["none"], PREPROCESS["imagenet"]


def seeded_rgb(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


MODES_BY_FORMAT = {
    ".png": ["RGB", "RGBA", "L", "LA", "P", "1", "I;16"],
    ".jpg": ["RGB", "L", "CMYK"],
    ".bmp": ["RGB", "L", "P", "1"],
    ".tif": ["RGB", "RGBA", "LA", "CMYK", "I;16"],
}


@pytest.mark.parametrize(
    ("suffix", "mode"), [(s, m) for s, modes in MODES_BY_FORMAT.items() for m in modes]
)
def test_every_mode_at_the_models_size_matches_pillow(tmp_path, mode: str, suffix: str) -> None:
    """No resize: 3-channel input = Pillow's own RGB conversion of the file as read back,
    1-channel = its L conversion (16-bit: the 8-bit level, value / 257)."""
    rgb = Image.fromarray(seeded_rgb(6, 10))
    if mode == "I;16":
        wide = np.random.default_rng(1).integers(0, 65536, (6, 10), dtype=np.uint16)
        image = Image.fromarray(wide)
    else:
        image = rgb.convert(mode)
    path = tmp_path / f"img{suffix}"
    image.save(path)
    with Image.open(path) as saved:
        saved.load()
        if saved.mode.startswith("I"):
            levels = np.clip(np.asarray(saved, np.float64) / 257.0, 0, 255)
            want_rgb = np.repeat(levels[..., None], 3, axis=2)
            want_l = levels
        else:
            want_rgb = np.asarray(saved.convert("RGB"), np.float64)
            want_l = np.asarray(saved.convert("L"), np.float64)
    got = load_image(path, (1, 3, 6, 10), NONE)
    np.testing.assert_allclose(got[0].transpose(1, 2, 0), want_rgb, atol=1e-4)
    got = load_image(path, (1, 1, 6, 10), UNIT)
    np.testing.assert_allclose(got[0, 0], want_l / 255.0, atol=1e-6)


def test_imagenet_normalization_by_hand(tmp_path) -> None:
    pixels = seeded_rgb(4, 4, seed=3)
    Image.fromarray(pixels).save(tmp_path / "a.png")
    got = load_image(tmp_path / "a.png", (1, 3, 4, 4), IMAGENET)
    r, g, b = (pixels[1, 2].astype(np.float64) / 255.0).tolist()
    want = [(r - 0.485) / 0.229, (g - 0.456) / 0.224, (b - 0.406) / 0.225]  # RGB order
    np.testing.assert_allclose(got[0, :, 1, 2], want, rtol=1e-5)
    assert got.dtype == np.float32 and got.shape == (1, 3, 4, 4)


def test_resize_and_center_crop(tmp_path) -> None:
    """A 20x10 (w x h) image for an 8x8 model: resized to 16x8 (shorter side 8), columns 4..11
    kept. Against Pillow: resize then crop; by hand: a constant image stays constant and red
    bands at both ends (4 of 20 columns each) are cropped away."""
    pixels = np.zeros((10, 20, 3), np.uint8)
    pixels[:, :, 1] = 200
    pixels[:, :4] = (255, 0, 0)
    pixels[:, -4:] = (255, 0, 0)
    path = tmp_path / "wide.png"
    Image.fromarray(pixels).save(path)
    got = load_image(path, (1, 3, 8, 8), NONE)[0].transpose(1, 2, 0)
    want = Image.fromarray(pixels).resize((16, 8), Image.Resampling.BILINEAR).crop((4, 0, 12, 8))
    np.testing.assert_allclose(got, np.asarray(want, np.float64), atol=1e-4)
    assert np.all(got[:, 1:-1, 0] == 0) and np.all(got[:, 1:-1, 1] == 200)
    # A tall image crops rows; an image already of the model's aspect is only resized.
    Image.fromarray(np.full((30, 12, 3), 77, np.uint8)).save(tmp_path / "tall.jpg", quality=100)
    assert np.allclose(load_image(tmp_path / "tall.jpg", (1, 3, 8, 8), NONE), 77, atol=1.5)
    small = seeded_rgb(4, 4, seed=9)
    Image.fromarray(small).save(tmp_path / "small.png")
    got = load_image(tmp_path / "small.png", (1, 3, 8, 8), NONE)[0].transpose(1, 2, 0)
    want = Image.fromarray(small).resize((8, 8), Image.Resampling.BILINEAR)
    np.testing.assert_allclose(got, np.asarray(want, np.float64), atol=1e-4)


def test_bad_images_say_what_is_wrong(tmp_path) -> None:
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"\x89PNG\r\n" + bytes(np.random.default_rng(2).integers(0, 256, 64)))
    with pytest.raises(InputError, match="is not a readable image.*png, jpg"):
        load_image(junk, (1, 3, 8, 8), UNIT)
    Image.fromarray(seeded_rgb(8, 8)).save(tmp_path / "ok.png")
    with pytest.raises(InputError, match=r"takes \(1, 64\), not an image"):
        load_image(tmp_path / "ok.png", (1, 64), UNIT)
    with pytest.raises(InputError, match="imagenet normalizes 3 channels; the model takes 1"):
        load_image(tmp_path / "ok.png", (1, 1, 8, 8), IMAGENET)

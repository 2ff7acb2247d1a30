"""Every file the command line reads is a regular file of bounded size, checked before it is
opened (:mod:`sim.app.files`): a device (``/dev/zero`` never ends, ``/dev/null`` is empty), a
FIFO (whose read blocks), a directory or a socket given as MODEL, BUNDLE, CONFIG, IMAGE (or an
entry of an IMAGE folder) or CALIB ends with exit code 2 and one line saying it is not a regular
file - never "missing", never a hang. Images Pillow would decode into gigabytes, or float
images holding NaN, are refused the same way."""

from __future__ import annotations

import os
import socket
import struct
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sim.app import files
from sim.app.images import PREPROCESS, load_image
from sim.app.run_inputs import calibration, run_inputs
from sim.runtime.inputs import InputError
from tests.unit.run.test_cli_errors import assert_usage_error, in_process

SHAPE = (1, 1, 8, 8)


@pytest.mark.parametrize("what", ["MODEL", "BUNDLE", "CONFIG"])
def test_model_bundle_and_config_are_regular_files(what, tmp_path, capsys) -> None:
    out = str(tmp_path / "o")
    for path, kind in _kinds_in(tmp_path, what):
        option = {"MODEL": "--model", "BUNDLE": "--bundle", "CONFIG": "--config"}[what]
        args = [option, str(path)] if what != "CONFIG" else ["--model", "mlp", option, str(path)]
        line = assert_usage_error(in_process(capsys, *args, "--out", out), what, str(path))
        assert f"is not a regular file (it is {kind})" in line, line
        assert "does not exist" not in line
    assert not Path(out).exists()  # refused before the run directory was made


def _kinds_in(tmp_path: Path, what: str) -> list[tuple[Path, str]]:
    base = tmp_path / what
    base.mkdir()
    suffix = ".json" if what == "CONFIG" else ".onnx"
    fifo, folder = base / f"fifo{suffix}", base / f"folder{suffix}"
    os.mkfifo(fifo)
    folder.mkdir()
    devices = [(Path("/dev/zero"), "a character device"), (Path("/dev/null"), "a character device")]
    # (a config is a file only by its .json name; /dev/zero is an unknown preset, never read)
    return [*(devices if what != "CONFIG" else []), (fifo, "a FIFO"), (folder, "a directory")]


def test_a_fifo_model_is_refused_without_a_hang(tmp_path: Path, capsys) -> None:
    """The FIFO is never opened: were it, the read would block until a writer comes, so the
    run gets 60 s in a thread, then a writer unblocks it and the test fails."""
    fifo = tmp_path / "m.onnx"
    os.mkfifo(fifo)
    results = []
    worker = threading.Thread(
        target=lambda: results.append(in_process(capsys, "--model", str(fifo))), daemon=True
    )
    worker.start()
    worker.join(60)
    if worker.is_alive():
        with open(fifo, "wb"):  # the reader sees its end: the run ends
            pass
        worker.join()
        pytest.fail(f"{fifo} was opened: the run blocked on the FIFO")
    line = assert_usage_error(results[0], "MODEL", str(fifo))
    assert "not a regular file (it is a FIFO)" in line


def test_image_and_calib_files_are_regular_files(tmp_path: Path) -> None:
    fifo_png, fifo_npy = tmp_path / "f.png", tmp_path / "f.npy"
    os.mkfifo(fifo_png)
    os.mkfifo(fifo_npy)
    sock = tmp_path / "s.png"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    try:
        cases = [
            (lambda p: run_inputs(str(p), None, 0, SHAPE, None), "IMAGE"),
            (lambda p: calibration(str(p), "minmax", None, None, 0), "CALIB"),
        ]
        for load, what in cases:
            for path, kind in [
                (Path("/dev/zero"), "a character device"),
                (fifo_png, "a FIFO"),
                (fifo_npy, "a FIFO"),
                (sock, "a socket"),
            ]:
                with pytest.raises(InputError, match="is not a regular file") as caught:
                    load(path)
                assert what in str(caught.value) and kind in str(caught.value)
    finally:
        server.close()


def test_entries_of_an_image_folder_are_regular_files(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    Image.fromarray(np.random.default_rng(5).integers(0, 256, (8, 8), np.uint8)).save(
        folder / "a.png"
    )
    os.mkfifo(folder / "b.png")
    with pytest.raises(InputError, match=r"b\.png is not a regular file \(it is a FIFO\)"):
        run_inputs(str(folder), None, 0, SHAPE, None)
    (folder / "b.png").unlink()
    (folder / "c.png").mkdir()
    with pytest.raises(InputError, match=r"c\.png is not a regular file \(it is a directory\)"):
        run_inputs(str(folder), None, 0, SHAPE, None)


def test_files_over_their_size_are_refused_before_reading(tmp_path, monkeypatch) -> None:
    path = tmp_path / "x.npy"
    np.save(path, np.random.default_rng(6).normal(size=SHAPE).astype(np.float32))
    assert run_inputs(str(path), None, 0, SHAPE, None).xs[0].shape == SHAPE
    monkeypatch.setitem(files.MAX_BYTES, "array", 100)
    size = path.stat().st_size
    with pytest.raises(InputError, match=f"IMAGE {path} is {size:,} bytes; .* at most 100"):
        run_inputs(str(path), None, 0, SHAPE, None)


def _png_header(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims ``width`` x ``height`` gray pixels (its data: one empty row)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\x00"))
        + chunk(b"IEND", b"")
    )


def test_decompression_bombs_are_refused(tmp_path: Path, monkeypatch) -> None:
    huge = tmp_path / "huge.png"
    huge.write_bytes(_png_header(100_000, 100_000))  # 10^10 pixels in 60 bytes
    with pytest.raises(InputError, match=r"huge\.png is too large to decode.*at most"):
        load_image(huge, SHAPE, PREPROCESS["none"])
    # a real image over the limit, and one between the limit and twice it (Pillow's warning)
    real = tmp_path / "real.png"
    Image.fromarray(np.random.default_rng(7).integers(0, 256, (64, 64), np.uint8)).save(real)
    for limit in (1000, 3000):
        monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", limit)
        with pytest.raises(InputError, match=r"real\.png is too large to decode"):
            load_image(real, SHAPE, PREPROCESS["none"])


def test_float_images_holding_nan_are_refused(tmp_path: Path) -> None:
    pixels = np.random.default_rng(8).uniform(0, 255, (8, 8)).astype(np.float32)
    good = tmp_path / "good.tif"
    Image.fromarray(pixels, "F").save(good)
    x = load_image(good, SHAPE, PREPROCESS["none"])
    assert np.allclose(x[0, 0], pixels, atol=1e-3)  # the same pixels: no resize at 8 x 8
    for value, count in ((np.nan, 1), (np.inf, 2)):
        bad = pixels.copy()
        bad[2, 3] = value
        bad[5, 1] = value if count == 2 else bad[5, 1]
        path = tmp_path / f"bad-{count}.tif"
        Image.fromarray(bad, "F").save(path)
        with pytest.raises(InputError, match=rf"{count} pixel\(s\) are not finite"):
            load_image(path, SHAPE, PREPROCESS["none"])


def test_a_nan_tiff_in_an_image_folder_is_one_line(tmp_path, capsys) -> None:
    """Through the command line: exit code 2 naming the file, not an internal error."""
    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(9)
    pixels = rng.uniform(0, 255, (8, 8)).astype(np.float32)
    Image.fromarray(pixels, "F").save(folder / "a.tif")
    pixels[4, 4] = np.nan
    Image.fromarray(pixels, "F").save(folder / "b.tif")
    args = ("--model", "cnn", "--config", "tiny", "--image-size", "8", "--image", str(folder))
    line = assert_usage_error(in_process(capsys, *args, "--out", str(tmp_path / "o")), "b.tif")
    assert "not finite" in line

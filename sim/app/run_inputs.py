"""What ``make sim`` runs on and calibrates with, from its options - and the report's words
for both, so neither is ever silent.

- ``IMAGE=``: a .npy array (taken as it is), an image file or a folder of images (each loaded
  by :mod:`sim.app.images` with ``PREPROCESS``); default: a trained zoo model's first held-out
  image, else seeded noise that is no calibration input.
- ``CALIB=``: a .npy batch or a folder of images (:mod:`sim.app.calib_data`); default: a trained
  zoo model's training images, else 4 seeded noise inputs (16 for a model with attention:
  :func:`compiler.calibrate.default_count`). ``CALIB_METHOD=``: minmax,
  percentile[:P], entropy or mse (:mod:`compiler.calib_methods`).
- ``PREPROCESS=``: imagenet, unit or none (:data:`sim.app.images.PREPROCESS`); default unit for
  ``digits`` and 1-channel models, else imagenet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

import zoo
from compiler.calib_methods import CalibMethodError, parse_method
from compiler.calibrate import DEFAULT_COUNT, default_count
from sim.app.calib_data import calibration_loader
from sim.app.files import regular_file
from sim.app.images import IMAGE_SUFFIXES, PREPROCESS, Preprocess, image_files, load_image
from sim.runtime.inputs import InputError, check_input, noise_input

__all__ = ["Calibration", "RunInputs", "calibration", "preprocess_for", "run_inputs"]


@dataclass
class RunInputs:
    """The inputs (the first is the one the run reports layer by layer), their names, and
    ``report``: where they came from and how they were preprocessed."""

    xs: list[np.ndarray]
    names: list[str]
    report: dict[str, Any] = field(default_factory=dict)


def preprocess_for(name: str | None, model: str | None, channels: int) -> Preprocess:
    """The preprocessing called ``name``, or the model's default."""
    if name is None:
        name = "unit" if model == "digits" or channels == 1 else "imagenet"
    if name not in PREPROCESS:
        raise InputError(f"unknown PREPROCESS {name!r}; use one of {', '.join(PREPROCESS)}")
    return PREPROCESS[name]


def run_inputs(
    image: str | None,
    model: str | None,
    seed: int,
    shape: tuple[int, ...],
    preprocess: str | None,
    batch: int = 1,
) -> RunInputs:
    """The run's inputs for ``IMAGE=image`` (see the module docstring); ``batch`` > 1 (a
    model of fixed batch N, run as N programs): a .npy array holds N inputs, noise is N."""
    channels = shape[1] if len(shape) > 1 else 1
    if image is None and batch > 1:
        what = f"seeded noise (N(0, 1), seed [{seed}, 1]; no calibration input)"
        xs = list(noise_input((batch, *shape[1:]), seed)[:, None])
        names = [f"sample {i}" for i in range(batch)]
        return RunInputs(xs, names, {"source": what, "batch": batch})
    if image is None:
        split = zoo.held_out(model) if model is not None else None
        if split is not None:
            source = f"{model} held-out image 0 (label {int(split.y[0])})"
            return RunInputs([split.x[:1]], ["held-out 0"], {"source": source})
        what = f"seeded noise (N(0, 1), seed [{seed}, 1]; no calibration input)"
        return RunInputs([noise_input(shape, seed)], ["noise"], {"source": what})
    path = Path(image)
    if path.suffix == ".npy" and not path.is_dir():
        regular_file(path, "IMAGE", "array")
        try:
            x = np.load(path)
        except (OSError, ValueError, TypeError, EOFError) as exc:
            raise InputError(f"image {path} is not a readable .npy array: {exc}") from None
        report: dict[str, Any] = {"source": str(path), "preprocess": "none (.npy)"}
        if batch > 1:
            full = check_input(x, (batch, *shape[1:]), f"image {path}")
            names = [f"{path.name}[{i}]" for i in range(batch)]
            return RunInputs(list(full[:, None]), names, report | {"batch": batch})
        x = check_input(x, shape, f"image {path}")
        return RunInputs([x], [path.name], report)
    if path.is_dir():
        files = image_files(path)
    else:
        regular_file(path, "IMAGE", "image")
        if path.suffix.lower() not in IMAGE_SUFFIXES:
            raise InputError(
                f"image {path}: use a .npy array, an image "
                f"({', '.join(s[1:] for s in IMAGE_SUFFIXES)}) or a folder of images"
            )
        files = [path]
    how = preprocess_for(preprocess, model, channels)
    xs = [load_image(f, shape, how) for f in files]
    report = {"source": str(path), "files": len(files), "preprocess": how.describe()}
    return RunInputs(xs, [f.name for f in files], report)


@dataclass
class Calibration:
    """What compile_model calibrates with (None: its default), by which method, and the
    report's words for it (``count`` is filled in when a loader runs)."""

    inputs: Callable[[tuple[int, ...]], list[np.ndarray]] | None
    method: str
    report: dict[str, Any]


def calibration(
    path: str | None, method: str, model: str | None, preprocess: str | None, seed: int
) -> Calibration:
    """``CALIB=path`` and ``CALIB_METHOD=method`` (see the module docstring)."""
    try:
        parse_method(method)
    except CalibMethodError as exc:
        raise InputError(str(exc)) from None
    report: dict[str, Any] = {"method": method}
    if path is None:
        if model is not None and zoo.calibration(model) is not None:
            what = "text windows" if model == "chargpt" else "images"
            report["source"] = f"{model} training {what} (never the held-out ones)"
            report["count"] = len(zoo.calibration(model) or [])
        else:
            report["source"] = f"seeded noise (N(0, 1), seed {seed})"
            report["count"] = DEFAULT_COUNT  # until the model is known: seeded_calibration_words
        return Calibration(None, method, report)
    report["source"] = path

    def load(shape: tuple[int, ...]) -> list[np.ndarray]:
        channels = shape[1] if len(shape) > 1 else 1
        how = preprocess_for(preprocess, model, channels)
        xs = calibration_loader(Path(path), how)(shape)
        report["count"] = len(xs)
        if Path(path).is_dir():
            report["preprocess"] = how.describe()
        return xs

    calibration_loader(Path(path), PREPROCESS["none"])  # a missing or wrong path fails now
    return Calibration(load, method, report)


def seeded_calibration_words(
    calib: Calibration, source: onnx.ModelProto | None, tokens: bool, seed: int
) -> None:
    """The report's words for the default seeded calibration once the model is known: how many
    inputs it drew (:func:`compiler.calibrate.default_count`) and, for token inputs, which."""
    if calib.inputs is not None or "seeded" not in calib.report.get("source", ""):
        return
    count = calib.report["count"] = default_count(source)
    if tokens:
        calib.report["source"] = f"seeded token inputs (seeds {seed}..{seed + count - 1})"


def input_summary(inputs: dict[str, Any], calib: dict[str, Any] | None) -> str:
    """Two lines for the terminal: the input and its preprocessing; the calibration."""
    how = inputs.get("preprocess")
    how_text = how["name"] if isinstance(how, dict) else (how or "-")
    files = f" ({inputs['files']} images)" if inputs.get("files", 1) > 1 else ""
    text = f"input: {inputs['source']}{files}, preprocess: {how_text}"
    if calib is not None:
        text += (
            f"\ncalibration: {calib['method']} on {calib.get('count', '?')} inputs of "
            f"{calib['source']}"
        )
    return text

"""The compiler front end in one call: ONNX model -> verified, quantized IR graph."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

import numpy as np
import onnx

from arch.reference import dequantize, quantize_input

from .calibrate import Ranges, default_calibration
from .ir import Graph
from .onnx import import_prepared, prepare_model
from .onnx.prepare import OnnxModel
from .passes import run_front
from .placement import Placement, place

__all__ = ["compile_front", "compile_placed", "dequantize", "quantize_input"]

T = TypeVar("T")


def compile_front(
    model: str | Path | onnx.ModelProto,
    *,
    calibration: Sequence[np.ndarray] | None = None,
    seed: int = 0,
    host: Mapping[int, str] | None = None,
    calib_method: str = "minmax",
    norm_unit: bool = False,
) -> Graph:
    """Import ``model`` and run the front-end passes (canonicalize, quantize).

    Parameters
    ----------
    model
        ONNX file path or proto (not modified).
    calibration
        Float inputs for calibration; default :func:`compiler.calibrate.default_calibration`
        with ``seed``.
    seed
        Seed of the default calibration inputs.
    host
        ONNX node indices that go to the host whatever their op, with the reason.
    calib_method
        How activation ranges are chosen: minmax, percentile[:P], entropy or mse
        (:mod:`compiler.calib_methods`).
    norm_unit
        The target config has the norm unit: LayerNorm becomes an IR op the back end lowers
        to NORM (else it runs on the host).

    Raises
    ------
    CompileError
        Anything unsupported or malformed, in one line naming the node, op and reason (a node
        the accelerator cannot run goes to the host instead: :mod:`compiler.placement`).
    """
    graph, _ = compile_placed(
        model,
        calibration=calibration,
        seed=seed,
        host=host,
        calib_method=calib_method,
        norm_unit=norm_unit,
    )
    return graph


@dataclass
class _Attempts(Generic[T]):
    """One model's compile attempts (:func:`compiler.placement.place`) and what they share:
    the prepared model, the calibration inputs and the ranges measured on them."""

    prepared: OnnxModel
    back: Callable[[Graph], T] | None
    calibration: Sequence[np.ndarray] | None
    seed: int
    calib_method: str
    norm_unit: bool = False
    ranges: Ranges = field(default_factory=Ranges)

    def run(self, placement: Placement) -> tuple[Graph, T | None]:
        graph = placement.graph = import_prepared(self.prepared, placement.forced, self.norm_unit)
        if self.calibration is None:
            self.calibration = default_calibration(graph, seed=self.seed)
        graph = placement.graph = run_front(graph, self.calibration, self.calib_method, self.ranges)
        return graph, (self.back(graph) if self.back is not None else None)


def compile_placed(
    model: str | Path | onnx.ModelProto,
    *,
    calibration: Sequence[np.ndarray] | None = None,
    seed: int = 0,
    host: Mapping[int, str] | None = None,
    calib_method: str = "minmax",
    back: Callable[[Graph], T] | None = None,
    norm_unit: bool = False,
) -> tuple[Graph, T | None]:
    """:func:`compile_front`, then ``back`` (if given) of the quantized graph - with the ONNX
    nodes ``host`` and every node refused on the way (by the import, the front-end passes or
    ``back``: :class:`~compiler.errors.Unplaceable`) on the host. The model is prepared once
    and each tensor calibrated once, however many nodes go to the host one by one."""
    attempts = _Attempts(prepare_model(model), back, calibration, seed, calib_method, norm_unit)
    return place(attempts.run, host)

"""The compiler front end in one call: ONNX model -> verified, quantized IR graph."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from arch.reference import dequantize, quantize_input

from .calibrate import default_calibration
from .errors import CompileError
from .ir import Graph
from .onnx import load_onnx
from .passes import run_front

__all__ = ["compile_front", "dequantize", "quantize_input"]


def compile_front(
    model: str | Path | onnx.ModelProto,
    *,
    calibration: Sequence[np.ndarray] | None = None,
    seed: int = 0,
    host: Mapping[int, str] | None = None,
    calib_method: str = "minmax",
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

    Raises
    ------
    CompileError
        Anything unsupported or malformed, in one line naming the node, op and reason.
    """
    forced: dict[int, str] = dict(host or {})
    while True:
        graph = load_onnx(model, host=forced)
        if calibration is None:
            calibration = default_calibration(graph, seed=seed)
        try:
            return run_front(graph, calibration, calib_method)
        except CompileError as exc:
            # A node the front end cannot fold into an accelerator layer (a Relu after a host
            # node, say) goes to the host too, and the model is imported again.
            index = graph.origins.get(exc.node) if exc.node is not None else None
            if index is None or index in forced:
                raise
            forced[index] = exc.reason + (f" (supported: {exc.supported})" if exc.supported else "")

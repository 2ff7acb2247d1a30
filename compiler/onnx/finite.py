"""Constants of an ONNX model must be numbers: a NaN or infinite weight, bias or scale would
quantize to garbage and run without a word (the fp32 comparison then reads ``cosine nan``).

NaN is refused in any float constant. Infinity is refused where it would be a weight: in the
non-data inputs of the ops with weights (a ``-inf`` attention mask or a ``Clip`` bound stays
allowed, for the host to run). A finite weight too large for its int8 scale (largest magnitude
/ 127) to be a usable scale is refused too, naming it and its largest magnitude (a weight of
3e38 once surfaced as ``tensor 'y' has a bad scale inf``: its product overflowed float32).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import CompileError
from .qdq_params import SCALE_MAX

__all__ = ["check_finite_constants"]

#: Ops whose second input is a weight quantized to int8 codes with scale (largest magnitude) / 127.
INT8_WEIGHT_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
#: The largest weight magnitude whose int8 scale is usable (:data:`qdq_params.SCALE_MAX`).
WEIGHT_MAX = 127 * SCALE_MAX

#: Ops whose inputs after the first are weights, biases or normalisation parameters.
WEIGHTED_OPS = frozenset(
    {"Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization", "InstanceNormalization"}
    | {"LayerNormalization", "QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul"}
)


def _constants(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Initializers and ``Constant`` node values of ``graph``, by name."""
    found = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for attr in node.attribute:
                if attr.name == "value" and attr.HasField("t"):
                    found[node.output[0]] = numpy_helper.to_array(attr.t)
    return found


def _first_bad(values: np.ndarray, bad: np.ndarray) -> str:
    count = int(np.count_nonzero(bad))
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"{count} of its {values.size} values (first {values[index]} at index {list(index)})"


def check_finite_constants(proto: onnx.ModelProto) -> None:
    """Raise :class:`CompileError` naming the first constant that holds NaN, or infinity where
    it is a weight, and how many such values it has."""
    consts = _constants(proto.graph)
    floats = {k: v for k, v in consts.items() if v.dtype.kind in "fc"}
    for name, values in floats.items():
        nan = np.isnan(values)
        if nan.any():
            raise CompileError(
                name, "constant", f"is NaN in {_first_bad(values, nan)}", "finite weights"
            )
    for node in proto.graph.node:
        if node.op_type not in WEIGHTED_OPS:
            continue
        for name in node.input[1:]:
            weight = floats.get(name)
            if weight is not None and not np.isfinite(weight).all():
                raise CompileError(
                    node.name or node.op_type,
                    node.op_type,
                    f"input '{name}' is infinite in {_first_bad(weight, ~np.isfinite(weight))}",
                    "finite weights, biases and scales",
                )
    _check_weight_magnitudes(proto, floats)


def _check_weight_magnitudes(proto: onnx.ModelProto, floats: dict[str, np.ndarray]) -> None:
    """Raise :class:`CompileError` naming the first weight of an int8-weight op whose largest
    magnitude exceeds :data:`WEIGHT_MAX` (its int8 scale would not be usable)."""
    for node in proto.graph.node:
        if node.op_type not in INT8_WEIGHT_OPS or len(node.input) < 2:
            continue
        weight = floats.get(node.input[1])
        if weight is None or weight.size == 0:
            continue
        magnitude = np.abs(weight.astype(np.float64))
        largest = float(magnitude.max())
        if largest > WEIGHT_MAX:
            index = [int(i) for i in np.unravel_index(int(magnitude.argmax()), weight.shape)]
            raise CompileError(
                node.name or node.op_type,
                node.op_type,
                f"initializer '{node.input[1]}' has largest magnitude {largest:.3g} (at index "
                f"{index}): its int8 scale {largest / 127:.3g} is beyond the usable "
                f"{SCALE_MAX:.3g}",
                f"finite weights of magnitude up to {WEIGHT_MAX:.3g}",
            )

"""Constants of an ONNX model must be numbers: a NaN or infinite weight, bias or scale would
quantize to garbage and run without a word (the fp32 comparison then reads ``cosine nan``).

NaN is refused in any float constant. Infinity is refused where it would be a weight: in the
non-data inputs of the ops with weights (a ``-inf`` attention mask or a ``Clip`` bound stays
allowed, for the host to run).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import CompileError

__all__ = ["check_finite_constants"]

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

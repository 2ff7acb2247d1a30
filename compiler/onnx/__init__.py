"""The ONNX front end: ONNX -> fp32-stage IR, one handler per ONNX op, shapes fixed to batch 1.

- :mod:`.prepare` - the ONNX-level passes (:data:`~.prepare.ONNX_PASSES`): read, check,
  rewrite (:mod:`.qoperator`, :mod:`.token_canon`, :mod:`.gelu_pattern`), infer shapes.
- :mod:`.importer` - :func:`load_onnx`: each node folded, imported by its handler, or placed
  on the host; :mod:`.state` - the one import state and its rollback.
- handlers by family, registered in :mod:`.registry`: :mod:`.conv`, :mod:`.matmul`,
  :mod:`.elementwise`, :mod:`.pools`, :mod:`.layout`, :mod:`.attention`, :mod:`.quantized`;
  their helpers in :mod:`.read`, :mod:`.qdq_params`, :mod:`.windows`.
- :mod:`.host_regions` forms the host nodes, holding ONNX models (:mod:`.host_models`).

Partitioning starts here: a node without a handler, or one its handler refuses, goes to the host
(the reason is kept in ``Graph.host_reasons``); consecutive host nodes become one ``host`` IR
node per value read outside them. Nodes whose inputs are all constants, and ``Shape`` of an
activation, are folded at compile time. Only what onnxruntime cannot run either is refused -
every such node named in one error.

The imported graph keeps ONNX-level ops that canonicalize folds (``batchnorm``, ``relu``,
``relu6``, ``matmul``, ``bias_add``, ``sum``, ``identity``, ``reshape``; see
:data:`compiler.ir.IMPORT_OPS`). Every IR tensor is named after the ONNX tensor that holds its
real (fp32) value in the original model, so calibration can read it from onnxruntime.

Already-quantized models: QuantizeLinear/DequantizeLinear on activations are not nodes but
record ``Tensor.scale`` and ``Tensor.zero_point`` (an int8 zero point as it is; uint8 codes u are
the int8 codes u - 128, so a uint8 zero point z is z - 128); a DequantizeLinear of an int8/int32
initializer gives the float value plus ``weight_q``/``weight_scale`` (``bias_q``) params (a
weight with a zero point as the int8 ``q - z`` when that fits); QLinearConv/QLinearMatMul become
conv/matmul with those params and a scaled output; ConvInteger/MatMulInteger must be followed by
``Cast(to=FLOAT)`` and ``Mul`` by the (input x weight) scale, which sets the weight scale.
onnxruntime's ``com.microsoft`` QLinear ops are rewritten to QDQ first (:mod:`.qoperator`).
"""

from __future__ import annotations

# The handler modules register their ops on import.
from . import attention, conv, elementwise, layout, matmul, norms, pools, quantized  # noqa: F401
from .importer import import_prepared, load_onnx, prepare_model
from .prepare import MAX_OPSET, MIN_OPSET
from .registry import HANDLERS

__all__ = [
    "MAX_OPSET",
    "MIN_OPSET",
    "SUPPORTED_OPS",
    "import_prepared",
    "load_onnx",
    "prepare_model",
]

#: The ONNX ops the front end accepts: the handlers' keys.
SUPPORTED_OPS: tuple[str, ...] = tuple(sorted(HANDLERS))

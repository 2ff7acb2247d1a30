"""Host fallback: ONNX nodes the accelerator does not run, kept as small ONNX models.

The importer marks every node it cannot map (an op without a handler, or one its handler
refuses) for the host; consecutive host nodes form a *region*, which becomes one ONNX model with
the region's activation inputs as graph inputs, the constants it reads as initializers, and the
values read outside it as graph outputs. onnxruntime runs it in fp32 (:mod:`arch.host_runtime`).
Nodes whose inputs are all constants are folded at compile time with the same machinery.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from arch import host_runtime
from arch.host_runtime import HostModelError

#: The IR version of host models: what the pinned onnxruntime reads, whatever the source used.
HOST_IR_VERSION = host_runtime.IR_VERSION
_MAC_OPS = {"Conv", "ConvTranspose", "MatMul", "Gemm", "ConvInteger", "MatMulInteger"}
#: Ops never computed at compile time, whatever their inputs. Quantize/DequantizeLinear: the
#: importer reads their integer codes as a quantized weight, and one its handler refuses (uint8
#: codes beyond int8 after the zero point) goes to the host with its reason - folded to float, the
#: weight would be quantized again as int8 and run on the array. Random ops: new values per run.
NEVER_FOLDED = frozenset(
    {
        "QuantizeLinear",
        "DequantizeLinear",
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
    }
)


def _value_info(name: str, elem: int, shape: Sequence[int] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, list(shape) if shape is not None else None)


def make_model(
    source: onnx.ModelProto,
    nodes: Sequence[onnx.NodeProto],
    feeds: Sequence[tuple[str, Sequence[int] | None]],
    fetches: Sequence[tuple[str, int, Sequence[int] | None]],
    consts: dict[str, np.ndarray],
) -> bytes:
    """A model of ``nodes``: fp32 inputs ``feeds`` (name, shape), outputs ``fetches`` (name,
    element type, shape), the constants they read as initializers; opsets as the source's."""
    read = {name for node in nodes for name in node.input if name}
    graph = helper.make_graph(
        list(nodes),
        "host",
        [_value_info(name, TensorProto.FLOAT, shape) for name, shape in feeds],
        [_value_info(name, elem, shape) for name, elem, shape in fetches],
        initializer=[
            numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items() if k in read
        ],
    )
    model = helper.make_model(graph, opset_imports=list(source.opset_import))
    model.ir_version = min(source.ir_version or HOST_IR_VERSION, HOST_IR_VERSION)
    return model.SerializeToString()


def check(model: bytes) -> None:
    """Raise :class:`arch.host_runtime.HostModelError` if onnxruntime cannot load ``model``."""
    host_runtime.session(model)


def fold_constants(
    source: onnx.ModelProto, node: onnx.NodeProto, consts: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The outputs of a node whose inputs are all constants, computed now: by ONNX's own
    reference evaluator (shape arithmetic: Gather, Unsqueeze, Concat of shapes, ...), else by
    onnxruntime (the evaluator refuses some valid nodes, e.g. GatherElements on axis -1).
    :class:`HostModelError` for an op of :data:`NEVER_FOLDED`."""
    if node.op_type in NEVER_FOLDED:
        raise HostModelError(f"{node.op_type} is never folded (its values are not constants)")
    outputs = [o for o in node.output if o]
    graph = helper.make_graph(
        [node],
        "fold",
        [],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        initializer=[numpy_helper.from_array(np.asarray(consts[i]), i) for i in node.input if i],
    )
    model = helper.make_model(graph, opset_imports=list(source.opset_import))
    model.ir_version = HOST_IR_VERSION
    try:
        values = ReferenceEvaluator(model).run(None, {})
    except Exception as exc:  # the evaluator raises whatever the op's implementation raises
        values = _fold_on_onnxruntime(model, outputs, exc)
    return {name: np.asarray(value) for name, value in zip(outputs, values, strict=True)}


def _fold_on_onnxruntime(
    model: onnx.ModelProto, outputs: list[str], first_error: Exception
) -> list[np.ndarray]:
    """``model``'s outputs by onnxruntime; :class:`HostModelError` naming both failures."""
    try:
        typed = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        sess = host_runtime.session(typed.SerializeToString())
        quiet = ort.RunOptions()
        quiet.log_severity_level = 4  # the error is raised, not logged
        return list(sess.run(outputs, {}, quiet))
    except Exception as exc:  # onnx's InferenceError, HostModelError, onnxruntime's own
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        why = why.split("Status Message: ")[-1][-160:]  # the kernel's own words
        raise HostModelError(f"cannot fold it: {first_error}; onnxruntime: {why}") from None


def count_macs(
    nodes: Iterable[onnx.NodeProto],
    shapes: dict[str, tuple[int, ...]],
    consts: dict[str, np.ndarray],
) -> int:
    """Multiply-accumulates of the convolutions and matrix products among ``nodes`` (for the
    report's accelerator MAC fraction), from their output shapes and weight shapes."""
    total = 0
    for node in nodes:
        if node.op_type not in _MAC_OPS or len(node.input) < 2:
            continue
        out = shapes.get(node.output[0])
        w = consts.get(node.input[1])
        w_shape = tuple(w.shape) if w is not None else shapes.get(node.input[1])
        if out is None or w_shape is None:
            continue
        if node.op_type in ("MatMul", "MatMulInteger"):
            total += math.prod(out) * int(w_shape[-2])
        elif node.op_type == "Gemm":
            trans_b = any(a.name == "transB" and a.i for a in node.attribute)
            total += math.prod(out) * int(w_shape[1] if trans_b else w_shape[0])
        elif node.op_type == "ConvTranspose":
            x = shapes.get(node.input[0])
            total += math.prod(x) * math.prod(w_shape[1:]) if x else 0
        else:  # Conv: every output value sums C/group * kh * kw products
            total += math.prod(out) * math.prod(w_shape[1:])
    return int(total)

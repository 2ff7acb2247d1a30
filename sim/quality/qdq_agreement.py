"""Per-layer agreement with onnxruntime's own execution of a QDQ model: each layer of our
quantized graph gets the SAME int8 inputs on both sides - its input codes from our integer
reference - and onnxruntime runs just that layer's piece of the QDQ graph (DequantizeLinear,
the float ops, QuantizeLinear; cut out with ``onnx.utils.Extractor``). The fraction of equal
output codes isolates each layer's rounding from the errors earlier layers pass on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from arch import host_runtime
from arch.reference import RefGraph, evaluate, quantize_input, zero_point

__all__ = ["agreement_report", "layer_agreement", "quantized_tensors"]


def quantized_tensors(model: onnx.ModelProto) -> dict[str, tuple[str, bool]]:
    """Float tensor -> (its QuantizeLinear output, whether the codes are uint8) of a QDQ
    model; empty for a float model."""
    inits = {t.name: t for t in model.graph.initializer}
    out = {}
    for node in model.graph.node:
        if node.op_type != "QuantizeLinear":
            continue
        zp = inits.get(node.input[2]) if len(node.input) > 2 else None
        uint8 = zp is None or numpy_helper.to_array(zp).dtype == np.uint8
        out[node.input[0]] = (node.output[0], uint8)
    return out


def _piece(model: onnx.ModelProto, inputs: list[str], output: str) -> ort.InferenceSession | None:
    try:
        sub = onnx.utils.Extractor(model).extract_model(inputs, [output])
        host_runtime.readable(sub)
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        return ort.InferenceSession(
            sub.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
    except Exception:  # a piece that needs more than the layer's inputs: not comparable
        return None


def layer_agreement(
    qdq_model: onnx.ModelProto, graph: RefGraph, inputs: Sequence[np.ndarray]
) -> list[dict[str, Any]]:
    """``[{"layer", "op", "tensor", "equal", "max_code_diff", "count"}]`` over fp32 ``inputs``
    for every node of ``graph`` (an executable's reference graph of ``qdq_model``) whose inputs
    and output the QDQ model quantizes."""
    model = onnx.shape_inference.infer_shapes(qdq_model)
    quant = quantized_tensors(model)
    x_name = graph.inputs[0]
    pieces = []
    for node in graph.nodes:
        names = [*node.inputs, node.output]
        if not all(n in quant for n in names):
            continue
        session = _piece(model, [quant[n][0] for n in node.inputs], quant[node.output][0])
        if session is not None:
            pieces.append((node, session))
    totals: dict[str, list[int]] = {node.output: [0, 0, 0] for node, _ in pieces}
    for x in inputs:
        t = graph.tensors[x_name]
        ours = evaluate(graph, quantize_input(x, t.scale or 1.0, zero_point(graph, x_name)))
        for node, session in pieces:
            feed = {}
            for name, arg in zip(node.inputs, session.get_inputs(), strict=True):
                codes = ours[name].astype(np.int16) + (128 if quant[name][1] else 0)
                dtype = np.uint8 if quant[name][1] else np.int8
                feed[arg.name] = codes.reshape(_shape(arg.shape, codes.shape)).astype(dtype)
            (theirs,) = session.run(None, feed)
            shift = 128 if quant[node.output][1] else 0
            want = theirs.astype(np.int64).reshape(-1) - shift
            diff = np.abs(ours[node.output].astype(np.int64).reshape(-1) - want)
            total = totals[node.output]
            total[0] += int(np.sum(diff == 0))
            total[1] += int(diff.size)
            total[2] = max(total[2], int(diff.max()) if diff.size else 0)
    return [
        {
            "layer": node.name,
            "op": node.op,
            "tensor": node.output,
            "equal": totals[node.output][0] / max(totals[node.output][1], 1),
            "max_code_diff": totals[node.output][2],
            "count": totals[node.output][1],
        }
        for node, _ in pieces
    ]


def _shape(wanted: Sequence[Any], have: tuple[int, ...]) -> tuple[int, ...]:
    """The ONNX input's shape where it is static and holds as many elements, else ``have``."""
    dims = tuple(d if isinstance(d, int) else -1 for d in wanted)
    if -1 in dims or int(np.prod(dims)) != int(np.prod(have)):
        return have
    return dims


def agreement_report(
    qdq_model: onnx.ModelProto, graph: RefGraph, inputs: Sequence[np.ndarray]
) -> dict[str, Any] | None:
    """``report.json``'s ``accuracy.ort_agreement`` for a QDQ model (None for a float one):
    the element-weighted fraction of equal codes over all compared layers, the worst layer and
    every layer (:func:`layer_agreement`)."""
    if not quantized_tensors(qdq_model):
        return None
    layers = layer_agreement(qdq_model, graph, inputs)
    if not layers:
        return None
    return summary(layers)


def summary(layers: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-layer agreements (``count``, ``equal``, ``max_code_diff``) as one: the
    element-weighted share of equal codes, the worst layer, the largest difference, the layers."""
    count = sum(e["count"] for e in layers)
    worst = min(layers, key=lambda e: e["equal"])
    return {
        "equal": sum(e["equal"] * e["count"] for e in layers) / count,
        "worst_layer": worst["layer"],
        "worst_equal": worst["equal"],
        "max_code_diff": max(e["max_code_diff"] for e in layers),
        "layers": layers,
    }

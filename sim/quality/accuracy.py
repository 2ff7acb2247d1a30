"""Quantization quality: the integer reference against fp32 onnxruntime on the original model."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from arch.reference import RefGraph, dequantize, quantize_input, reuse_or_evaluate, zero_point
from compiler.calibrate import as_shape, run_onnx
from compiler.errors import CompileError

__all__ = ["compare_fp32"]


def compare_fp32(
    onnx_model: onnx.ModelProto | str | Path,
    graph: RefGraph,
    x_fp32: np.ndarray,
    known: Mapping[str, np.ndarray] | None = None,
) -> dict[str, Any]:
    """Compare the quantized ``graph`` (the compiler's IR or an executable's reference graph)
    with fp32 onnxruntime on ``onnx_model`` for input ``x``. ``known``: every tensor of
    ``graph`` already evaluated (a run's reference), used if its input is ``x`` quantized.

    Every graph output is compared; one a host softmax produces is compared at its input (the
    logits). Tensors are matched by name; if ``onnx_model`` has no tensor of that name (say,
    the fp32 original of a QDQ model), the model's outputs are compared in order.

    Returns
    -------
    dict
        ``outputs``: per graph output ``cosine_vs_fp32`` (float: cosine of the dequantized int8
        output and the fp32 output), ``top1_agree_fp32`` (bool: same argmax), ``max_abs_err``
        (float) and ``tensor`` (the compared tensor's name); and the same keys over all of
        them: the lowest cosine, whether every top-1 agrees, the largest error, and the tensor
        of the lowest cosine.
    """
    if not graph.quantized:
        raise CompileError(None, "accuracy", "the graph is not quantized", "quantized graphs")
    proto = onnx.load(str(onnx_model)) if isinstance(onnx_model, str | Path) else onnx_model
    x = np.asarray(x_fp32, np.float32)
    q = quantize_input(
        as_shape(x, graph.tensors[graph.inputs[0]].shape),
        _scale(graph, graph.inputs[0]),
        zero_point(graph, graph.inputs[0]),
    )
    values = reuse_or_evaluate(graph, q, known)
    onnx_names = {o for n in proto.graph.node for o in n.output}
    names = [_compared_name(graph, out) for out in graph.outputs]
    if all(name in onnx_names for name in names):
        fp32 = run_onnx(proto, x, names)
        pairs = [(name, fp32[name]) for name in names]
    else:  # another model (e.g. the fp32 original of a QDQ model): its outputs in order
        fp32 = run_onnx(proto, x)
        pairs = [
            (name, fp32[out.name])
            for name, out in zip(graph.outputs, proto.graph.output, strict=False)
        ]
    outputs = [_measure(graph, name, values[name], ref) for name, ref in pairs]
    worst = min(
        outputs,
        key=lambda o: -2.0 if math.isnan(o["cosine_vs_fp32"]) else o["cosine_vs_fp32"],
    )
    return {
        "cosine_vs_fp32": worst["cosine_vs_fp32"],
        "top1_agree_fp32": all(o["top1_agree_fp32"] for o in outputs),
        "max_abs_err": max(o["max_abs_err"] for o in outputs),
        "tensor": worst["tensor"],
        "outputs": outputs,
    }


def _compared_name(graph: RefGraph, output: str) -> str:
    """``output``, or a host softmax's input (the logits) if one produces it."""
    producer = next((node for node in graph.nodes if node.output == output), None)
    if producer is not None and producer.op == "softmax":
        return producer.inputs[0]
    return output


def _measure(
    graph: RefGraph, name: str, codes: np.ndarray, reference: np.ndarray
) -> dict[str, Any]:
    """Cosine, top-1 agreement and largest error of tensor ``name`` against fp32."""
    ours = codes.astype(np.float64)
    if graph.tensors[name].scale is not None:
        ours = dequantize(codes, _scale(graph, name), zero_point(graph, name)).astype(np.float64)
    ref = reference.astype(np.float64).reshape(-1)
    ours = ours.reshape(-1)
    denom = float(np.linalg.norm(ours) * np.linalg.norm(ref))
    cosine = float(np.dot(ours, ref) / denom) if denom > 0 else float("nan")
    return {
        "cosine_vs_fp32": cosine,
        "top1_agree_fp32": bool(np.argmax(ours) == np.argmax(ref)),
        "max_abs_err": float(np.max(np.abs(ours - ref))),
        "tensor": name,
    }


def _scale(graph: RefGraph, name: str) -> float:
    scale = graph.tensors[name].scale
    assert scale is not None  # verified: every tensor but softmax outputs has a scale
    return scale

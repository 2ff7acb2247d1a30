"""Quantization quality: the integer reference against fp32 onnxruntime on the original model."""

from __future__ import annotations

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

    The first graph output is compared; if a host softmax produces it, its input (the logits)
    is compared instead. Tensors are matched by name; if ``onnx_model`` has no tensor of that
    name (say, the fp32 original of a QDQ model), its first output is compared with the
    graph's first output.

    Returns
    -------
    dict
        ``cosine_vs_fp32`` (float: cosine of the dequantized int8 output and the fp32 output),
        ``top1_agree_fp32`` (bool: same argmax), ``max_abs_err`` (float), and ``tensor`` (the
        compared tensor's name).
    """
    if not graph.quantized:
        raise CompileError(None, "accuracy", "the graph is not quantized", "quantized graphs")
    proto = onnx.load(str(onnx_model)) if isinstance(onnx_model, str | Path) else onnx_model
    name = graph.outputs[0]
    producer = next((node for node in graph.nodes if node.output == name), None)
    if producer is not None and producer.op == "softmax":
        name = producer.inputs[0]
    x = np.asarray(x_fp32, np.float32)
    q = quantize_input(
        as_shape(x, graph.tensors[graph.inputs[0]].shape),
        _scale(graph, graph.inputs[0]),
        zero_point(graph, graph.inputs[0]),
    )
    values = reuse_or_evaluate(graph, q, known)
    if name in {o for n in proto.graph.node for o in n.output}:
        reference = run_onnx(proto, x, [name])[name]
    else:  # another model (e.g. the fp32 original of a QDQ model): its first output
        name = graph.outputs[0]
        reference = run_onnx(proto, x)[proto.graph.output[0].name]
    ours = values[name].astype(np.float64)
    if graph.tensors[name].scale is not None:
        real = dequantize(values[name], _scale(graph, name), zero_point(graph, name))
        ours = real.astype(np.float64)
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

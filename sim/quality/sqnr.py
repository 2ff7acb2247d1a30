"""Per-layer quantization error: each layer's dequantized int8 output (integer reference) against
the same tensor of fp32 onnxruntime on the original model, as SQNR in dB
``10 log10(sum(ref**2) / sum((ref - int8)**2))`` summed over the inputs - so a user sees which
layer loses accuracy. Layers whose output the ONNX model does not have (by name and size) are
left out; an exact layer has SQNR infinity (``null`` in report.json). An already-quantized
(QDQ) model has no fp32 tensors to compare with (its float tensors are the values before a
QuantizeLinear that may clamp them, as a fused Relu): none are given; its int8 layers are
compared with onnxruntime's own QDQ execution instead (:mod:`sim.quality.qdq_agreement`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from arch.reference import RefGraph, dequantize, quantize_input, reuse_or_evaluate, zero_point
from compiler.calibrate import as_shape, open_session, run_session

__all__ = ["layer_sqnr"]


def layer_sqnr(
    onnx_model: onnx.ModelProto | str | Path,
    graph: RefGraph,
    inputs: Sequence[np.ndarray],
    known: Mapping[str, np.ndarray] | None = None,
) -> list[dict[str, Any]]:
    """``[{"layer", "op", "tensor", "sqnr_db"}]`` in graph order over fp32 ``inputs``.
    ``known``: every tensor of ``graph`` already evaluated (a run's reference), used for the
    input it was evaluated on."""
    proto = onnx.load(str(onnx_model)) if isinstance(onnx_model, str | Path) else onnx_model
    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in proto.graph.node):
        return []
    onnx_names = {o for n in proto.graph.node for o in n.output}
    nodes = [
        n
        for n in graph.nodes
        if n.output in onnx_names and graph.tensors[n.output].scale is not None
    ]
    if not nodes:
        return []
    names = [n.output for n in nodes]
    session = open_session(proto, names)
    signal = dict.fromkeys(names, 0.0)
    noise = dict.fromkeys(names, 0.0)
    sized = dict.fromkeys(names, True)
    x_name = graph.inputs[0]
    x_scale = graph.tensors[x_name].scale or 1.0
    for x in inputs:
        x = np.asarray(x, np.float32)
        q = quantize_input(
            as_shape(x, graph.tensors[x_name].shape), x_scale, zero_point(graph, x_name)
        )
        ours = reuse_or_evaluate(graph, q, known)
        ref = run_session(session, names, x)
        for name in names:
            want = ref[name].astype(np.float64).reshape(-1)
            scale = graph.tensors[name].scale
            assert scale is not None
            got = dequantize(ours[name], scale, zero_point(graph, name)).astype(np.float64)
            if got.size != want.size:
                sized[name] = False
                continue
            signal[name] += float(np.sum(want**2))
            noise[name] += float(np.sum((want - got.reshape(-1)) ** 2))
    out = []
    for node in nodes:
        name = node.output
        if not sized[name]:
            continue
        if noise[name] == 0:
            db = math.inf
        elif signal[name] == 0:
            db = -math.inf
        else:
            db = 10.0 * math.log10(signal[name] / noise[name])
        out.append({"layer": node.name, "op": node.op, "tensor": name, "sqnr_db": round(db, 2)})
    return out

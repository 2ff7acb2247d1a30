"""Constant subgraphs folded into initializers before shape inference.

Exporters leave arithmetic on constants in the graph - the TorchScript exporter's position and
token-type ids (ConstantOfShape, Where, Expand of a buffer) - and ONNX shape inference cannot see
through a shape that a node computes, so every value after it would have no static shape. Every
node of the default domain whose inputs are all constants is computed here
(:func:`compiler.onnx.host_models.fold_constants`) and becomes an initializer. Not folded:
:data:`~compiler.onnx.host_models.NEVER_FOLDED` (Quantize/DequantizeLinear, whose integer weights
the importer reads as such, and random ops) and Constant nodes themselves (the importer reads them).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from arch.host_runtime import HostModelError

from . import host_models

__all__ = ["fold_constant_nodes"]


def fold_constant_nodes(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each node whose inputs are all constants replaced by initializers of its
    outputs (a node neither evaluator computes stays, for the importer to name)."""
    graph = model.graph
    consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    kept, folded = [], {}
    for node in graph.node:
        inputs = [i for i in node.input if i]
        foldable = (
            node.domain in ("", "ai.onnx")
            and node.op_type not in host_models.NEVER_FOLDED
            and node.op_type != "Constant"
            and inputs
            and all(i in consts for i in inputs)
        )
        if node.op_type == "Constant" and not _sparse(node):  # kept, its value known
            consts.update(host_models.fold_constants(model, node, consts))
        if not foldable:
            kept.append(node)
            continue
        try:
            values = host_models.fold_constants(model, node, consts)
        except HostModelError:
            kept.append(node)
            continue
        consts.update(values)
        folded.update(values)
    if not folded:
        return model
    read = {i for n in kept for i in n.input} | {o.name for o in graph.output}
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(
        numpy_helper.from_array(np.asarray(v), k) for k, v in folded.items() if k in read
    )
    return model


def _sparse(node: onnx.NodeProto) -> bool:
    return any(a.name == "sparse_value" for a in node.attribute)

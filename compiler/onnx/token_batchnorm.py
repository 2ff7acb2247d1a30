"""BatchNorm1d over tokens, as timm's LeViT-style blocks export it, rewritten as what it
computes (a step of :mod:`compiler.onnx.token_canon`).

``Transpose`` (0, 2, 1) of tokens (1, T, C) to (1, C, T), ``BatchNormalization`` over those C
channels, ``Transpose`` (0, 2, 1) back; or, as LeViT's ``Linear`` + ``BatchNorm1d`` exports,
``Flatten``/``Reshape`` to (T, C) and ``BatchNormalization`` (whose channels are then the
features; the flatten moves after it): one scale and one shift per feature of the tokens, a
``Mul`` by ``k = gamma / sqrt(var + epsilon)`` and an ``Add`` of ``beta - mean * k`` on the
last axis. The importer folds both into the linear layer before them (else the host runs
them).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from .onnx_graph import RewriteGraph
from .token_moves import token_shape

__all__ = ["batchnorm_on_tokens"]

_SWAP = [0, 2, 1]


def _swap(node: onnx.NodeProto) -> bool:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return node.op_type == "Transpose" and list(attrs.get("perm", ())) == _SWAP


def _flattens(g: RewriteGraph, before: onnx.NodeProto) -> bool:
    """``before`` flattens tokens (1, T, C) to (T, C), where BatchNormalization's channels are
    the tokens' features."""
    x = g.shapes.get(before.input[0], ())
    flat = g.shapes.get(before.output[0], ())
    return before.op_type in ("Flatten", "Reshape") and len(x) == 3 and tuple(flat) == (x[1], x[2])


def batchnorm_on_tokens(g: RewriteGraph) -> None:
    for bn in [n for n in g.nodes if n.op_type == "BatchNormalization"]:
        before = g.producer(bn.input[0])
        readers = g.readers(bn.output[0])
        if before is None or len(readers) != 1:
            continue
        after: onnx.NodeProto | None = readers[0]
        if _flattens(g, before):
            after = None  # the affine runs on the tokens, the flatten after it
        elif not (_swap(before) and after is not None and _swap(after)):
            continue
        x = before.input[0]
        if token_shape(g.shapes.get(x)) is None or len(g.shapes.get(x, ())) != 3:
            continue
        if len(g.readers(before.output[0])) != 1 or {before.output[0], bn.output[0]} & g.outputs:
            continue
        params = [g.consts.get(v) for v in bn.input[1:5]]
        attrs = {a.name: helper.get_attribute_value(a) for a in bn.attribute}
        if len(bn.output) > 1 and any(bn.output[1:]) or attrs.get("training_mode", 0):
            continue
        if any(p is None for p in params):
            continue
        gamma, beta, mean, var = (np.asarray(p, np.float64).reshape(-1) for p in params)
        k = gamma / np.sqrt(var + float(attrs.get("epsilon", 1e-5)))
        name = bn.name or bn.output[0]
        scaled, shifted = g.fresh(name), g.fresh(name)
        new = [
            g.node("Mul", [x, g.const(k.astype(np.float32), f"{name}/scale")], scaled, name),
            g.node(
                "Add",
                [scaled, g.const((beta - mean * k).astype(np.float32), f"{name}/shift")],
                after.output[0] if after is not None else shifted,
                g.fresh(name),
            ),
        ]
        if after is None:  # flatten the normalized tokens as the BatchNorm's output
            new.append(g.reshape(shifted, g.shapes[before.output[0]], bn.output[0], g.fresh(name)))
        else:
            g.nodes.remove(after)
        g.nodes.remove(before)
        g.replace(bn, new)

"""LayerNorm and RMSNorm as exporters write them, fused into one node each before import.

Below opset 17 ``torch.onnx.export`` (and others) write LayerNorm over the last axis as
``ReduceMean``, ``Sub``, ``Pow`` 2, ``ReduceMean``, ``Add`` eps, ``Sqrt``, ``Div``, then
optionally ``Mul`` by gamma and ``Add`` of beta (constants). Each such chain whose inner values
nothing else reads becomes one ``LayerNormalization`` (axis -1; onnxruntime runs it at any
opset), so the importer, calibration and host regions see one node, as for opset 17 models.
RMSNorm as exported - ``Pow`` 2, ``ReduceMean``, ``Add`` eps, ``Sqrt``, then ``Div`` of x (or
``Reciprocal`` and ``Mul`` by x), optionally ``Mul`` by gamma - becomes onnxruntime's
``SimplifiedLayerNormalization`` (the same function, default domain, any opset).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from .onnx_graph import RewriteGraph
from .read import attrs_of

__all__ = ["fuse_layer_norm"]

#: onnxruntime's RMSNorm node (default domain), which the importer maps to ``rms_norm``.
RMS_OP = "SimplifiedLayerNormalization"


def _scalar(g: RewriteGraph, name: str) -> float | None:
    value = g.consts.get(name)
    return float(value.reshape(())) if value is not None and value.size == 1 else None


def _last_axis_mean(g: RewriteGraph, node: onnx.NodeProto | None) -> str | None:
    """The input of a ReduceMean over the last axis only, keeping it; else None."""
    if node is None or node.op_type != "ReduceMean":
        return None
    attrs = attrs_of(node)
    axes = attrs.get("axes")
    if axes is None and len(node.input) > 1 and node.input[1] in g.consts:
        axes = g.consts[node.input[1]].reshape(-1).tolist()
    rank = len(g.shapes.get(node.input[0], ()))
    if not attrs.get("keepdims", 1) or axes is None or len(axes) != 1 or rank == 0:
        return None
    return node.input[0] if axes[0] in (-1, rank - 1) else None


def _only_read_by(g: RewriteGraph, name: str, nodes: list[onnx.NodeProto]) -> bool:
    readers = g.readers(name)
    return name not in g.outputs and all(any(r is n for n in nodes) for r in readers)


def _const_other(g: RewriteGraph, node: onnx.NodeProto | None, name: str) -> np.ndarray | None:
    """The constant other input of a two-input ``node`` reading ``name``."""
    if node is None or len(node.input) != 2 or name not in node.input:
        return None
    other = node.input[1] if node.input[0] == name else node.input[0]
    return g.consts.get(other)


def _divided(g: RewriteGraph, sqrt: onnx.NodeProto, x: str) -> list[onnx.NodeProto]:
    """The nodes that make ``x / sqrt``: a Div, or a Reciprocal and a Mul by ``x``."""
    div = g.only_reader(sqrt.output[0], "Div")
    if div is not None and div.input[0] == x:
        return [div]
    recip = g.only_reader(sqrt.output[0], "Reciprocal")
    mul = g.only_reader(recip.output[0], "Mul") if recip is not None else None
    if recip is None or mul is None or x not in mul.input:
        raise LookupError
    return [recip, mul]


def _affine(
    g: RewriteGraph, last: onnx.NodeProto, channels: int, rms: bool
) -> tuple[np.ndarray, np.ndarray, list[onnx.NodeProto]]:
    """gamma, beta and their Mul and Add after the normalized ``last`` (ones, zeros, none)."""
    gamma, beta = np.ones(channels, np.float32), np.zeros(channels, np.float32)
    nodes: list[onnx.NodeProto] = []
    mul = g.only_reader(last.output[0], "Mul")
    scale = _const_other(g, mul, last.output[0])
    if mul is not None and scale is not None and scale.size == channels:
        gamma = scale.reshape(-1).astype(np.float32)
        nodes.append(mul)
    add = None if rms else g.only_reader((nodes or [last])[-1].output[0], "Add")
    shift = _const_other(g, add, (nodes or [last])[-1].output[0])
    if add is not None and shift is not None and shift.size == channels:
        beta = shift.reshape(-1).astype(np.float32)
        nodes.append(add)
    return gamma, beta, nodes


def _match(g: RewriteGraph, sqrt: onnx.NodeProto) -> tuple[list[onnx.NodeProto], onnx.NodeProto]:
    """(the chain's nodes, its fused node) if ``sqrt`` is a decomposed LayerNorm's or
    RMSNorm's; LookupError otherwise."""
    add_eps = g.producer(sqrt.input[0])
    if add_eps is None or add_eps.op_type != "Add" or len(add_eps.input) != 2:
        raise LookupError
    var, eps_name = add_eps.input
    if _scalar(g, eps_name) is None:
        var, eps_name = eps_name, var
    eps = _scalar(g, eps_name)
    mean_sq = g.producer(var)
    squared = _last_axis_mean(g, mean_sq)
    power = g.producer(squared or "")
    if eps is None or squared is None or power is None or power.op_type != "Pow":
        raise LookupError
    if _scalar(g, power.input[1]) != 2.0:
        raise LookupError
    assert mean_sq is not None
    x = centred = power.input[0]
    sub = g.producer(centred)
    head: list[onnx.NodeProto] = []
    if sub is not None and sub.op_type == "Sub":
        mean_node = g.producer(sub.input[1])
        if _last_axis_mean(g, mean_node) == sub.input[0] and mean_node is not None:
            x, head = sub.input[0], [mean_node, sub]
    rms = not head
    divided = _divided(g, sqrt, centred)
    channels = g.shapes.get(x, (0,))[-1]
    gamma, beta, affine = _affine(g, divided[-1], channels, rms)
    chain = [*head, power, mean_sq, add_eps, sqrt, *divided, *affine]
    last = chain[-1]
    inner = [n.output[0] for n in chain if n is not last]
    if channels == 0 or not all(_only_read_by(g, v, chain) for v in inner):
        raise LookupError
    base = sqrt.name or ("rmsnorm" if rms else "layernorm")
    inputs = [x, g.const(gamma, f"{base}/gamma")]
    if not rms:
        inputs.append(g.const(beta, f"{base}/beta"))
    op = RMS_OP if rms else "LayerNormalization"
    name = sqrt.name or None
    fused = helper.make_node(op, inputs, [last.output[0]], name=name, axis=-1, epsilon=eps)
    return chain, fused


def fuse_layer_norm(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` with every decomposed LayerNorm chain replaced by one LayerNormalization
    (named after its Sqrt, writing the chain's output); unchanged if there is none."""
    view = RewriteGraph(proto)
    fused: dict[int, onnx.NodeProto] = {}
    dropped: set[int] = set()
    index = {id(n): i for i, n in enumerate(view.nodes)}
    for sqrt in [n for n in view.nodes if n.op_type == "Sqrt"]:
        try:
            chain, node = _match(view, sqrt)
        except LookupError:
            continue
        positions = [index[id(n)] for n in chain]
        if dropped & set(positions):
            continue
        fused[max(positions)] = node
        dropped.update(positions)
    if not fused:
        return proto
    view.nodes = [
        fused.get(i, n) for i, n in enumerate(view.nodes) if i in fused or i not in dropped
    ]
    return view.commit(keep_shapes=True)

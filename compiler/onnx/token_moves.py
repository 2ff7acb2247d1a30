"""Chains of data movement on tokens, replaced by what they are (step 3 of
:mod:`compiler.onnx.token_canon`).

A chain of Reshape/Transpose/Squeeze/Unsqueeze/Gather/Slice/Split/Identity/Flatten from tokens
(any shape whose axes but the last hold T > 1 tokens, the others 1) or from heads (1, H, T, d)
is evaluated on element indices (``arange`` pushed through the chain; a Split's parts are
chains of their own: timm's packed q, k, v). A chain that moves nothing
disappears; one that takes a channel slice, splits heads (also transposed: k^T) or merges them
becomes that Slice/Reshape/Transpose, the pattern :mod:`compiler.onnx.attention` maps. A chain
already in that form keeps its nodes (and the exporter's names).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from .onnx_graph import MOVES, RewriteGraph

__all__ = ["collapse_moves", "token_shape"]

_SPLIT, _TRANSPOSED = (0, 2, 1, 3), (0, 2, 3, 1)


def token_shape(shape: tuple[int, ...] | None) -> tuple[int, int] | None:
    """(T, K) if ``shape`` holds T > 1 tokens of K features (every other axis is 1)."""
    if shape is None or len(shape) < 2:
        return None
    lead = [d for d in shape[:-1] if d != 1]
    return (lead[0], shape[-1]) if len(lead) == 1 else None


def collapse_moves(g: RewriteGraph) -> None:
    sources = [i.name for i in g.proto.graph.input] + [
        o for n in g.nodes if n.op_type not in MOVES for o in n.output
    ]
    plans: list[tuple[str, str, list[onnx.NodeProto], np.ndarray]] = []
    for x in sources:
        shape = g.shapes.get(x)
        producer = g.producer(x)
        heads = len(shape or ()) == 4 and producer is not None and producer.op_type == "MatMul"
        if shape is None or not (token_shape(shape) or heads):
            continue  # neither tokens nor a product's heads (a CNN's maps are left alone)
        start = np.arange(int(np.prod(shape))).reshape(shape)
        stack: list[tuple[str, np.ndarray, list[onnx.NodeProto]]] = [(x, start, [])]
        while stack:
            value, idx, chain = stack.pop()
            for reader in g.readers(value):
                if reader.op_type not in MOVES or reader.input[0] != value:
                    continue
                for which, y in enumerate(reader.output):  # a Split has one per part
                    moved = _move(g, reader, idx, which)
                    if moved is None:
                        continue
                    path = [*chain, reader]
                    stack.append((y, moved, path))
                    ends = any(r.op_type not in MOVES for r in g.readers(y)) or y in g.outputs
                    if ends:
                        plans.append((x, y, path, moved))
    for x, y, path, idx in plans:
        new = _canonical_chain(g, x, y, g.shapes[x], idx, path[-1].name or y)
        if new is None or _signature(new) == _signature(path):
            continue  # already canonical: keep the exporter's node names
        producer = g.producer(y)
        if producer is None or len(producer.output) > 1:
            continue  # a Split's part read as it is (a packed projection's: step 4 splits it)
        if new == [] and y not in g.outputs:
            g.nodes.remove(producer)
            for reader in g.nodes:
                reader.input[:] = [x if i == y else i for i in reader.input]
        else:
            g.replace(producer, new or [g.node("Identity", [x], y, producer.name)])


def _signature(nodes: list[onnx.NodeProto]) -> list[tuple[str, list[int]]]:
    return [
        (n.op_type, [int(v) for a in n.attribute if a.name == "perm" for v in a.ints])
        for n in nodes
    ]


def _move(g: RewriteGraph, node: onnx.NodeProto, idx: np.ndarray, which: int = 0):
    """``idx`` moved as ``node`` moves its input to its output ``which``; None if its
    parameters are not constants."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    second = g.consts.get(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    op = node.op_type
    if op == "Identity":
        return idx
    if op == "Split":
        return _split_part(node, attrs, second, idx, which)
    if op == "Slice":
        return _slice(g, node, idx)
    if op == "Transpose":
        return idx.transpose(attrs.get("perm", list(range(idx.ndim))[::-1]))
    if op == "Flatten":
        axis = attrs.get("axis", 1) % (idx.ndim or 1)
        return idx.reshape(int(np.prod(idx.shape[:axis])), -1)
    if op == "Reshape" and second is not None:
        dims = [int(d) for d in second.reshape(-1)]
        if not attrs.get("allowzero", 0):
            dims = [idx.shape[i] if d == 0 else d for i, d in enumerate(dims)]
        try:
            return idx.reshape(dims)
        except ValueError:  # a target of another size: the importer names the node
            return None
    if op in ("Squeeze", "Unsqueeze"):
        axes = attrs.get("axes") if second is None else [int(a) for a in second.reshape(-1)]
        if op == "Squeeze":
            return np.squeeze(idx, tuple(axes) if axes else None)
        if axes is None:
            return None
        rank = idx.ndim + len(axes)
        return np.expand_dims(idx, tuple(sorted(a % rank for a in axes)))
    if op == "Gather" and second is not None and second.ndim == 0:
        axis = attrs.get("axis", 0)
        if not -idx.shape[axis] <= int(second) < idx.shape[axis]:
            return None  # out of range: the importer names it
        return np.take(idx, int(second), axis=axis)
    return None


def _split_part(
    node: onnx.NodeProto, attrs: dict, sizes: np.ndarray | None, idx: np.ndarray, which: int
) -> np.ndarray | None:
    """Part ``which`` of a Split (sizes from its input, its ``split`` attribute, or equal)."""
    axis = attrs.get("axis", 0) % idx.ndim
    if len(node.input) > 1 and node.input[1] and sizes is None:
        return None  # sizes that are not a constant
    parts = [int(v) for v in sizes.reshape(-1)] if sizes is not None else attrs.get("split")
    if not parts:
        count = len(node.output)
        step = -(-idx.shape[axis] // count)  # equal parts, the last one smaller (opset 18)
        parts = [min(step, idx.shape[axis] - k * step) for k in range(count)]
    if sum(parts) != idx.shape[axis] or which >= len(parts):
        return None
    start = sum(parts[:which])
    return np.take(idx, np.arange(start, start + parts[which]), axis=axis)


def _slice(g: RewriteGraph, node: onnx.NodeProto, idx: np.ndarray) -> np.ndarray | None:
    """A Slice whose starts, ends, axes and steps are constants (opset 10 and later)."""
    values = [g.consts.get(i) if i else None for i in node.input[1:5]]
    named = [v for v, i in zip(values, node.input[1:5], strict=True) if i]
    first, last = (values + [None, None])[:2]
    if first is None or last is None or any(v is None for v in named):
        return None  # opset 1's attributes, or bounds that are not constants
    starts, ends = first.reshape(-1).astype(np.int64), last.reshape(-1).astype(np.int64)
    axes = values[2] if len(values) > 2 and values[2] is not None else np.arange(len(starts))
    steps = values[3] if len(values) > 3 and values[3] is not None else np.ones(len(starts))
    columns = [starts, ends, axes.reshape(-1), steps.reshape(-1)]
    if len({len(c) for c in columns}) != 1:
        return None  # the importer names a malformed Slice
    index = [slice(None)] * idx.ndim
    for start, end, axis, step in zip(*columns, strict=True):
        if int(step) == 0:
            return None
        index[int(axis) % idx.ndim] = slice(int(start), int(end), int(step))
    return idx[tuple(index)]


def _canonical_chain(
    g: RewriteGraph, x: str, y: str, xshape: tuple[int, ...], idx: np.ndarray, name: str
) -> list[onnx.NodeProto] | None:
    """The canonical nodes computing ``y`` from ``x`` ([] for a plain rename), or None."""
    yshape = idx.shape
    flat = idx.reshape(-1)
    if flat.size == int(np.prod(xshape)) and np.array_equal(flat, np.arange(flat.size)):
        return [] if tuple(yshape) == tuple(xshape) else [g.reshape(x, yshape, y, name)]
    tokens = token_shape(xshape)
    if tokens is not None:
        return _from_tokens(g, x, y, tokens, idx, name)
    if len(xshape) == 4 and xshape[0] == 1 and idx.size == int(np.prod(xshape)):
        _, h, t, d = xshape
        j = np.arange(h * d)
        expected = (j // d)[None, :] * t * d + np.arange(t)[:, None] * d + (j % d)[None, :]
        if np.array_equal(idx.reshape(t, h * d), expected):
            merged = g.fresh(name)
            nodes = [g.node("Transpose", [x], merged, g.fresh(name), perm=list(_SPLIT))]
            out = y if tuple(yshape) == (1, t, h * d) else g.fresh(name)
            nodes.append(g.reshape(merged, (1, t, h * d), out, name if out == y else g.fresh(name)))
            if out != y:
                nodes.append(g.reshape(out, yshape, y, name))
            return nodes
    return None


def _from_tokens(
    g: RewriteGraph, x: str, y: str, tokens: tuple[int, int], idx: np.ndarray, name: str
) -> list[onnx.NodeProto] | None:
    """A channel slice (or gather) of tokens, its heads split, or split and transposed (k^T)."""
    t, f = tokens
    yshape = tuple(idx.shape)
    offset = int(idx.reshape(-1)[0])
    forms: list[tuple[str, int, int, np.ndarray, tuple[int, ...] | None]] = []
    if idx.size % t == 0:
        forms.append(("slice", idx.size // t, 1, idx.reshape(t, -1), None))
    if len(yshape) == 4 and yshape[0] == 1:
        _, h, a, b = yshape
        if a == t:
            forms.append(("heads", h * b, h, idx[0].transpose(1, 0, 2).reshape(t, -1), _SPLIT))
        if b == t:
            forms.append(
                ("heads_t", h * a, h, idx[0].transpose(2, 0, 1).reshape(t, -1), _TRANSPOSED)
            )
    for _, width, heads, gathered, perm in forms:
        cols = gathered - (np.arange(t) * f)[:, None]  # each token's features, if the same
        if width > f or not (cols == cols[:1]).all() or not ((cols >= 0) & (cols < f)).all():
            continue
        contiguous = np.array_equal(cols[0], offset + np.arange(width))
        nodes, source = [], x
        if width != f or not contiguous:
            source = y if perm is None and yshape == (*g.shapes[x][:-1], width) else g.fresh(name)
            node_name = name if source == y else g.fresh(name)
            if contiguous:
                ends = [np.array([offset]), np.array([offset + width]), np.array([-1])]
                inputs = [x, *(g.const(v.astype(np.int64), f"{name}/slice") for v in ends)]
                nodes.append(g.node("Slice", inputs, source, node_name))
            else:  # features picked apart (each head's part of a packed projection: LeViT)
                index = g.const(cols[0].astype(np.int64), f"{name}/features")
                nodes.append(g.node("Gather", [x, index], source, node_name, axis=-1))
        if perm is None:
            if source != y:
                nodes.append(g.reshape(source, yshape, y, name))
            return nodes
        split = g.fresh(name)
        nodes.append(g.reshape(source, (1, t, heads, width // heads), split, g.fresh(name)))
        nodes.append(g.node("Transpose", [split], y, name, perm=list(perm)))
        return nodes
    return None

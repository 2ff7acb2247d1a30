"""Attention as torch writes it, rewritten before import into the pattern the array runs.

``torch.onnx.export`` of ``nn.MultiheadAttention`` (inside ``nn.TransformerEncoderLayer``)
moves tokens around every product: it transposes (1, T, D) to sequence-first (T, 1, D),
projects q, k and v with one packed weight and picks them apart with
Reshape/Unsqueeze/Transpose/Squeeze/Gather, splits the 1/sqrt(d) scale over q and k, and runs
the output projection as a 2-D Gemm. Few of those steps move a byte. Each rewrite below
computes exactly what it replaces; together they leave the batch-first pattern that
:mod:`compiler.attention_import` takes:

1. *Shape arithmetic folded*: ``Shape`` of a static shape, and small nodes of constants only,
   become constants, so the TorchScript exporter's computed Reshape targets are known.
2. *Token products in the canonical shape*: a MatMul by a constant, a Gemm, or an Add whose
   tokens come in another shape ((T, 1, K), (T, K)) runs on (1, T, K) between two Reshapes.
3. *Movement chains collapsed*: a chain of Reshape/Transpose/Squeeze/Unsqueeze/Gather/Identity/
   Flatten from tokens (or from heads (1, H, T, d)) is evaluated on element indices. A chain
   that moves nothing disappears; one that takes a channel slice, splits heads (also
   transposed, k^T) or merges them becomes that Slice/Reshape/Transpose.
4. *Packed projections split*: a MatMul by a constant (plus bias) read only by Slices or a
   Split of its last axis becomes one MatMul per part.
5. *Scales after the product*: in a MatMul of two activations, an input that is a Mul by a
   positive scalar is replaced by the Mul's input, and the product is scaled afterwards; the
   importer folds that scale into the product.

Graphs without a token product (CNNs, 2-D MLPs) are returned untouched.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from arch.host_runtime import HostModelError

from . import host_regions

__all__ = ["canonicalize_tokens"]

_MOVES = frozenset(
    {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Gather", "Identity", "Flatten"}
)
#: ops of shape arithmetic folded when all their inputs are small constants
_SHAPE_OPS = frozenset(
    {"Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "Mod", "Add", "Sub",
     "Mul", "Div", "Sqrt", "Reshape", "Equal", "Where", "Range", "ConstantOfShape", "Identity"}
)  # fmt: skip
_SMALL = 64  # elements: a constant this size or smaller is shape arithmetic, not a weight
_SPLIT, _TRANSPOSED = (0, 2, 1, 3), (0, 2, 3, 1)
#: builds the nodes computing an output name from the names of canonical inputs
Body = Callable[[list[str], str], list[onnx.NodeProto]]


def _token_shape(shape: tuple[int, ...] | None) -> tuple[int, int] | None:
    """(T, K) if ``shape`` holds T > 1 tokens of K features (every other axis is 1)."""
    if shape is None or len(shape) < 2:
        return None
    lead = [d for d in shape[:-1] if d != 1]
    return (lead[0], shape[-1]) if len(lead) == 1 else None


class _Graph:
    """The node list being rewritten, with shapes, constants and fresh names."""

    def __init__(self, proto: onnx.ModelProto) -> None:
        self.proto = proto
        try:
            inferred = onnx.shape_inference.infer_shapes(proto)
        except Exception:  # noqa: BLE001 - the importer's strict inference names the problem
            inferred = proto
        self.shapes: dict[str, tuple[int, ...]] = {}
        graph = inferred.graph
        for value in itertools.chain(graph.input, graph.value_info, graph.output):
            dims = value.type.tensor_type.shape.dim
            if value.type.tensor_type.HasField("shape") and all(d.dim_value > 0 for d in dims):
                self.shapes[value.name] = tuple(d.dim_value for d in dims)
        self.consts = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
        for node in proto.graph.node:
            if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
                self.consts[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
        for name, value in self.consts.items():
            self.shapes.setdefault(name, tuple(value.shape))
        self.nodes = list(proto.graph.node)
        self.outputs = {o.name for o in proto.graph.output}
        self._names = itertools.count()

    def readers(self, name: str) -> list[onnx.NodeProto]:
        return [n for n in self.nodes if name in n.input]

    def producer(self, name: str) -> onnx.NodeProto | None:
        return next((n for n in self.nodes if name in n.output), None)

    def const(self, array: np.ndarray, hint: str) -> str:
        name = self.fresh(hint)
        self.consts[name] = np.asarray(array)
        self.proto.graph.initializer.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def fresh(self, hint: str) -> str:
        return f"{hint}/canon{next(self._names)}"

    def node(
        self, op: str, inputs: list[str], output: str, name: str, **attrs: Any
    ) -> onnx.NodeProto:
        return helper.make_node(op, inputs, [output], name=name, **attrs)

    def reshape(self, x: str, shape: tuple[int, ...], output: str, name: str) -> onnx.NodeProto:
        target = self.const(np.array(shape, np.int64), f"{name}/shape")
        return self.node("Reshape", [x, target], output, name)

    def replace(self, old: onnx.NodeProto, new: list[onnx.NodeProto]) -> None:
        at = next(i for i, n in enumerate(self.nodes) if n is old)
        self.nodes[at : at + 1] = new

    def commit(self) -> onnx.ModelProto:
        keep = self.outputs | {i.name for i in self.proto.graph.input}
        used = {i for n in self.nodes for i in n.input} | keep
        while True:  # drop movement and constant nodes nothing reads any more
            dead = [n for n in self.nodes if n.op_type in _MOVES | {"Constant"}
                    and not any(o in used for o in n.output)]  # fmt: skip
            if not dead:
                break
            self.nodes = [n for n in self.nodes if all(n is not d for d in dead)]
            used = {i for n in self.nodes for i in n.input} | keep
        del self.proto.graph.node[:]
        self.proto.graph.node.extend(self.nodes)
        kept = [t for t in self.proto.graph.initializer if t.name in used]
        del self.proto.graph.initializer[:]
        self.proto.graph.initializer.extend(kept)
        del self.proto.graph.value_info[:]
        return self.proto


def canonicalize_tokens(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` with torch's attention and token movement rewritten (see the module doc)."""
    if not _has_token_products(_Graph(proto)):
        return proto
    for _ in range(8):  # each folding round may make more shapes static
        if not _fold_shapes(_Graph(proto)):
            break
    for step in (_canonical_products, _collapse_moves, _split_packed, _scale_after_product):
        g = _Graph(proto)
        step(g)
        proto = g.commit()
    return proto


def _has_token_products(g: _Graph) -> bool:
    for node in g.nodes:
        if node.op_type in ("MatMul", "Gemm") and len(node.input) > 1:
            a = g.shapes.get(node.input[0])
            if (a is not None and len(a) >= 3) or node.input[1] not in g.consts:
                return True
    return False


# -- 1. shape arithmetic -------------------------------------------------------------------


def _fold_shapes(g: _Graph) -> bool:
    """Fold Shape of static shapes and small constant nodes into initializers; True if any."""
    folded = []
    for node in g.nodes:
        if node.domain not in ("", "ai.onnx") or node.op_type not in _SHAPE_OPS:
            continue
        values: dict[str, np.ndarray] = {}
        if node.op_type == "Shape":
            shape = g.shapes.get(node.input[0])
            if shape is None:
                continue
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            values[node.output[0]] = np.array(shape, np.int64)[
                attrs.get("start", 0) : attrs.get("end")
            ]
        else:
            inputs = [i for i in node.input if i]
            if not all(i in g.consts and g.consts[i].size <= _SMALL for i in inputs):
                continue
            try:
                values = host_regions.fold_constants(g.proto, node, g.consts)
            except HostModelError:
                continue
        g.consts.update(values)
        for name, value in values.items():
            g.proto.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        folded.append(node)
    g.nodes = [n for n in g.nodes if all(n is not f for f in folded)]
    g.commit()
    return bool(folded)


# -- 2. token products in the canonical shape ----------------------------------------------


def _canonical_products(g: _Graph) -> None:
    for node in list(g.nodes):
        if (
            node.op_type == "MatMul"
            and node.input[1] in g.consts
            and g.consts[node.input[1]].ndim == 2
        ):
            x, w = node.input[0], node.input[1]
            tokens = _noncanonical(g, x)
            if tokens is not None:
                _sandwich(g, node, [x], tokens, _same_op(g, node, [w]))
        elif node.op_type == "Gemm":
            _canonical_gemm(g, node)
        elif node.op_type == "Add" and len(node.input) == 2:
            _canonical_add(g, node)


def _noncanonical(g: _Graph, x: str) -> tuple[int, int] | None:
    """(T, K) if ``x`` holds tokens in a shape other than (1, T, K)."""
    shape = g.shapes.get(x)
    tokens = _token_shape(shape)
    return tokens if tokens is not None and shape != (1, *tokens) else None


def _sandwich(
    g: _Graph, node: onnx.NodeProto, xs: list[str], tokens: tuple[int, int], body: Body
) -> None:
    """Replace ``node`` by Reshape(s) of ``xs`` to (1, T, K), ``body`` and a Reshape back."""
    t, _ = tokens
    out = node.output[0]
    if out not in g.shapes or any(x not in g.shapes for x in xs):
        return
    new = []
    canon = []
    for x in xs:
        name = g.fresh(node.name or out)
        new.append(g.reshape(x, (1, t, g.shapes[x][-1]), name, name))
        canon.append(name)
    inner = g.fresh(out)
    new += body(canon, inner)
    new.append(g.reshape(inner, g.shapes[out], out, g.fresh(node.name or out)))
    g.replace(node, new)


def _same_op(g: _Graph, node: onnx.NodeProto, extra: list[str]) -> Body:
    """A body of :func:`_sandwich`: ``node``'s op on the reshaped inputs and ``extra``."""

    def body(xs: list[str], out: str) -> list[onnx.NodeProto]:
        return [g.node(node.op_type, [*xs, *extra], out, node.name)]

    return body


def _canonical_gemm(g: _Graph, node: onnx.NodeProto) -> None:
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    a, b = node.input[0], node.input[1]
    shape = g.shapes.get(a)
    if (
        attrs.get("transA", 0)
        or b not in g.consts
        or shape is None
        or len(shape) != 2
        or shape[0] < 2
    ):
        return
    w = g.consts[b].T if attrs.get("transB", 0) else g.consts[b]
    w = (float(attrs.get("alpha", 1.0)) * w).astype(np.float32)
    bias = None
    if len(node.input) > 2 and node.input[2]:
        c = g.consts.get(node.input[2])
        if c is None or c.size != w.shape[1]:
            return
        bias = (float(attrs.get("beta", 1.0)) * c.reshape(-1)).astype(np.float32)

    def body(xs: list[str], out: str) -> list[onnx.NodeProto]:
        weight = g.const(w, f"{node.name}/weight")
        if bias is None:
            return [g.node("MatMul", [xs[0], weight], out, node.name)]
        product = g.fresh(out)
        return [
            g.node("MatMul", [xs[0], weight], product, node.name),
            g.node("Add", [product, g.const(bias, f"{node.name}/bias")], out, g.fresh(node.name)),
        ]

    _sandwich(g, node, [a], (shape[0], shape[1]), body)


def _canonical_add(g: _Graph, node: onnx.NodeProto) -> None:
    x, y = node.input
    for act, other in ((x, y), (y, x)):
        tokens = _noncanonical(g, act)
        if tokens is None:
            continue
        c = g.consts.get(other)
        if c is not None and c.size == tokens[1] and c.shape[-1:] == (tokens[1],):
            vector = g.const(c.reshape(-1), f"{node.name}/vector")
            _sandwich(g, node, [act], tokens, _same_op(g, node, [vector]))
            return
        if other not in g.consts and g.shapes.get(other) == g.shapes.get(act):
            _sandwich(g, node, [x, y], tokens, _same_op(g, node, []))
            return


# -- 3. movement chains --------------------------------------------------------------------


def _collapse_moves(g: _Graph) -> None:
    sources = [i.name for i in g.proto.graph.input] + [
        o for n in g.nodes if n.op_type not in _MOVES for o in n.output
    ]
    plans: list[tuple[str, str, list[onnx.NodeProto], np.ndarray]] = []
    for x in sources:
        shape = g.shapes.get(x)
        if shape is None or not (_token_shape(shape) or (len(shape) == 4 and shape[0] == 1)):
            continue
        start = np.arange(int(np.prod(shape))).reshape(shape)
        stack: list[tuple[str, np.ndarray, list[onnx.NodeProto]]] = [(x, start, [])]
        while stack:
            value, idx, chain = stack.pop()
            for reader in g.readers(value):
                if reader.op_type not in _MOVES or reader.input[0] != value:
                    continue
                moved = _move(g, reader, idx)
                if moved is None:
                    continue
                y, path = reader.output[0], [*chain, reader]
                stack.append((y, moved, path))
                ends = any(r.op_type not in _MOVES for r in g.readers(y)) or y in g.outputs
                if ends:
                    plans.append((x, y, path, moved))
    for x, y, path, idx in plans:
        new = _canonical_chain(g, x, y, g.shapes[x], idx, path[-1].name or y)
        if new is None or _signature(new) == _signature(path):
            continue  # already canonical: keep the exporter's node names
        producer = g.producer(y)
        if producer is None:
            continue
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


def _move(g: _Graph, node: onnx.NodeProto, idx: np.ndarray) -> np.ndarray | None:
    """``idx`` moved as ``node`` moves its input; None if its parameters are not constants."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    second = g.consts.get(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    op = node.op_type
    if op == "Identity":
        return idx
    if op == "Transpose":
        return idx.transpose(attrs.get("perm", list(range(idx.ndim))[::-1]))
    if op == "Flatten":
        axis = attrs.get("axis", 1) % (idx.ndim or 1)
        return idx.reshape(int(np.prod(idx.shape[:axis])), -1)
    if op == "Reshape" and second is not None:
        dims = [int(d) for d in second.reshape(-1)]
        if not attrs.get("allowzero", 0):
            dims = [idx.shape[i] if d == 0 else d for i, d in enumerate(dims)]
        return idx.reshape(dims)
    if op in ("Squeeze", "Unsqueeze"):
        axes = attrs.get("axes") if second is None else [int(a) for a in second.reshape(-1)]
        if op == "Squeeze":
            return np.squeeze(idx, tuple(axes) if axes else None)
        if axes is None:
            return None
        rank = idx.ndim + len(axes)
        return np.expand_dims(idx, tuple(sorted(a % rank for a in axes)))
    if op == "Gather" and second is not None and second.ndim == 0:
        return np.take(idx, int(second), axis=attrs.get("axis", 0))
    return None


def _canonical_chain(
    g: _Graph, x: str, y: str, xshape: tuple[int, ...], idx: np.ndarray, name: str
) -> list[onnx.NodeProto] | None:
    """The canonical nodes computing ``y`` from ``x`` ([] for a plain rename), or None."""
    yshape = idx.shape
    flat = idx.reshape(-1)
    if flat.size == int(np.prod(xshape)) and np.array_equal(flat, np.arange(flat.size)):
        return [] if tuple(yshape) == tuple(xshape) else [g.reshape(x, yshape, y, name)]
    tokens = _token_shape(xshape)
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
    g: _Graph, x: str, y: str, tokens: tuple[int, int], idx: np.ndarray, name: str
) -> list[onnx.NodeProto] | None:
    """A channel slice of tokens, its heads split, or split and transposed (k^T)."""
    t, f = tokens
    yshape = tuple(idx.shape)
    offset = int(idx.reshape(-1)[0])
    token = np.arange(t) * f + offset
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
        if width > f or not np.array_equal(gathered, token[:, None] + np.arange(width)[None, :]):
            continue
        nodes, source = [], x
        if width != f:
            source = y if perm is None and yshape == (*g.shapes[x][:-1], width) else g.fresh(name)
            ends = [np.array([offset]), np.array([offset + width]), np.array([-1])]
            inputs = [x, *(g.const(v.astype(np.int64), f"{name}/slice") for v in ends)]
            nodes.append(g.node("Slice", inputs, source, name if source == y else g.fresh(name)))
        if perm is None:
            if source != y:
                nodes.append(g.reshape(source, yshape, y, name))
            return nodes
        split = g.fresh(name)
        nodes.append(g.reshape(source, (1, t, heads, width // heads), split, g.fresh(name)))
        nodes.append(g.node("Transpose", [split], y, name, perm=list(perm)))
        return nodes
    return None


# -- 4. packed projections -----------------------------------------------------------------


def _split_packed(g: _Graph) -> None:
    for node in list(g.nodes):
        if node.op_type != "MatMul" or node.input[1] not in g.consts:
            continue
        x, w = node.input[0], g.consts[node.input[1]]
        tail, bias, add = node.output[0], None, None
        readers = g.readers(tail)
        if len(readers) == 1 and readers[0].op_type == "Add" and tail not in g.outputs:
            other = [i for i in readers[0].input if i != tail]
            c = g.consts.get(other[0]) if len(other) == 1 else None
            if c is not None and c.size == w.shape[-1]:
                add, bias, tail = readers[0], c.reshape(-1), readers[0].output[0]
        rank = len(g.shapes.get(tail, ()))
        parts = _last_axis_parts(g, tail, rank) if w.ndim == 2 and rank else None
        if parts is None or tail in g.outputs:
            continue
        new = []
        for out, (start, stop), _ in parts:
            name = f"{node.name or node.output[0]}[{start}:{stop}]"
            product = out if bias is None else g.fresh(out)
            weight = g.const(w[:, start:stop], f"{name}/weight")
            new.append(g.node("MatMul", [x, weight], product, name))
            if bias is not None:
                vector = g.const(bias[start:stop], f"{name}/bias")
                new.append(g.node("Add", [product, vector], out, g.fresh(name)))
        for reader in g.readers(tail):
            g.nodes.remove(reader)
        if add is not None:
            g.nodes.remove(add)
        g.replace(node, new)


def _last_axis_parts(
    g: _Graph, value: str, rank: int
) -> list[tuple[str, tuple[int, int], str]] | None:
    """(output, (start, stop), node name) of each Slice/Split of ``value``'s last axis, if
    those are all that read it; else None."""
    size = g.shapes.get(value, (0,))[-1]
    parts = []
    for reader in g.readers(value):
        attrs = {a.name: helper.get_attribute_value(a) for a in reader.attribute}
        consts = [g.consts.get(i) if i else None for i in reader.input[1:]]
        if (
            reader.op_type == "Slice"
            and len(consts) >= 3
            and all(c is not None for c in consts[:3])
        ):
            starts, ends, axes = (c.reshape(-1) for c in consts[:3])  # type: ignore[union-attr]
            steps = consts[3] if len(consts) > 3 else None
            if (
                len(axes) != 1
                or int(axes[0]) % rank != rank - 1
                or (steps is not None and steps.reshape(-1)[0] != 1)
            ):
                return None
            start, stop = (
                int(np.clip(v + size if v < 0 else v, 0, size)) for v in (starts[0], ends[0])
            )
            parts.append((reader.output[0], (start, stop), reader.name or reader.output[0]))
        elif reader.op_type == "Split" and attrs.get("axis", 0) % rank == rank - 1:
            sizes = consts[0] if consts and consts[0] is not None else attrs.get("split")
            if sizes is None:
                count = len(reader.output)
                sizes = [size // count] * count if size % count == 0 else None
            if sizes is None:
                return None
            bounds = np.cumsum([0, *(int(s) for s in np.asarray(sizes).reshape(-1))])
            for out, start, stop in zip(reader.output, bounds[:-1], bounds[1:], strict=True):
                parts.append((out, (int(start), int(stop)), f"{reader.name or out}/{out}"))
        else:
            return None
    return parts or None


# -- 5. scales after the product -----------------------------------------------------------


def _scale_after_product(g: _Graph) -> None:
    for node in list(g.nodes):
        if node.op_type != "MatMul" or any(i in g.consts for i in node.input):
            continue
        factor = 1.0
        for i, value in enumerate(node.input):
            mul = g.producer(value)
            if (
                mul is None
                or mul.op_type != "Mul"
                or len(g.readers(value)) != 1
                or value in g.outputs
            ):
                continue
            scalars = [
                (j, g.consts[v])
                for j, v in enumerate(mul.input)
                if v in g.consts and g.consts[v].size == 1
            ]
            if (
                len(scalars) != 1
                or not np.isfinite(scalars[0][1]).all()
                or float(scalars[0][1].reshape(())) <= 0
            ):
                continue
            factor *= float(scalars[0][1].reshape(()))
            node.input[i] = mul.input[1 - scalars[0][0]]
            g.nodes.remove(mul)
        if factor != 1.0:
            out = node.output[0]
            node.output[0] = g.fresh(out)
            scale = g.const(np.array(factor, np.float32), f"{node.name}/scale")
            at = next(i for i, n in enumerate(g.nodes) if n is node)
            g.nodes.insert(
                at + 1, g.node("Mul", [node.output[0], scale], out, g.fresh(node.name or out))
            )

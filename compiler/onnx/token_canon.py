"""Attention as torch writes it, rewritten before import into the pattern the array runs.

``torch.onnx.export`` of ``nn.MultiheadAttention`` (inside ``nn.TransformerEncoderLayer``)
moves tokens around every product: it transposes (1, T, D) to sequence-first (T, 1, D),
projects q, k and v with one packed weight and picks them apart with
Reshape/Unsqueeze/Transpose/Squeeze/Gather, splits the 1/sqrt(d) scale over q and k, and runs
the output projection as a 2-D Gemm. Few of those steps move a byte. Each rewrite below
computes exactly what it replaces; together they leave the batch-first pattern that
:mod:`compiler.onnx.attention` takes:

1. *Shape arithmetic folded*: ``Shape`` of a static shape, and small nodes of constants only,
   become constants, so the TorchScript exporter's computed Reshape targets are known.
   Then a BatchNorm1d between two Transposes (0, 2, 1) of tokens becomes a Mul and an Add on
   the last axis (:mod:`compiler.onnx.token_batchnorm`).
2. *Token products in the canonical shape*: a MatMul by a constant, a Gemm, or an Add whose
   tokens come in another shape ((T, 1, K), (T, K)) runs on (1, T, K) between two Reshapes.
3. *Movement chains collapsed*: a chain of Reshape/Transpose/Squeeze/Unsqueeze/Gather/Identity/
   Flatten from tokens (or from heads (1, H, T, d)) is evaluated on element indices. A chain
   that moves nothing disappears; one that takes a channel slice, splits heads (also
   transposed, k^T) or merges them becomes that Slice/Reshape/Transpose.
4. *Packed projections split*: a MatMul by a constant (plus a bias, a per-feature scale)
   read only by Slices, a Split or Gathers of its last axis becomes one MatMul per part.
5. *Scales after the product*: in a MatMul of two activations, an input that is a Mul by a
   positive scalar is replaced by the Mul's input, and the product is scaled afterwards; the
   importer folds that scale into the product.

Graphs without a token product (CNNs, 2-D MLPs) are returned untouched.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from arch.host_runtime import HostModelError

from . import host_models
from .onnx_graph import RewriteGraph
from .token_batchnorm import batchnorm_on_tokens
from .token_moves import collapse_moves, token_shape

__all__ = ["canonicalize_tokens"]

#: ops of shape arithmetic folded when all their inputs are small constants
_SHAPE_OPS = frozenset(
    {"Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "Mod", "Add", "Sub",
     "Mul", "Div", "Sqrt", "Reshape", "Equal", "Where", "Range", "ConstantOfShape", "Identity"}
)  # fmt: skip
_SMALL = 64  # elements: a constant this size or smaller is shape arithmetic, not a weight
#: builds the nodes computing an output name from the names of canonical inputs
Body = Callable[[list[str], str], list[onnx.NodeProto]]


def canonicalize_tokens(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` with torch's attention and token movement rewritten (see the module doc)."""
    if not _has_token_products(RewriteGraph(proto)):
        return proto
    for _ in range(8):  # each folding round may make more shapes static
        if not _fold_shapes(RewriteGraph(proto)):
            break
    steps = (
        _constant_nodes,
        batchnorm_on_tokens,
        _canonical_products,
        collapse_moves,
        _split_packed,
    )
    for step in (*steps, _scale_after_product):
        g = RewriteGraph(proto)
        step(g)
        proto = g.commit()
    return proto


def _constant_nodes(g: RewriteGraph) -> None:
    """Constant nodes become initializers: the importer reads a Reshape's target when it meets
    the node before it (a heads merge), and TorchScript writes the Constant in between."""
    for node in [n for n in g.nodes if n.op_type == "Constant" and n.output[0] in g.consts]:
        array = numpy_helper.from_array(g.consts[node.output[0]], node.output[0])
        g.proto.graph.initializer.append(array)
        g.nodes.remove(node)


def _has_token_products(g: RewriteGraph) -> bool:
    """A MatMul over tokens (an input of rank 3 or more) - what transformers have and CNNs
    (and their quantized forms, whose weights are DequantizeLinear outputs) do not."""
    for node in g.nodes:
        if node.op_type == "MatMul" and len(g.shapes.get(node.input[0], ())) >= 3:
            return True
    return False


# -- 1. shape arithmetic -------------------------------------------------------------------


def _fold_shapes(g: RewriteGraph) -> bool:
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
                values = host_models.fold_constants(g.proto, node, g.consts)
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


def _canonical_products(g: RewriteGraph) -> None:
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


def _noncanonical(g: RewriteGraph, x: str) -> tuple[int, int] | None:
    """(T, K) if ``x`` holds tokens in a shape other than (1, T, K)."""
    shape = g.shapes.get(x)
    tokens = token_shape(shape)
    return tokens if tokens is not None and shape != (1, *tokens) else None


def _sandwich(
    g: RewriteGraph, node: onnx.NodeProto, xs: list[str], tokens: tuple[int, int], body: Body
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


def _same_op(g: RewriteGraph, node: onnx.NodeProto, extra: list[str]) -> Body:
    """A body of :func:`_sandwich`: ``node``'s op on the reshaped inputs and ``extra``."""

    def body(xs: list[str], out: str) -> list[onnx.NodeProto]:
        return [g.node(node.op_type, [*xs, *extra], out, node.name)]

    return body


def _canonical_gemm(g: RewriteGraph, node: onnx.NodeProto) -> None:
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


def _canonical_add(g: RewriteGraph, node: onnx.NodeProto) -> None:
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


# -- 3. movement chains: compiler/onnx/token_moves.py; 4. packed projections ---------------------


def _split_packed(g: RewriteGraph) -> None:
    for node in list(g.nodes):
        if node.op_type != "MatMul" or node.input[1] not in g.consts:
            continue
        x, w = node.input[0], g.consts[node.input[1]]
        tail = node.output[0]
        chain: list[onnx.NodeProto] = []  # the per-feature Mul / Add after it (bias, BatchNorm)
        while w.ndim == 2 and tail not in g.outputs:
            readers = g.readers(tail)
            if len(readers) != 1 or readers[0].op_type not in ("Add", "Mul"):
                break
            other = [i for i in readers[0].input if i != tail]
            c = g.consts.get(other[0]) if len(other) == 1 else None
            if c is None or c.size != w.shape[-1]:
                break
            chain.append(readers[0])
            tail = readers[0].output[0]
        rank = len(g.shapes.get(tail, ()))
        parts = _last_axis_parts(g, tail, rank) if w.ndim == 2 and rank else None
        if parts is None or tail in g.outputs:
            continue
        new = []
        for out, cols, label in parts:
            name = f"{node.name or node.output[0]}[{label}]"
            value = out if not chain else g.fresh(out)
            new.append(g.node("MatMul", [x, g.const(w[:, cols], f"{name}/weight")], value, name))
            for k, step in enumerate(chain):
                known = next(i for i in step.input if i in g.consts)
                vector = g.const(g.consts[known].reshape(-1)[cols], f"{name}/{step.op_type}")
                result = out if k == len(chain) - 1 else g.fresh(out)
                new.append(g.node(step.op_type, [value, vector], result, g.fresh(name)))
                value = result
        for reader in g.readers(tail):
            g.nodes.remove(reader)
        for step in chain:
            g.nodes.remove(step)
        g.replace(node, new)


def _last_axis_parts(
    g: RewriteGraph, value: str, rank: int
) -> list[tuple[str, np.ndarray, str]] | None:
    """(output, its features of ``value``, label) of each Slice/Split/Gather of ``value``'s last
    axis, if those are all that read it; else None."""
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
            parts.append((reader.output[0], np.arange(start, stop), f"{start}:{stop}"))
        elif reader.op_type == "Split" and attrs.get("axis", 0) % rank == rank - 1:
            sizes = consts[0] if consts and consts[0] is not None else attrs.get("split")
            if sizes is None:
                count = len(reader.output)
                sizes = [size // count] * count if size % count == 0 else None
            if sizes is None:
                return None
            bounds = np.cumsum([0, *(int(s) for s in np.asarray(sizes).reshape(-1))])
            for out, start, stop in zip(reader.output, bounds[:-1], bounds[1:], strict=True):
                parts.append((out, np.arange(start, stop), f"{start}:{stop}"))
        elif (
            reader.op_type == "Gather"
            and attrs.get("axis", 0) % rank == rank - 1
            and consts
            and consts[0] is not None
            and consts[0].ndim == 1
            and np.all((consts[0] >= -size) & (consts[0] < size))
        ):  # a gather of features (a chain of moves that picks each head's part: LeViT)
            cols = consts[0].astype(np.int64) % size
            parts.append((reader.output[0], cols, f"gather{len(parts)}"))
        else:
            return None
    return parts or None


# -- 5. scales after the product -----------------------------------------------------------


def _scale_after_product(g: RewriteGraph) -> None:
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

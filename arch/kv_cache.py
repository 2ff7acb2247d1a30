"""The integer reference of decoding with a KV cache: one token at position p of a causal
decoder's quantized graph, its attention reading every earlier token's keys and values from a
cache instead of recomputing them.

This is what a decode program must reproduce bit for bit, computed independently of the full
forward pass: every row-wise node (norms, linear layers, residual adds, head views) is
evaluated on the one row of position p, each ``split_heads_t`` of a key writes its column p
into the key cache (kept as k^T, (1, H, d, T), as the device stores it), each value's
``split_heads`` its row p into the value cache ((1, H, T, d)), and each causal ``row_softmax``
sees the scores (1, H, 1, T) with every position j > p masked (a mask row of codes 0 and
-128: NORM's mask lines). The T cache positions are the graph's context: attention runs over
all of them with the future masked (static shapes).

Why a decode step equals row p of the full forward pass (:func:`arch.reference.evaluate` of
the same graph over the T tokens): the graph is one quantized graph - the same int8 weights,
scales and zero points for every row - every node but attention works on rows independently,
and the causal softmax of row p reads scores j <= p only (a masked position adds exactly 0 to
the sum and is 0 in the output, so the stale or unwritten cache columns j > p change
nothing). By induction over the positions the cache holds the full pass's keys and values of
positions < p, so row p's scores, softmax and context are the full pass's. The tests check
it instead of trusting it (``tests/unit/arch/test_kv_cache.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arch.executable.format import RefNode as FormatNode
from arch.ops.norm import MASKED_CODE
from arch.ops.spec import ReferenceError, RefGraph, RefNode
from arch.reference import evaluate_node

__all__ = [
    "KvCache",
    "decode_batch",
    "decode_step",
    "kv_layout",
    "mask_row",
    "prefill",
]

#: Ops that work on each token row on its own: a decode step evaluates them on one row.
ROW_OPS = frozenset({"layer_norm", "rms_norm", "gemm", "add", "scale", "merge_heads"})


@dataclass(frozen=True)
class KvLayout:
    """Where a decoder graph's cache lives: the tensor each key's ``split_heads_t`` and each
    value's ``split_heads`` writes (in graph order: layer i's key is ``keys[i]``), the query
    views, and the context T (the cache's positions)."""

    keys: tuple[str, ...]
    values: tuple[str, ...]
    queries: tuple[str, ...]
    context: int


@dataclass
class KvCache:
    """Int8 codes of every layer's keys (1, H, d, T) and values (1, H, T, d), by the tensor
    names of :class:`KvLayout`; ``length``: the positions written (0..length-1)."""

    tensors: dict[str, np.ndarray]
    length: int = 0


def kv_layout(graph: RefGraph) -> KvLayout:
    """The cache of a causal decoder graph: each causal ``row_softmax`` between a
    ``batch_matmul`` of a query ``split_heads`` and a key ``split_heads_t``, and one of its
    output and a value ``split_heads``. Anything else that is not row-wise is a
    :class:`~arch.ops.spec.ReferenceError` naming the node."""
    producers = {node.output: node for node in graph.nodes}
    keys, values, queries, contexts = [], [], [], set()
    for node in graph.nodes:
        if node.op != "row_softmax":
            continue
        scores = producers.get(node.inputs[0])
        if not node.attrs.get("causal") or scores is None or scores.op != "batch_matmul":
            raise ReferenceError(
                f"node {node.name!r} (row_softmax): a KV cache needs a causal softmax of "
                "q @ k^T scores"
            )
        query, key = (producers.get(name) for name in scores.inputs)
        readers = [n for n in graph.nodes if n.inputs and n.inputs[0] == node.output]
        value = producers.get(readers[0].inputs[1]) if len(readers) == 1 else None
        if (
            query is None
            or query.op != "split_heads"
            or key is None
            or key.op != "split_heads_t"
            or readers[0].op != "batch_matmul"
            or value is None
            or value.op != "split_heads"
        ):
            raise ReferenceError(
                f"node {node.name!r} (row_softmax): a KV cache needs split_heads(q) @ "
                "split_heads_t(k), softmax, @ split_heads(v)"
            )
        queries.append(query.output)
        keys.append(key.output)
        values.append(value.output)
        contexts.add(graph.tensors[key.output].shape[-1])
    if not keys or len(contexts) != 1:
        raise ReferenceError("a KV cache needs a decoder graph: causal attention of one context")
    cached = {*keys, *values, *queries}
    for node in graph.nodes:
        if node.op in ROW_OPS or node.output in cached or node.op in ("batch_matmul", "host"):
            continue
        if node.op != "row_softmax":
            raise ReferenceError(
                f"node {node.name!r} ({node.op}) is not row-wise: a KV-cache decode step "
                f"evaluates {', '.join(sorted(ROW_OPS))} and attention only"
            )
    return KvLayout(tuple(keys), tuple(values), tuple(queries), contexts.pop())


def mask_row(position: int, context: int) -> np.ndarray:
    """The softmax mask of query position ``position``: (1, 1, 1, T) int8 codes, 0 where the
    position is visible (j <= position), :data:`~arch.ops.norm.MASKED_CODE` after it."""
    row = np.where(np.arange(context) <= position, 0, MASKED_CODE)
    return row.astype(np.int8).reshape(1, 1, 1, context)


def prefill(graph: RefGraph, values: dict[str, np.ndarray], length: int) -> KvCache:
    """The cache after a prompt of ``length`` tokens, from the full pass's ``values``
    (:func:`arch.reference.evaluate`) over the prompt's window: positions >= ``length`` hold
    the window's padding, as a prefill program leaves them (masked until a step writes them)."""
    layout = kv_layout(graph)
    if not 1 <= length <= layout.context:
        raise ReferenceError(
            f"a prompt of {length} tokens does not fit a context of {layout.context}"
        )
    tensors = {name: values[name].copy() for name in (*layout.keys, *layout.values)}
    return KvCache(tensors, length)


def decode_step(
    graph: RefGraph, cache: KvCache, start: str, row: np.ndarray
) -> dict[str, np.ndarray]:
    """One decode step at position ``cache.length``: ``row`` is the (1, 1, 1, F) int8 codes of
    tensor ``start`` (the device input: the token's embedding) at that position; every node
    after ``start`` is evaluated for that one position, the cache gets its keys and values
    (``cache.length`` grows by one). The values of the step's nodes (one row each; the
    cached views: the whole cache)."""
    layout = kv_layout(graph)
    p = cache.length
    if p >= layout.context:
        raise ReferenceError(f"the cache is full: {p} positions of a context of {layout.context}")
    values: dict[str, np.ndarray] = {start: np.asarray(row, np.int8)}
    nodes = list(graph.nodes)
    names = [node.output for node in nodes]
    if start not in names:
        raise ReferenceError(f"tensor {start!r} is not a node output of the graph")
    for node in nodes[names.index(start) + 1 :]:
        xs = [values[name] for name in node.inputs]
        values[node.output] = _decoded(graph, node, xs, cache, layout, p)
    cache.length = p + 1
    return values


def decode_batch(
    graph: RefGraph, caches: list[KvCache], start: str, rows: np.ndarray
) -> dict[str, np.ndarray]:
    """One decode step of ``len(caches)`` sequences at their common position p, as a batched
    decode program computes it: ``rows`` (1, B, 1, F) are the B tokens' codes of ``start``;
    every row-wise node runs on the B rows, each sequence's key and value go into its own
    cache at p, and each attention product is ``groups`` B over the B caches one after the
    other: row b against sequence b's block only (scores (1, H, B, T)), the softmax masking
    the positions after p (:func:`mask_row`). The values of the step's nodes (the cached
    views: the B caches concatenated); row b is :func:`decode_step` of sequence b
    (``tests/unit/arch/test_kv_cache.py``)."""
    layout = kv_layout(graph)
    lengths = sorted({cache.length for cache in caches})
    if len(lengths) != 1 or lengths[0] >= layout.context:
        raise ReferenceError(
            f"a batch decodes sequences at one position below {layout.context}, not {lengths}"
        )
    p, batch = lengths[0], len(caches)
    cached = {*layout.keys, *layout.values}
    values: dict[str, np.ndarray] = {start: np.asarray(rows, np.int8)}
    names = [node.output for node in graph.nodes]
    for node in graph.nodes[names.index(start) + 1 :]:
        xs = [values[name] for name in node.inputs]
        if node.op == "row_softmax":  # every row at position p
            plain = FormatNode(node.name, node.op, list(node.inputs), node.output,
                               {"causal": False}, node.params)  # fmt: skip
            values[node.output] = evaluate_node(graph, plain, [xs[0], mask_row(p, layout.context)])
            continue
        if node.op == "batch_matmul" and node.inputs[1] in cached:  # row b: its own cache
            node = FormatNode(node.name, node.op, list(node.inputs), node.output,
                              {**node.attrs, "groups": batch}, node.params)  # fmt: skip
        out = evaluate_node(graph, node, xs)
        if node.output in layout.keys:  # (1, H, d, B): column b is sequence b's key at p
            for b, cache in enumerate(caches):
                cache.tensors[node.output][..., p] = out[..., b]
            out = np.concatenate([cache.tensors[node.output] for cache in caches], axis=3)
        elif node.output in layout.values:  # (1, H, B, d): row b is sequence b's value at p
            for b, cache in enumerate(caches):
                cache.tensors[node.output][:, :, p] = out[:, :, b]
            out = np.concatenate([cache.tensors[node.output] for cache in caches], axis=2)
        values[node.output] = out
    for cache in caches:
        cache.length = p + 1
    return values


def _decoded(
    graph: RefGraph,
    node: RefNode,
    xs: list[np.ndarray],
    cache: KvCache,
    layout: KvLayout,
    p: int,
) -> np.ndarray:
    """One node of a decode step at position ``p`` (the cache updated in place)."""
    if node.op == "row_softmax":  # causal over the cache: positions after p masked
        attrs = {"causal": False}
        plain = FormatNode(node.name, node.op, list(node.inputs), node.output, attrs, node.params)
        return evaluate_node(graph, plain, [xs[0], mask_row(p, layout.context)])
    out = evaluate_node(graph, node, xs)
    if node.output in layout.keys:  # (1, H, d, 1): column p of k^T
        cache.tensors[node.output][..., p] = out[..., 0]
        return cache.tensors[node.output]
    if node.output in layout.values:  # (1, H, 1, d): row p
        cache.tensors[node.output][:, :, p] = out[:, :, 0]
        return cache.tensors[node.output]
    return out

"""Decoding with a KV cache: the prefill and decode graphs of a causal decoder, both derived
from its one quantized graph (the same int8 weights, scales and zero points: a decode step is
row p of the full pass, :mod:`arch.kv_cache`).

- **prefill** is the full graph (T positions) with, per layer, the key projection's output
  made a graph output: the key rows cache, stored as they are (its ``q @ k^T`` reads them with
  GEMM's ``transpose_w``), beside the value tensor (token rows) - the two caches;
- **decode** is the graph at one position of B sequences (``batch``): every row op on B rows,
  each weight read once for all B; the key and value rows it computes are outputs (the linker
  points their STOREs at row p of each sequence's cache); attention reads the caches as
  ``constant`` tensors of B x T rows - the B sequences' caches one after the other, which
  the prefill of sequence b writes at rows b x T.. (:mod:`compiler.kv_link`), both as they
  are stored (``q @ k^T`` reads each tile of key rows transposed, GEMM's ``transpose_w``: no
  copy of the keys); each attention product is ``groups`` B (row b against sequence b's
  block of the cache only: scores of T positions a row, whatever B), and each softmax takes
  a constant mask row (positions <= p; the linker points its LOAD at position p's row of a
  mask table).

The caches' readers come two layers after the STOREs of the new rows (the value projection and
the layer after it lie between), so the previous layer's barrier has drained those STOREs when
the readers' LOADs start (a LOAD is issued at most one layer early); :func:`decode_graph`
keeps that order and :mod:`compiler.kv_link` checks it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from arch.kv_cache import kv_layout, mask_row
from compiler.errors import CompileError
from compiler.ir import Graph, Node, Tensor

__all__ = ["CacheNames", "KvGraphs", "derive"]

CACHE = "#cache"  # suffix of a decode graph's cache constant
#: What a KV-cache decode takes (a refusal's "supported").
SUPPORTED = (
    "a causal decoder (host input stage, split_heads q @ split_heads_t k, causal softmax, "
    "@ split_heads v); DECODE=recompute generates without a KV cache"
)


@dataclass(frozen=True)
class CacheNames:
    """One layer's cache tensors: the prefill's key rows and values, the decode graph's
    constants reading them, and the decode rows written into them."""

    key_rows: str  # prefill output (1, T, 1, F)
    values: str  # prefill tensor (1, T, 1, F): the value projection's output
    key_const: str  # decode constant aliasing key_rows
    value_const: str  # decode constant aliasing values
    key_new: str  # decode output (1, 1, 1, F), stored at row p of key_rows
    value_new: str  # decode output (1, 1, 1, F), stored at row p of values
    softmax: str  # the decode softmax node whose mask row is row p of the mask table


@dataclass
class KvGraphs:
    """The two graphs and the names that link them."""

    prefill: Graph
    decode: Graph
    caches: list[CacheNames]
    start: str  # the device input: the host input stage's output (decode's graph input)
    context: int
    batch: int = 1  # sequences decoded together (their caches one after the other)


def derive(graph: Graph, batch: int = 1) -> KvGraphs:
    """The prefill and decode graphs of a quantized causal decoder ``graph`` (an input stage
    on the host, then attention of ``split_heads`` q, ``split_heads_t`` k and ``split_heads``
    v; anything else is :class:`~compiler.errors.CompileError` naming it); decode on
    ``batch`` rows, one per sequence, over ``batch`` caches one after the other."""
    from arch.ops.spec import ReferenceError

    try:
        layout = kv_layout(graph)
    except ReferenceError as exc:
        raise CompileError(None, "model", f"no KV-cache decode: {exc}", SUPPORTED) from None
    hosts = [n for n in graph.nodes if n.op == "host"]
    if len(hosts) != 1 or graph.nodes[0] is not hosts[0]:
        raise CompileError(
            None, "model", "no KV-cache decode: the graph must start with one host input stage",
            SUPPORTED,
        )  # fmt: skip
    prefill = graph.copy()
    decode_nodes: list[Node] = []
    tensors: dict[str, Tensor] = {}
    start = hosts[0].output
    t = layout.context
    tensors[start] = _rows(graph.tensors[start], t, batch)
    caches: list[CacheNames] = []
    outputs = list(graph.outputs)
    key_of = dict(zip(layout.values, layout.keys, strict=True))  # each attention's pair
    for node in _keys_projected_first(graph, key_of)[1:]:
        if node.output in layout.keys:  # (read after the value projection: see above)
            continue
        if node.output in layout.values:
            split = graph.producer(key_of[node.output])
            assert split is not None  # (kv_layout found it)
            names = _key_cache(graph, prefill, split, decode_nodes, tensors, batch)
            outputs.append(names[2])
            caches.append(CacheNames(names[0], "", names[1], "", names[2], "", ""))
            value = node.inputs[0]
            const = _constant(graph, value, decode_nodes, tensors, f"{node.name}{CACHE}", batch)
            decode_nodes.append(dataclasses.replace(node, inputs=[const]))
            tensors[node.output] = _positions(graph.tensors[node.output], 2, batch)
            outputs.append(value)
            caches[-1] = dataclasses.replace(
                caches[-1], values=value, value_const=const, value_new=value
            )
            continue
        for name in (node.output, *node.inputs):
            if name not in tensors:
                tensors[name] = _rows(graph.tensors[name], t, batch)
        if batch > 1 and (_reads_keys(graph, node) or _reads_values(node, layout.values)):
            node = dataclasses.replace(node, attrs={**node.attrs, "groups": batch})
        if node.op == "row_softmax":
            mask = mask_row(0, t).reshape(1, t)  # (the linker points it at position p's)
            node = dataclasses.replace(
                node, attrs={"causal": False}, params={**node.params, "mask": mask}
            )
            caches[-1] = dataclasses.replace(caches[-1], softmax=node.name)
        decode_nodes.append(dataclasses.replace(node, inputs=list(node.inputs)))
    decode_nodes = _queries_late(decode_nodes, layout.queries)
    decode = Graph(decode_nodes, tensors, [start], outputs, quantized=True)
    decode.verify()
    prefill.verify()
    return KvGraphs(prefill, decode, caches, start, t, batch)


def _keys_projected_first(graph: Graph, key_of: dict[str, str]) -> list[Node]:
    """``graph``'s nodes with each key projection moved before its value projection where it
    came after it (GPT-2 writes v, q, k): the decode step's cache readers must come two layers
    after the STORE of the new key row (see the module docstring). The move keeps every node
    after the producers of its inputs."""
    nodes = list(graph.nodes)
    for value, key in key_of.items():
        v_split, k_split = graph.producer(value), graph.producer(key)
        assert v_split is not None and k_split is not None  # (kv_layout found them)
        v_proj, k_proj = graph.producer(v_split.inputs[0]), graph.producer(k_split.inputs[0])
        if v_proj is None or k_proj is None or nodes.index(k_proj) < nodes.index(v_proj):
            continue
        at = nodes.index(v_proj)
        ready = {n.output for n in nodes[:at]} | set(graph.inputs)
        if set(k_proj.inputs) <= ready:
            nodes.remove(k_proj)
            nodes.insert(at, k_proj)
    return nodes


def _queries_late(nodes: list[Node], queries: tuple[str, ...]) -> list[Node]:
    """``nodes`` with each query view and the linear layer that only it reads moved to just
    before the product that reads the query: its weight loads then overlap the end of the
    value projection (:mod:`compiler.passes.prefetch`), while the product itself reads the
    caches, so nothing of it can load early. Moving a node later keeps it after its
    inputs."""
    nodes = list(nodes)
    for query in queries:
        view = next((n for n in nodes if n.output == query), None)
        if view is None:
            continue
        projection = next((n for n in nodes if n.output == view.inputs[0]), None)
        readers = [n for n in nodes if view.inputs[0] in n.inputs]
        group = [view]
        if projection is not None and projection.op == "gemm" and readers == [view]:
            group = [projection, view]
        for node in group:
            nodes.remove(node)
        at = next(i for i, n in enumerate(nodes) if query in n.inputs)
        nodes[at:at] = group
    return nodes


def _rows(tensor: Tensor, context: int, batch: int) -> Tensor:
    """``tensor`` at one position of ``batch`` sequences: tokens (1, T, 1, F) -> (1, B, 1, F),
    heads (1, H, T, N) -> (1, H, B, N) (scores (1, H, T, T) -> (1, H, B, T): each row over
    its own sequence's T positions)."""
    shape = list(tensor.shape)
    if len(shape) == 4 and shape[1] == context and shape[2] == 1:
        shape[1] = batch
    elif len(shape) == 4 and shape[2] == context:
        shape[2] = batch
    return dataclasses.replace(tensor, shape=tuple(shape))


def _positions(tensor: Tensor, axis: int, batch: int) -> Tensor:
    """``tensor`` with its position ``axis`` over the ``batch`` caches (B x T positions)."""
    shape = list(tensor.shape)
    shape[axis] *= batch
    return dataclasses.replace(tensor, shape=tuple(shape))


def _constant(
    graph: Graph,
    name: str,
    nodes: list[Node],
    tensors: dict[str, Tensor],
    node_name: str,
    batch: int,
) -> str:
    """A decode constant of ``batch`` times ``name``'s positions, (1, B x T, 1, F): the
    ``batch`` caches one after the other (zero codes: the prefills write them)."""
    full = _positions(graph.tensors[name], 1, batch)
    const = f"{name}{CACHE}"
    tensors[const] = dataclasses.replace(full, name=const)
    value = np.full(full.shape, full.zero_point, np.int8)
    nodes.append(Node(node_name, "constant", [], const, {}, {"value": value}))
    return const


def _key_cache(
    graph: Graph,
    prefill: Graph,
    split: Node,
    nodes: list[Node],
    tensors: dict[str, Tensor],
    batch: int,
) -> tuple[str, str, str]:
    """Layer's key cache: the prefill's key rows (the key projection's output, a graph output
    now) and, in decode, a constant of them; both ``split_heads_t`` read the rows as they are
    stored (``q @ k^T`` reads each tile of key rows transposed: GEMM's ``transpose_w``). (key
    rows, constant, the decode key row)."""
    key = split.inputs[0]
    projection = graph.producer(key)
    if projection is None or projection.op != "gemm" or len(projection.inputs) != 1:
        raise CompileError(
            split.name, split.op, "no KV-cache decode: a key must be a linear layer's output",
            SUPPORTED,
        )  # fmt: skip
    prefill.outputs.append(key)
    const = _constant(graph, key, nodes, tensors, f"{split.name}{CACHE}", batch)
    nodes.append(dataclasses.replace(split, inputs=[const]))
    tensors[split.output] = _positions(graph.tensors[split.output], 3, batch)
    return key, const, key


def _reads_values(node: Node, values: tuple[str, ...]) -> bool:
    """Whether ``node`` is a product with the values ``p @ v``."""
    return node.op == "batch_matmul" and node.inputs[1] in values


def _reads_keys(graph: Graph, node: Node) -> bool:
    """Whether ``node`` is a product with the keys ``q @ k^T`` (its output: the scores)."""
    keys = graph.producer(node.inputs[1]) if len(node.inputs) > 1 else None
    return node.op == "batch_matmul" and keys is not None and keys.op == "split_heads_t"

"""Heads padded to whole lines: attention whose heads are not whole lines of the array (BERT
small's heads of 8 features on the 16x16 array) runs as heads of the next multiple of a line.

A head is a view of its projection's bytes only when it is whole lines (:mod:`.layout`);
otherwise each split and merge was a host step. Here, in the quantized graph and before the
back end, each projection writes every head's features followed by zero features up to whole
lines - its weight rows, biases and rescales for them are zero (so its output there is the zero
point: a real zero) - and the layers reading those features ignore them exactly:

- ``q @ k^T``: q and k padded alike; ``matmul(q - z_q, k - z_k)`` adds ``0 * 0`` for each
  padded feature;
- ``p @ v`` then ``merge_heads`` then a linear layer: v padded, so ``p @ v`` writes the zero
  point there (its accumulator is 0), and the linear layer's weight gets a zero column for each
  padded feature.

The padded tensors are renamed ``<name>#pad`` (no tensor of the ONNX model has their shape).
A pattern that differs anywhere (a projection or head read twice, an activation or residual in
a projection, a merge read by anything but one linear layer) is left alone.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import Graph, Node

__all__ = ["PAD", "run"]

PAD = "#pad"  # suffix of a padded tensor
_PER_OUTPUT = ("bias", "mult", "shift")  # a projection's per-feature params besides its weight


def run(graph: Graph, line: int) -> Graph:
    """Pad, in place, the heads of every attention of ``graph`` whose heads are not whole
    lines of ``line`` features (see the module docstring); returns ``graph``."""
    for product in [n for n in graph.nodes if n.op == "batch_matmul"]:
        splits = [graph.producer(name) for name in product.inputs]
        if [s.op if s else None for s in splits] == ["split_heads", "split_heads_t"]:
            _pad_scores(graph, product, splits, line)  # type: ignore[arg-type]
        elif splits[1] is not None and splits[1].op == "split_heads":
            _pad_values(graph, product, splits[1], line)
    return graph


def _pad_scores(graph: Graph, product: Node, splits: list[Node], line: int) -> None:
    """q @ k^T: q's and k's heads padded alike (the product's shape stays)."""
    heads, per_head = splits[0].attrs["heads"], graph.tensors[product.inputs[0]].shape[3]
    if per_head % line == 0 or not all(_paddable(graph, s, product) for s in splits):
        return
    for split in splits:
        _pad_split(graph, split, heads, per_head, _whole(per_head, line))


def _pad_values(graph: Graph, product: Node, split: Node, line: int) -> None:
    """p @ v, merge_heads and the linear layer after it: v's heads padded, the linear layer's
    weight with a zero column per padded feature."""
    heads, per_head = split.attrs["heads"], graph.tensors[split.output].shape[3]
    merges = graph.consumers(product.output)
    if per_head % line == 0 or not _paddable(graph, split, product) or len(merges) != 1:
        return
    merge = merges[0]
    readers = graph.consumers(merge.output)
    if merge.op != "merge_heads" or len(readers) != 1 or readers[0].op != "gemm":
        return
    out = readers[0]
    if out.inputs[0] != merge.output or merge.output in out.inputs[1:]:
        return
    if product.output in graph.outputs or merge.output in graph.outputs:
        return
    padded = _whole(per_head, line)
    _pad_split(graph, split, heads, per_head, padded)
    for node in (product, merge):
        _rename(graph, node, padded / per_head)
    weight = out.params["weight"]  # (N, K): K = heads x per_head
    columns = weight.reshape(weight.shape[0], heads, per_head)
    out.params = {
        **out.params,
        "weight": _widened(columns, padded, 2).reshape(weight.shape[0], heads * padded),
    }


def _paddable(graph: Graph, split: Node, product: Node) -> bool:
    """The split reads a projection (a linear layer, no activation or residual, read by the
    split alone) and is read by ``product`` alone; neither is a graph output."""
    projection = graph.producer(split.inputs[0])
    return (
        projection is not None
        and projection.op == "gemm"
        and len(projection.inputs) == 1
        and projection.attrs.get("act") is None
        and set(projection.params) <= {"weight", *_PER_OUTPUT, "clamp"}
        and [n.name for n in graph.consumers(projection.output)] == [split.name]
        and [n.name for n in graph.consumers(split.output)] == [product.name]
        and not {projection.output, split.output} & set(graph.outputs)
    )


def _pad_split(graph: Graph, split: Node, heads: int, per_head: int, padded: int) -> None:
    """The projection before ``split`` writes ``padded`` features per head (zero weight rows,
    biases and rescales after each head's own), and the split's heads are that wide."""
    projection = graph.producer(split.inputs[0])
    assert projection is not None
    params = dict(projection.params)
    for key in ("weight", *_PER_OUTPUT):
        value = params[key]
        if value.shape[:1] != (heads * per_head,):  # a per-tensor rescale
            continue
        per = value.reshape(heads, per_head, *value.shape[1:])
        mode = "edge" if key in ("mult", "shift") else "constant"  # (any rescale of 0 is 0)
        params[key] = _widened(per, padded, 1, mode).reshape(heads * padded, *value.shape[1:])
    projection.params = params
    _rename(graph, projection, padded / per_head)
    _rename(graph, split, padded / per_head)


def _rename(graph: Graph, node: Node, growth: float) -> None:
    """``node``'s output becomes ``<name>#pad``, its padded axis (the last, or the features of
    a transposed split) ``growth`` times longer; its readers read the new name."""
    old = graph.tensors.pop(node.output)
    shape = list(old.shape)
    axis = 2 if node.op == "split_heads_t" else 3
    shape[axis] = round(shape[axis] * growth)
    new = f"{node.output}{PAD}"
    graph.tensors[new] = dataclasses.replace(old, name=new, shape=tuple(shape))
    for reader in graph.consumers(node.output):
        reader.inputs = [new if name == node.output else name for name in reader.inputs]
    node.output = new


def _widened(values: np.ndarray, size: int, axis: int, mode: str = "constant") -> np.ndarray:
    """``values`` padded along ``axis`` up to ``size``: zeros, or the last value ("edge")."""
    pad = [(0, 0)] * values.ndim
    pad[axis] = (0, size - values.shape[axis])
    return np.pad(values, pad, mode=mode)  # type: ignore[call-overload]


def _whole(features: int, line: int) -> int:
    return -(-features // line) * line

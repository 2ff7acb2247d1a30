"""Attention's own ops: batch_matmul on the array, softmax on the host.

* batch_matmul: per head, ``acc = matmul(a - z_a, b - z_b)`` of a (1, H, M, K) and a
  (1, H, K, N) activation (attention's ``q @ k^T`` and ``p @ v``), then the STORE as for conv
  (per-tensor ``mult``/``shift``). With the optional attr ``groups`` G (default 1) a's M rows
  are G blocks and b holds G blocks of positions, block g of a's rows multiplying block g of
  b: b (1, H, K, G x N) splits its columns (``q @ k^T`` over G caches of keys), b (1, H, G x
  K, N) its rows (``p @ v`` over G caches of values) - a decode step of G sequences, each
  row attending to its own sequence's cache.
* softmax: fp32 on the host, after :func:`~arch.ops.quant.dequantize` (its output has no scale).
"""

from __future__ import annotations

import math

import numpy as np

from arch import reference_ops as ro
from arch.ops.check import NodeCheck
from arch.ops.quant import centred, dequantize, store, zero_point
from arch.ops.spec import OpSpec, RefGraph, RefNode, Shape

__all__ = ["BATCH_MATMUL", "SOFTMAX", "SPECS", "groups"]


def _batch_matmul(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    a = centred(graph, node.inputs[0], xs[0])
    b = centred(graph, node.inputs[1], xs[1])
    g = groups(node)
    rows = np.split(a, g, axis=2)
    blocks = np.split(b, g, axis=3 if b.shape[2] == a.shape[3] else 2)
    acc = np.concatenate([ro.matmul(x, y) for x, y in zip(rows, blocks, strict=True)], axis=2)
    return store(graph, node, acc, axis=-1)


def groups(node: RefNode) -> int:
    """A batch_matmul's blocks of rows, each against its own block of b (1: one product)."""
    return int(node.attrs.get("groups", 1))


def _multiplied(c: NodeCheck, xs: list[Shape]) -> Shape:
    a, b = (c.shape(name, 4, "input") for name in c.node.inputs)
    g = c.positive("groups") if "groups" in c.node.attrs else 1
    if a[2] % g:
        c.fail(f"{a[2]} rows of input {a} are not {g} groups")
    if a[:2] == b[:2] and a[3] == b[2] and b[3] % g == 0:  # G blocks of b's columns
        return (*a[:3], b[3] // g)
    if a[:2] == b[:2] and g > 1 and b[2] == g * a[3]:  # G blocks of b's rows
        return (*a[:3], b[3])
    form = "(1, H, K, N)" if g == 1 else f"(1, H, K, {g} x N) or (1, H, {g} x K, N)"
    c.fail(f"inputs {a} and {b} are not (1, H, M, K) and {form}")


def _matmul_macs(graph: RefGraph, node: RefNode) -> int:
    """Output elements x K."""
    k = graph.tensors[node.inputs[0]].shape[-1]
    return math.prod(graph.tensors[node.output].shape) * k


def _softmax(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    scale = graph.tensors[node.inputs[0]].scale
    assert scale is not None  # verified
    x = dequantize(xs[0], scale, zero_point(graph, node.inputs[0]))
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def _softmaxed(c: NodeCheck, xs: list[Shape]) -> Shape:
    return c.shape(c.node.inputs[0], 2, "input")


BATCH_MATMUL = OpSpec(
    name="batch_matmul",
    attrs=frozenset({"act"}),
    optional_attrs=frozenset({"groups"}),
    params={"mult": "int64", "shift": "int64", "clamp": "int64"},
    arity=(2, 2),
    keeps_scale=False,
    output_shape=_multiplied,
    evaluate=_batch_matmul,
    check_quantized=NodeCheck.rescaled,
    macs=_matmul_macs,
)
SOFTMAX = OpSpec(
    name="softmax",
    attrs=frozenset(),
    params={},
    arity=(1, 1),
    keeps_scale=False,
    output_shape=_softmaxed,
    evaluate=_softmax,
)
SPECS = (BATCH_MATMUL, SOFTMAX)

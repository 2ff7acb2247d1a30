"""A strided pick of a token map - LeViT's attention subsampling - as a 1x1 max pool.

LeViT's ``x.view(B, H, W, C)[:, ::s, ::s].reshape(B, -1, C)`` exports as a ``Reshape`` of tokens
(1, T, C) to (1, H, W, C), one or two ``Slice`` nodes (start 0, to the end, step ``s`` along
H and W) and a ``Reshape`` back to tokens. That picks every ``s``-th pixel of the tokens' map:
the rewrite makes it ``Transpose`` (0, 3, 1, 2), a ``MaxPool`` of kernel 1 and stride (s, s),
``Transpose`` (0, 2, 3, 1) - so the Reshape-Transpose pairs are the importer's
``tokens_to_map``/``map_to_tokens`` views (:mod:`compiler.onnx.map_tokens`) and the pick a pool
on the device (the maximum of one code is that code: it computes exactly what it replaces). The
last Reshape keeps its output's name. Anything else (an offset start, a slice that stops
early, an intermediate read elsewhere) is left alone.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["subsamples_as_pools"]

_END = 2**31 - 1  # a Slice end at or past this is "to the end"


def subsamples_as_pools(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` with each token-map subsampling (see the module doc) a 1x1 strided MaxPool."""
    graph = proto.graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    shapes = {
        v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
        for v in [*graph.value_info, *graph.input, *graph.output]
    }
    outputs = {o.name for o in graph.output}
    for to_map in [n for n in graph.node if n.op_type == "Reshape"]:
        found = _pattern(graph, to_map, inits, shapes, outputs)
        if found is None:
            continue
        slices, back, strides = found
        base = f"{slices[0].name}/pick"  # (no ONNX tensor: the twin compares the last Reshape)
        nchw, pooled, nhwc = (f"{base}#{what}" for what in ("map", "pool", "pixels"))
        new = [
            helper.make_node("Transpose", [to_map.output[0]], [nchw], f"{slices[0].name}/map",
                             perm=[0, 3, 1, 2]),
            helper.make_node("MaxPool", [nchw], [pooled], f"{slices[0].name}/pick",
                             kernel_shape=[1, 1], strides=list(strides)),
            helper.make_node("Transpose", [pooled], [nhwc], f"{slices[0].name}/pixels",
                             perm=[0, 2, 3, 1]),
        ]  # fmt: skip
        _, h, w, c = shapes[to_map.output[0]]
        oh, ow = -(-h // strides[0]), -(-w // strides[1])
        for name, shape in ((nchw, (1, c, h, w)), (pooled, (1, c, oh, ow)), (nhwc, (1, oh, ow, c))):
            graph.value_info.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
        at = list(graph.node).index(slices[0])
        for node in slices:
            graph.node.remove(node)
        for offset, node in enumerate(new):
            graph.node.insert(at + offset, node)
        back.input[0] = nhwc
    return proto


def _pattern(
    graph: onnx.GraphProto,
    to_map: onnx.NodeProto,
    inits: dict[str, np.ndarray],
    shapes: dict[str, tuple[int, ...]],
    outputs: set[str],
) -> tuple[list[onnx.NodeProto], onnx.NodeProto, tuple[int, int]] | None:
    """The Slices after ``to_map`` (tokens to (1, H, W, C)), the Reshape back to tokens and
    the strides along H and W - or None."""
    tokens, grid = shapes.get(to_map.input[0], ()), shapes.get(to_map.output[0], ())
    if len(tokens) != 3 or len(grid) != 4 or grid[0] != 1 or grid[1] * grid[2] != tokens[1]:
        return None
    strides = [1, 1]
    slices: list[onnx.NodeProto] = []
    value = to_map.output[0]
    while True:
        readers = [n for n in graph.node if value in n.input]
        if len(readers) != 1 or value in outputs:
            return None
        node = readers[0]
        if node.op_type != "Slice":
            break
        picked = _strides(node, inits, grid)
        if picked is None:
            return None
        strides = [a * b for a, b in zip(strides, picked, strict=True)]
        slices.append(node)
        value = node.output[0]
    back = node
    out = shapes.get(back.output[0], ())
    picked_size = -(-grid[1] // strides[0]) * -(-grid[2] // strides[1])
    if not slices or back.op_type != "Reshape" or out != (1, picked_size, grid[3]):
        return None
    return slices, back, (strides[0], strides[1])


def _strides(
    node: onnx.NodeProto, inits: dict[str, np.ndarray], grid: tuple[int, ...]
) -> tuple[int, int] | None:
    """The (H, W) strides of a Slice of a (1, H, W, C) map that starts at 0 and runs to the
    end of axes 1 and 2 only; None otherwise."""
    found = [inits.get(name) if name else None for name in node.input[1:]]
    args = [a for a in found if a is not None]
    if len(args) < 2 or len(args) != len(found):
        return None
    starts, ends = args[0], args[1]
    axes = args[2] if len(args) > 2 else np.arange(len(starts))
    steps = args[3] if len(args) > 3 else np.ones(len(starts), np.int64)
    strides = [1, 1]
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=False):
        axis = int(axis) % 4
        if axis not in (1, 2) or start != 0 or step < 1 or min(end, _END) < grid[axis]:
            return None
        strides[axis - 1] = int(step)
    return strides[0], strides[1]

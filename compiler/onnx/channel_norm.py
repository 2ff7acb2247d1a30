"""LayerNorm over the channels of a map as a LayerNorm over its pixels as tokens.

timm's ``LayerNorm2d`` (ConvNeXt's stem, downsampling and blocks) exports as ``Transpose``
(0, 2, 3, 1) -> ``LayerNormalization`` (last axis) -> ``Transpose`` (0, 3, 1, 2). On the device a
map is stored channels-last, so its pixels already are tokens of its channels: the two
Transposes move no byte. The rewrite puts a ``Reshape`` to (1, H*W, C) after the first and one
back to (1, H, W, C) before the second, so that each pair is the ``map_to_tokens`` /
``tokens_to_map`` view the importer maps (:mod:`compiler.onnx.map_tokens`) and the LayerNorm
runs on tokens - on the norm unit where the config has one. It computes exactly what it
replaces.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["norms_over_channels"]

_TO_PIXELS, _TO_MAP = [0, 2, 3, 1], [0, 3, 1, 2]


def norms_over_channels(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` with each LayerNorm2d pattern (see the module doc) on tokens."""
    graph = proto.graph
    shapes = {
        v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
        for v in [*graph.value_info, *graph.input, *graph.output]
    }
    outputs = {o.name for o in graph.output}
    nodes = list(graph.node)
    for norm in [n for n in nodes if n.op_type == "LayerNormalization"]:
        first = next((n for n in nodes if norm.input[0] in n.output), None)
        readers = [n for n in nodes if norm.output[0] in n.input]
        if first is None or len(readers) != 1 or not _is_pattern(norm, first, readers[0]):
            continue
        source = shapes.get(first.input[0], ())
        if any(n is not norm for n in nodes if first.output[0] in n.input):
            continue  # the channels-last map is read elsewhere too
        if len(source) != 4 or source[0] != 1 or 0 in source or norm.output[0] in outputs:
            continue
        _, c, h, w = source
        # named as views of the values they reshape (the fake-quantized twin reads them so)
        tokens_in, tokens_out = f"{first.output[0]}#tokens", f"{norm.output[0]}#tokens"
        before = _reshape(graph, first.output[0], tokens_in, (1, h * w, c), f"{norm.name}/tokens")
        after = _reshape(graph, tokens_out, norm.output[0], (1, h, w, c), f"{norm.name}/map")
        norm.input[0], norm.output[0] = tokens_in, tokens_out
        at = nodes.index(norm)
        nodes[at : at + 1] = [before, norm, after]
        for name in (tokens_in, tokens_out):
            graph.value_info.append(
                helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, h * w, c])
            )
    del graph.node[:]
    graph.node.extend(nodes)
    return proto


def _is_pattern(norm: onnx.NodeProto, first: onnx.NodeProto, last: onnx.NodeProto) -> bool:
    axis = next((a.i for a in norm.attribute if a.name == "axis"), -1)
    return (
        axis in (-1, 3)
        and len([o for o in norm.output if o]) == 1
        and _perm(first) == _TO_PIXELS
        and _perm(last) == _TO_MAP
    )


def _perm(node: onnx.NodeProto) -> list[int]:
    if node.op_type != "Transpose":
        return []
    return next((list(a.ints) for a in node.attribute if a.name == "perm"), [])


def _reshape(
    graph: onnx.GraphProto, x: str, y: str, shape: tuple[int, ...], name: str
) -> onnx.NodeProto:
    target = f"{name}#shape"
    graph.initializer.append(numpy_helper.from_array(np.array(shape, np.int64), target))
    return helper.make_node("Reshape", [x, target], [y], name)

"""A Gather that takes every element of a flattened tensor in order is a Reshape.

torch.export writes ``as_strided`` of a contiguous tensor (ConvNeXt's head, exported by dynamo)
as a ``Reshape`` of the tensor to one axis, then a ``Gather`` along it by constant indices
``0, 1, ..., N-1`` laid out in the target shape. That moves no element: the rewrite makes the
Gather a ``Reshape`` of the tensor to the indices' shape (the importer's views then map it, or
onnxruntime runs it on the host) - or, to the tensor's own shape, the tensor itself - and drops
the flattening Reshape if nothing else reads it.
Indices in any other order or of fewer elements are left alone.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["gathers_as_reshapes"]


def gathers_as_reshapes(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` with each in-order Gather of a flattened tensor (see the module doc) a
    Reshape."""
    graph = proto.graph
    inits = {t.name: t for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    shapes = {
        v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
        for v in [*graph.value_info, *graph.input, *graph.output]
        if all(d.HasField("dim_value") for d in v.type.tensor_type.shape.dim)
    }
    outputs = {o.name for o in graph.output}
    for gather in [n for n in graph.node if n.op_type == "Gather" and len(n.input) == 2]:
        flat = producer.get(gather.input[0])
        indices = inits.get(gather.input[1])
        if flat is None or indices is None or not _flattens(flat, inits):
            continue
        order = numpy_helper.to_array(indices)
        shape = shapes.get(flat.input[0])
        size = None if shape is None else int(np.prod(shape))
        if order.dtype.kind not in "iu" or size is None or order.size != size:
            continue
        if not np.array_equal(order.reshape(-1), np.arange(size)) or _axis(gather) != 0:
            continue
        if order.shape == shape and gather.output[0] not in outputs:  # the tensor itself
            for node in graph.node:
                node.input[:] = [flat.input[0] if i == gather.output[0] else i for i in node.input]
            graph.node.remove(gather)
            _drop_unread(graph, flat, outputs)
            continue
        target = f"{gather.name}#shape"
        graph.initializer.append(numpy_helper.from_array(np.array(order.shape, np.int64), target))
        reshape = helper.make_node(
            "Reshape", [flat.input[0], target], list(gather.output), name=gather.name
        )
        at = list(graph.node).index(gather)
        graph.node.remove(gather)
        graph.node.insert(at, reshape)
        _drop_unread(graph, flat, outputs)
    return proto


def _drop_unread(graph: onnx.GraphProto, node: onnx.NodeProto, outputs: set[str]) -> None:
    if node.output[0] not in outputs and not any(node.output[0] in n.input for n in graph.node):
        graph.node.remove(node)


def _flattens(node: onnx.NodeProto, inits: dict[str, onnx.TensorProto]) -> bool:
    """``node`` is a Reshape to one axis (a constant target of one element)."""
    if node.op_type != "Reshape" or len(node.input) < 2 or node.input[1] not in inits:
        return False
    return numpy_helper.to_array(inits[node.input[1]]).size == 1


def _axis(node: onnx.NodeProto) -> int:
    return next((a.i for a in node.attribute if a.name == "axis"), 0)

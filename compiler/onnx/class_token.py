"""A Concat with constant pieces followed by the Add of a constant (a ViT's class token, then
its position embeddings) rewritten before import as the Concat of the pieces' sums:
``Concat(c, x) + p`` is ``Concat(c + p[:1], x + p[1:])``. The constant token's sum is computed
here in fp32 and quantized once, at the output's scale (as the host did when it ran both
nodes); each activation piece gets its own Add of its slice of ``p``, which the device writes
straight into its run of the Concat's tokens."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from .onnx_graph import RewriteGraph
from .read import attrs_of

__all__ = ["fold_class_tokens"]


def fold_class_tokens(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each such Concat + Add pair rewritten (others unchanged)."""
    g = RewriteGraph(model)
    changed = False
    for concat in [n for n in g.nodes if n.op_type == "Concat"]:
        add = g.only_reader(concat.output[0], "Add")
        if add is None or not any(i in g.consts for i in concat.input):
            continue
        pieces = _pieces(g, concat, add)
        if pieces is not None:
            g.replace(add, [])
            g.replace(concat, pieces)
            changed = True
    if not changed:
        return model
    g.commit(keep_shapes=True)
    return g.proto


def _pieces(
    g: RewriteGraph, concat: onnx.NodeProto, add: onnx.NodeProto
) -> list[onnx.NodeProto] | None:
    """The Adds of each activation piece and the new Concat (writing the Add's output), or
    None if ``add`` adds no constant of the Concat's float shape."""
    out = concat.output[0]
    p_name = add.input[1] if add.input[0] == out else add.input[0]
    p, shape = g.consts.get(p_name), g.shapes.get(out)
    shapes = [g.shapes.get(i) for i in concat.input]
    if p is None or shape is None or None in shapes or p.dtype != np.float32:
        return None
    if any(g.consts[i].dtype != np.float32 for i in concat.input if i in g.consts):
        return None
    try:
        full = np.broadcast_to(p, shape)
    except ValueError:
        return None
    axis = int(attrs_of(concat).get("axis", 0)) % len(shape)
    nodes, inputs, start = [], [], 0
    for i, name in enumerate(concat.input):
        size = shapes[i][axis]  # type: ignore[index]
        part = np.take(full, range(start, start + size), axis=axis)
        start += size
        if name in g.consts:  # fp32, as onnxruntime adds
            inputs.append(g.const(g.consts[name] + part, f"{name}+{p_name}", numbered=False))
            continue
        summed = g.unique(f"{add.name or out}.{i}")
        piece = g.const(part, f"{p_name}.{i}", numbered=False)
        nodes.append(g.node("Add", [name, piece], summed, summed))
        g.proto.graph.value_info.append(
            helper.make_tensor_value_info(summed, TensorProto.FLOAT, shapes[i])
        )
        inputs.append(summed)
    attrs = {a.name: helper.get_attribute_value(a) for a in concat.attribute}
    return [*nodes, g.node("Concat", inputs, add.output[0], add.name or concat.name, **attrs)]

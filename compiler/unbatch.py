"""A model with a fixed batch N > 1 as the same model at batch 1: the accelerator runs one
image per program, so a batch is N programs (run as one batch by :mod:`sim.batch`, one
simulator process on the RTL) whose outputs stack back to the model's (N, ...)."""

from __future__ import annotations

import onnx
from onnx import numpy_helper

from .errors import CompileError

__all__ = ["model_batch", "unbatch"]


def model_batch(model: onnx.ModelProto) -> int:
    """The fixed batch of the (first non-initializer) graph input; 1 if symbolic or none."""
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    if not inputs:
        return 1
    dims = inputs[0].type.tensor_type.shape.dim
    return int(dims[0].dim_value) if dims and dims[0].HasField("dim_value") else 1


def unbatch(model: onnx.ModelProto, batch: int) -> onnx.ModelProto:
    """``model`` (batch ``batch``) at batch 1: the input's and outputs' leading dimension and
    constant Reshape targets that start with ``batch`` become 1; shapes are inferred again. A
    model that does not infer at batch 1 is a :class:`CompileError` naming why."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    for value in [graph.input[0], *graph.output]:
        dims = value.type.tensor_type.shape.dim
        if dims and dims[0].HasField("dim_value") and dims[0].dim_value == batch:
            dims[0].dim_value = 1
    del graph.value_info[:]
    inits = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Reshape" and len(node.input) > 1 and node.input[1] in inits:
            target = numpy_helper.to_array(inits[node.input[1]]).copy()
            if target.size and target[0] == batch:
                target[0] = 1
                inits[node.input[1]].CopyFrom(numpy_helper.from_array(target, node.input[1]))
    try:
        return onnx.shape_inference.infer_shapes(out, strict_mode=True)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CompileError(
            None,
            "graph input",
            f"batch {batch} cannot run as {batch} programs of batch 1: {first}",
            "models whose batch only sets the input's and outputs' first dimension",
        ) from None

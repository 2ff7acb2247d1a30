"""A model with a fixed batch N > 1 as the same model at batch 1: the accelerator runs one
image per program, so a batch is N programs (run as one batch by :mod:`sim.runtime.batch`, one
simulator process on the RTL) whose outputs stack back to the model's (N, ...).

Dimension 0 is not always a batch (an LSTM's is the sequence): the batch-1 model is accepted
only if onnxruntime, run on seeded inputs, gives row by row what the model gives on the whole
batch."""

from __future__ import annotations

import onnx
from onnx import numpy_helper

from ..errors import CompileError

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
    name = graph.input[0].name
    why = "models whose batch only sets the input's and outputs' first dimension"
    try:
        single = onnx.shape_inference.infer_shapes(out, strict_mode=True)
        same = _rows_agree(model, single, batch)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CompileError(
            name,
            "graph input",
            f"batch {batch} cannot run as {batch} programs of batch 1: {first}",
            why,
        ) from None
    if not same:
        raise CompileError(
            name,
            "graph input",
            f"batch {batch} cannot run as {batch} programs of batch 1: the rows run one at a "
            "time differ from the whole batch (dimension 0 is not only a batch)",
            why,
        )
    return single


def _rows_agree(model: onnx.ModelProto, single: onnx.ModelProto, batch: int) -> bool:
    """Whether ``single`` run on each row of a seeded input gives ``model``'s outputs on the
    whole batch (onnxruntime, fp32)."""
    import numpy as np

    from ..calibrate import open_session, run_session

    whole, one = open_session(model, ()), open_session(single, ())
    shape = [int(d.dim_value) for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    outputs = [o.name for o in model.graph.output]
    want = run_session(whole, outputs, x)
    rows = [run_session(one, outputs, x[i : i + 1]) for i in range(batch)]
    for name in outputs:
        got = np.concatenate([r[name] for r in rows])
        if got.shape != want[name].shape or not np.allclose(got, want[name], rtol=1e-4, atol=1e-5):
            return False
    return True

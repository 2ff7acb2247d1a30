"""A decoder exported with its cache inputs and outputs - Hugging Face's ``past_key_values.N.key``
/ ``.value`` (1, H, past, d) and ``present.N.key`` / ``.value``, each present the ``Concat`` of
its past and the step's new rows along the positions - compiled as its prefill: the past bound
to length 0, so each ``Concat`` is its new rows and each present the layer's keys or values.

The executable's own KV cache (:mod:`compiler.kv_decode`) then does what the exported cache
inputs did: prefill writes every layer's keys and values into DRAM, and each decode step reads
them and appends its own (``make sim ... GENERATE=N``). The presents are no graph outputs of the
executable (the cache in DRAM is). A sequence dimension the exporter left symbolic is fixed to
the context: the static length of the ids if they have one, else the rows of the position
table (the one constant a ``Gather`` reads with positions made by a ``Range``). What was bound
is kept in the model's ``metadata_props`` under :data:`METADATA_KEY`.
"""

from __future__ import annotations

import json
from collections import defaultdict

import onnx
from onnx import TensorProto, helper

from ..errors import CompileError

__all__ = ["METADATA_KEY", "bind_empty_cache", "cache_io_of"]

METADATA_KEY = "cosim.kv_cache_io"
_SUPPORTED = (
    "cache inputs of rank 4 read by a Concat of the new rows along the positions (and Shape), "
    "with a symbolic past length"
)
_IDS = (TensorProto.INT64, TensorProto.INT32)
#: ops a position index passes through between its Range and the position table's Gather
_POSITION_PATH = {"Unsqueeze", "Expand", "Cast", "Add", "Reshape", "Identity", "Squeeze"}


def cache_io_of(model: onnx.ModelProto) -> dict | None:
    """What :func:`bind_empty_cache` bound: ``cache``, per past input [its name, its present
    output (or None), its positions axis], and ``context``; or None."""
    for prop in model.metadata_props:
        if prop.key == METADATA_KEY:
            return json.loads(prop.value)
    return None


def bind_empty_cache(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its cache inputs bound to length 0 (see the module docstring); a model
    without them - or without token ids - as it is."""
    graph = model.graph
    inits = {t.name for t in graph.initializer}
    if not any(v.name not in inits and v.type.tensor_type.elem_type in _IDS for v in graph.input):
        return model  # (no token ids: no decoder; an image Concat is no cache)
    for value in graph.input:
        if value.name not in inits:
            _see_through_copies(graph, value.name)
    readers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            readers[name].append(node)
    pasts = [
        v
        for v in graph.input
        if v.name not in inits and any(_concat_axis(n, v) is not None for n in readers[v.name])
        and v.type.tensor_type.elem_type == TensorProto.FLOAT
    ]  # fmt: skip
    if not pasts:
        return model
    pairs = [[past.name, *_bind(graph, past, readers[past.name])] for past in pasts]
    presents = {present for _, present, _ in pairs}
    context = _fix_sequence(model)
    kept = [v for v in graph.output if v.name not in presents]
    del graph.output[:]
    graph.output.extend(kept)
    names = {p.name for p in pasts}
    inputs = [v for v in graph.input if v.name not in names]
    del graph.input[:]
    graph.input.extend(inputs)
    record = {"cache": pairs, "context": context}
    helper.set_model_props(
        model, {**{p.key: p.value for p in model.metadata_props}, METADATA_KEY: json.dumps(record)}
    )
    return model


def _see_through_copies(graph: onnx.GraphProto, name: str) -> None:
    """Drop the copies of ``name`` - an Identity, or a Concat of it alone (TorchScript's export
    of a cache's first update) - their readers reading ``name`` instead."""
    outputs = {v.name for v in graph.output}
    copies = [n for n in graph.node if list(n.input) == [name] and n.output[0] not in outputs
              and (n.op_type == "Identity" or n.op_type == "Concat")]  # fmt: skip
    for copy in copies:
        graph.node.remove(copy)
        for node in graph.node:
            for i, value in enumerate(node.input):
                if value == copy.output[0]:
                    node.input[i] = name


def _concat_axis(node: onnx.NodeProto, past: onnx.ValueInfoProto) -> int | None:
    """The positions axis of a two-input ``Concat`` whose first input is ``past``, or None."""
    if node.op_type != "Concat" or len(node.input) != 2 or node.input[0] != past.name:
        return None
    rank = len(past.type.tensor_type.shape.dim)
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
    return axis % rank if rank == 4 else None


def _bind(
    graph: onnx.GraphProto, past: onnx.ValueInfoProto, readers: list[onnx.NodeProto]
) -> tuple[str | None, int]:
    """Rewrite the readers of ``past`` for a past of length 0: each Concat becomes an Identity
    of its new rows, each Shape a constant. Returns the present: the graph output among the
    Concats' outputs, if any, and the positions axis."""
    dims = past.type.tensor_type.shape.dim
    found = {_concat_axis(n, past) for n in readers if n.op_type == "Concat"}
    axes = {a for a in found if a is not None}
    odd = [n for n in readers if n.op_type not in ("Concat", "Shape")]
    if None in found or len(axes) != 1 or odd:
        node = odd[0] if odd else next(n for n in readers if n.op_type == "Concat")
        raise CompileError(
            node.name, node.op_type, f"reads the cache input '{past.name}'", _SUPPORTED
        )
    (axis,) = axes
    if dims[axis].dim_value > 0:
        raise CompileError(
            past.name,
            "graph input",
            f"has its past length fixed at {dims[axis].dim_value} by the export",
            _SUPPORTED,
        )
    shape = [0 if i == axis else d.dim_value for i, d in enumerate(dims)]
    if any(s < 1 for i, s in enumerate(shape) if i != axis):
        raise CompileError(past.name, "graph input", f"has dynamic dims {shape}", _SUPPORTED)
    outputs = {v.name for v in graph.output}
    present = None
    for node in readers:
        at = list(graph.node).index(node)
        if node.op_type == "Concat":
            new = helper.make_node("Identity", [node.input[1]], [node.output[0]], name=node.name)
            present = node.output[0] if node.output[0] in outputs else present
        else:
            start = next((a.i for a in node.attribute if a.name == "start"), 0)
            end = next((a.i for a in node.attribute if a.name == "end"), len(shape))
            value = helper.make_tensor(node.output[0], TensorProto.INT64, [len(shape[start:end])],
                                       shape[start:end])  # fmt: skip
            new = helper.make_node("Constant", [], [node.output[0]], name=node.name, value=value)
        graph.node.remove(node)
        graph.node.insert(at, new)
    return present, axis


def _fix_sequence(model: onnx.ModelProto) -> int:
    """Fix the symbolic sequence dimension of the integer inputs to the context; return it."""
    graph = model.graph
    inits = {t.name for t in graph.initializer}
    ints = [v for v in graph.input if v.name not in inits and v.type.tensor_type.elem_type in _IDS]
    static = [v.type.tensor_type.shape.dim[1].dim_value for v in ints
              if len(v.type.tensor_type.shape.dim) == 2]  # fmt: skip
    context = next((s for s in static if s > 0), None) or _position_rows(model)
    if context is None:
        name = ints[0].name if ints else graph.input[0].name
        raise CompileError(
            name,
            "graph input",
            "has a symbolic sequence length and the model no position table to fix it",
            "a static sequence length, or absolute position embeddings (a Gather of a Range)",
        )
    for value in ints:
        dims = value.type.tensor_type.shape.dim
        if len(dims) == 2 and dims[1].dim_value < 1:
            dims[1].Clear()
            dims[1].dim_value = context
    return context


def _position_rows(model: onnx.ModelProto) -> int | None:
    """Rows of the constant table a Gather reads with indices made by a Range, or None."""
    graph = model.graph
    tables = {t.name: tuple(t.dims) for t in graph.initializer if len(t.dims) == 2}
    producer = {o: n for n in graph.node for o in n.output}
    for node in graph.node:
        if node.op_type != "Gather" or node.input[0] not in tables:
            continue
        frontier, seen = [node.input[1]], set()
        while frontier:
            value = frontier.pop()
            seen.add(value)
            source = producer.get(value)
            if source is None:
                continue
            if source.op_type == "Range":
                return int(tables[node.input[0]][0])
            if source.op_type in _POSITION_PATH:
                frontier += [i for i in source.input if i and i not in seen]
    return None

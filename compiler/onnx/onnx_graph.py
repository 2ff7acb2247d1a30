"""The one mutable view of an ONNX graph that the rewrites before import work on (token
canonicalization, GELU fusion, QOperator models as QDQ): constants, static shapes (inferred on
first use), readers and producers, new names, new constants, and a commit that writes the node
list back and drops what nothing reads any more."""

from __future__ import annotations

import functools
import itertools
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .shape_inference import infer_shapes

__all__ = ["MOVES", "RewriteGraph", "constants", "first_free"]

#: ops that only move data (no arithmetic)
MOVES = frozenset(
    {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Gather", "Identity", "Flatten", "Slice",
     "Split"}
)  # fmt: skip


def constants(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Initializers and the values of ``Constant`` nodes, by name."""
    consts = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    for node in proto.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            consts[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return consts


def first_free(base: str, used: set[str]) -> str:
    """``base``, or ``base_k`` with the first k not in ``used``; added to ``used``."""
    name, k = base, 1
    while name in used:
        name, k = f"{base}_{k}", k + 1
    used.add(name)
    return name


class RewriteGraph:
    """The node list being rewritten, with shapes, constants and new names."""

    def __init__(self, proto: onnx.ModelProto) -> None:
        self.proto = proto
        self.consts = constants(proto)
        self.nodes = list(proto.graph.node)
        self.outputs = {o.name for o in proto.graph.output}
        self._names = itertools.count()
        self._used = {v for n in self.nodes for v in (*n.input, *n.output)} | set(self.consts)
        self._used |= {i.name for i in proto.graph.input}

    @functools.cached_property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Static shapes by name: ONNX shape inference's (lenient), and the constants'."""
        try:
            inferred = infer_shapes(self.proto)
        except Exception:  # noqa: BLE001 - the importer's strict inference names the problem
            inferred = self.proto
        shapes: dict[str, tuple[int, ...]] = {}
        graph = inferred.graph
        for value in itertools.chain(graph.input, graph.value_info, graph.output):
            dims = value.type.tensor_type.shape.dim
            if value.type.tensor_type.HasField("shape") and all(d.dim_value > 0 for d in dims):
                shapes[value.name] = tuple(d.dim_value for d in dims)
        for name, value in self.consts.items():
            shapes.setdefault(name, tuple(value.shape))
        return shapes

    def readers(self, name: str) -> list[onnx.NodeProto]:
        return [n for n in self.nodes if name in n.input]

    def producer(self, name: str) -> onnx.NodeProto | None:
        return next((n for n in self.nodes if name in n.output), None)

    def only_reader(self, name: str, op: str) -> onnx.NodeProto | None:
        """The single node reading ``name`` if it is an ``op`` (and ``name`` is no graph output)."""
        readers = self.readers(name)
        if len(readers) != 1 or name in self.outputs or readers[0].op_type != op:
            return None
        return readers[0]

    def const(self, array: np.ndarray, hint: str, *, numbered: bool = True) -> str:
        """A new initializer holding ``array``, named :meth:`fresh` (or :meth:`unique`)."""
        name = self.fresh(hint) if numbered else self.unique(hint)
        self.consts[name] = np.asarray(array)
        self.proto.graph.initializer.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def fresh(self, hint: str) -> str:
        """``hint`` with the next number of this view (``x/canon3``)."""
        return f"{hint}/canon{next(self._names)}"

    def unique(self, base: str) -> str:
        """``base``, or ``base_1``, ``base_2``, ...: the first name the graph does not use yet."""
        return first_free(base, self._used)

    def node(
        self, op: str, inputs: list[str], output: str, name: str, **attrs: Any
    ) -> onnx.NodeProto:
        return helper.make_node(op, inputs, [output], name=name, **attrs)

    def reshape(self, x: str, shape: tuple[int, ...], output: str, name: str) -> onnx.NodeProto:
        target = self.const(np.array(shape, np.int64), f"{name}/shape")
        return self.node("Reshape", [x, target], output, name)

    def replace(self, old: onnx.NodeProto, new: list[onnx.NodeProto]) -> None:
        at = next(i for i, n in enumerate(self.nodes) if n is old)
        self.nodes[at : at + 1] = new

    def commit(self, *, keep_shapes: bool = False) -> onnx.ModelProto:
        """The proto with the node list written back, dead movement and constant nodes and
        unread initializers dropped, and the inferred shapes dropped (``keep_shapes``: those of
        the values still produced, for a rewrite that keeps every value's shape)."""
        keep = self.outputs | {i.name for i in self.proto.graph.input}
        used = {i for n in self.nodes for i in n.input} | keep
        while True:  # drop movement and constant nodes nothing reads any more
            dead = [n for n in self.nodes if n.op_type in MOVES | {"Constant"}
                    and not any(o in used for o in n.output)]  # fmt: skip
            if not dead:
                break
            self.nodes = [n for n in self.nodes if all(n is not d for d in dead)]
            used = {i for n in self.nodes for i in n.input} | keep
        del self.proto.graph.node[:]
        self.proto.graph.node.extend(self.nodes)
        kept = [t for t in self.proto.graph.initializer if t.name in used]
        del self.proto.graph.initializer[:]
        self.proto.graph.initializer.extend(kept)
        produced = {o for n in self.nodes for o in n.output}
        shapes = [v for v in self.proto.graph.value_info if keep_shapes and v.name in produced]
        del self.proto.graph.value_info[:]
        self.proto.graph.value_info.extend(shapes)
        return self.proto

"""A mutable view of an ONNX graph for rewrites before import: constants, static shapes,
readers and producers, fresh names, and a commit that drops what nothing reads any more."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .shape_inference import infer_shapes

__all__ = ["MOVES", "RewriteGraph", "constants"]

#: ops that only move data (no arithmetic)
MOVES = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Gather", "Identity", "Flatten"})


def constants(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Initializers and the values of ``Constant`` nodes, by name."""
    consts = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    for node in proto.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            consts[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return consts


class RewriteGraph:
    """The node list being rewritten, with shapes, constants and fresh names."""

    def __init__(self, proto: onnx.ModelProto) -> None:
        self.proto = proto
        try:
            inferred = infer_shapes(proto)
        except Exception:  # noqa: BLE001 - the importer's strict inference names the problem
            inferred = proto
        self.shapes: dict[str, tuple[int, ...]] = {}
        graph = inferred.graph
        for value in itertools.chain(graph.input, graph.value_info, graph.output):
            dims = value.type.tensor_type.shape.dim
            if value.type.tensor_type.HasField("shape") and all(d.dim_value > 0 for d in dims):
                self.shapes[value.name] = tuple(d.dim_value for d in dims)
        self.consts = constants(proto)
        for name, value in self.consts.items():
            self.shapes.setdefault(name, tuple(value.shape))
        self.nodes = list(proto.graph.node)
        self.outputs = {o.name for o in proto.graph.output}
        self._names = itertools.count()

    def readers(self, name: str) -> list[onnx.NodeProto]:
        return [n for n in self.nodes if name in n.input]

    def producer(self, name: str) -> onnx.NodeProto | None:
        return next((n for n in self.nodes if name in n.output), None)

    def const(self, array: np.ndarray, hint: str) -> str:
        name = self.fresh(hint)
        self.consts[name] = np.asarray(array)
        self.proto.graph.initializer.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def fresh(self, hint: str) -> str:
        return f"{hint}/canon{next(self._names)}"

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

    def commit(self) -> onnx.ModelProto:
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
        del self.proto.graph.value_info[:]
        return self.proto

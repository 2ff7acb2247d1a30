"""GELU as exporters write it, fused into one node before import.

``torch.onnx.export`` below opset 20 writes exact GELU as ``x * 0.5 * (1 + erf(x / sqrt(2)))``:
``Div`` (or ``Mul`` by 1/sqrt(2)), ``Erf``, ``Add`` of 1, and two ``Mul`` - by x and by 0.5, in
either order. Each such chain becomes onnxruntime's ``com.microsoft`` ``Gelu`` (the same exact
function, one node), so the importer sees one elementwise activation - a lookup table - and
calibration and host regions run the fused model on onnxruntime like any other.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["MS_DOMAIN", "fuse_gelu"]

MS_DOMAIN = "com.microsoft"
_RTOL = 1e-4


def _scalar(consts: dict[str, np.ndarray], name: str) -> float | None:
    value = consts.get(name)
    if value is None or value.size != 1:
        return None
    return float(value.reshape(()))


def _other(node: onnx.NodeProto, name: str) -> str | None:
    """The other input of a two-input node that reads ``name``."""
    if len(node.input) != 2 or name not in node.input:
        return None
    return node.input[1] if node.input[0] == name else node.input[0]


def _is(value: float | None, target: float) -> bool:
    return value is not None and math.isclose(value, target, rel_tol=_RTOL)


class _Graph:
    def __init__(self, proto: onnx.ModelProto) -> None:
        graph = proto.graph
        self.nodes = list(graph.node)
        self.consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        for node in graph.node:
            if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
                self.consts[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for name in node.input:
                self.readers.setdefault(name, []).append(node)
        self.outputs = {o.name for o in graph.output}

    def only_reader(self, name: str, op: str) -> onnx.NodeProto | None:
        """The single node reading ``name`` if it is an ``op`` (and ``name`` is no graph output)."""
        readers = self.readers.get(name, [])
        if len(readers) != 1 or name in self.outputs or readers[0].op_type != op:
            return None
        return readers[0]

    def match(self, erf: onnx.NodeProto) -> tuple[str, list[onnx.NodeProto]] | None:
        """(x, the chain's nodes in order) if ``erf`` is the Erf of an exact GELU, else None."""
        scaled = next(
            (n for n in self._producers(erf.input[0]) if n.op_type in ("Div", "Mul")), None
        )
        if scaled is None or len(self.readers.get(erf.input[0], [])) != 1:
            return None
        x = scaled.input[0]
        c = _scalar(self.consts, scaled.input[1])
        if scaled.op_type == "Mul" and c is None:
            x, c = scaled.input[1], _scalar(self.consts, scaled.input[0])
        wanted = math.sqrt(2.0) if scaled.op_type == "Div" else 1.0 / math.sqrt(2.0)
        if not _is(c, wanted) or x in self.consts:
            return None
        add = self.only_reader(erf.output[0], "Add")
        if add is None or not _is(_scalar(self.consts, _other(add, erf.output[0]) or ""), 1.0):
            return None
        times = self.only_reader(add.output[0], "Mul")
        if times is None:
            return None
        factor = _other(times, add.output[0])
        half = _scalar(self.consts, factor or "")
        if factor == x:  # x * (1 + erf), then * 0.5
            last = self.only_reader(times.output[0], "Mul")
            other = _other(last, times.output[0]) if last is not None else None
            if last is None or not _is(_scalar(self.consts, other or ""), 0.5):
                return None
            return x, [scaled, erf, add, times, last]
        # (x * 0.5) * (1 + erf): the factor is a Mul of x by 0.5 read only here
        pre = next((n for n in self._producers(factor or "") if n.op_type == "Mul"), None)
        if half is not None or pre is None or len(self.readers.get(factor or "", [])) != 1:
            return None
        if x not in pre.input or not _is(_scalar(self.consts, _other(pre, x) or ""), 0.5):
            return None
        return x, [scaled, erf, add, pre, times]

    def _producers(self, name: str) -> list[onnx.NodeProto]:
        return [n for n in self.nodes if name in n.output]


def fuse_gelu(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` with every exact-GELU chain replaced by one ``com.microsoft`` Gelu node (named
    after the chain's Erf, writing the chain's output); unchanged if there is none."""
    view = _Graph(proto)
    fused: dict[int, onnx.NodeProto] = {}  # index of the chain's last node -> its Gelu
    dropped: set[int] = set()
    index = {id(n): i for i, n in enumerate(view.nodes)}
    for erf in (n for n in view.nodes if n.op_type == "Erf"):
        found = view.match(erf)
        if found is None:
            continue
        x, chain = found
        gelu = helper.make_node(
            "Gelu", [x], [chain[-1].output[0]], name=erf.name or None, domain=MS_DOMAIN
        )
        positions = [index[id(n)] for n in chain]
        fused[max(positions)] = gelu
        dropped.update(positions)
    if not fused:
        return proto
    nodes = []
    for i, node in enumerate(view.nodes):
        if i in fused:
            nodes.append(fused[i])
        elif i not in dropped:
            nodes.append(node)
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    if not any(o.domain == MS_DOMAIN for o in proto.opset_import):
        proto.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return proto

"""GELU as exporters write it, fused into one node before import.

``torch.onnx.export`` below opset 20 writes exact GELU as ``x * 0.5 * (1 + erf(x / sqrt(2)))``:
``Div`` (or ``Mul`` by 1/sqrt(2)), ``Erf``, ``Add`` of 1, and two ``Mul`` - by x and by 0.5, in
either order. Each such chain becomes onnxruntime's ``com.microsoft`` ``Gelu`` (the same exact
function, one node), so the importer sees one elementwise activation - a lookup table - and
calibration and host regions run the fused model on onnxruntime like any other.

The tanh approximation, ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))``, is written
in many orders (x*x*x or Pow, the constants on either side, 0.5 first or last). It is found by
value rather than by shape: from each ``Tanh``, the elementwise nodes around it are evaluated on
probe values of each candidate x, and the node whose output is that function of x (to 1e-5)
closes the chain, which becomes ``com.microsoft`` ``FastGelu`` (the same function) if nothing
outside the chain reads its intermediate values.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper

from .onnx_graph import RewriteGraph

__all__ = ["FUSED_OPS", "MS_DOMAIN", "fuse_gelu"]

MS_DOMAIN = "com.microsoft"
#: the com.microsoft ops this module writes, which the importer maps to lookup tables
FUSED_OPS = ("Gelu", "FastGelu")
_RTOL = 1e-4
_PROBE = np.linspace(-5.0, 5.0, 101)
_ELEMENTWISE = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power,
}  # fmt: skip


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


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


def _match(g: RewriteGraph, erf: onnx.NodeProto) -> tuple[str, list[onnx.NodeProto]] | None:
    """(x, the chain's nodes in order) if ``erf`` is the Erf of an exact GELU, else None."""
    scaled = g.producer(erf.input[0])
    if scaled is None or scaled.op_type not in ("Div", "Mul") or len(g.readers(erf.input[0])) != 1:
        return None
    x = scaled.input[0]
    c = _scalar(g.consts, scaled.input[1])
    if scaled.op_type == "Mul" and c is None:
        x, c = scaled.input[1], _scalar(g.consts, scaled.input[0])
    wanted = math.sqrt(2.0) if scaled.op_type == "Div" else 1.0 / math.sqrt(2.0)
    if not _is(c, wanted) or x in g.consts:
        return None
    add = g.only_reader(erf.output[0], "Add")
    if add is None or not _is(_scalar(g.consts, _other(add, erf.output[0]) or ""), 1.0):
        return None
    times = g.only_reader(add.output[0], "Mul")
    if times is None:
        return None
    factor = _other(times, add.output[0])
    half = _scalar(g.consts, factor or "")
    if factor == x:  # x * (1 + erf), then * 0.5
        last = g.only_reader(times.output[0], "Mul")
        other = _other(last, times.output[0]) if last is not None else None
        if last is None or not _is(_scalar(g.consts, other or ""), 0.5):
            return None
        return x, [scaled, erf, add, times, last]
    # (x * 0.5) * (1 + erf): the factor is a Mul of x by 0.5 read only here
    pre = g.producer(factor or "")
    if half is not None or pre is None or pre.op_type != "Mul" or len(g.readers(factor or "")) != 1:
        return None
    if x not in pre.input or not _is(_scalar(g.consts, _other(pre, x) or ""), 0.5):
        return None
    return x, [scaled, erf, add, pre, times]


def _match_tanh(g: RewriteGraph, tanh: onnx.NodeProto) -> tuple[str, list[onnx.NodeProto]] | None:
    """(x, the chain's nodes in graph order) if ``tanh`` is inside a tanh-approximated
    GELU of x, else None."""
    for x in _upstream(g, tanh.input[0]):
        values = {x: _PROBE}
        made: dict[str, onnx.NodeProto] = {}
        for node in g.nodes:
            value = _evaluate(g, node, values)
            if value is not None:
                values[node.output[0]] = value
                made[node.output[0]] = node
        for out in made:
            chain = _ancestors(g, out, x, made)
            if tanh in chain and np.allclose(values[out], _gelu_tanh(_PROBE), rtol=0, atol=1e-5):
                inner = {n.output[0] for n in chain} - {out}
                if all(_read_within(g, v, chain) for v in inner):
                    return x, chain
    return None


def _upstream(g: RewriteGraph, name: str) -> list[str]:
    """``name`` and the values it is computed from through elementwise nodes, nearest first."""
    found: list[str] = []
    todo = [name]
    while todo and len(found) < 8:
        value = todo.pop(0)
        found.append(value)
        node = g.producer(value)
        if node is not None and (node.op_type in _ELEMENTWISE or node.op_type == "Tanh"):
            todo += [i for i in node.input if i not in g.consts and i not in found]
    return found


def _evaluate(
    g: RewriteGraph, node: onnx.NodeProto, values: dict[str, np.ndarray]
) -> np.ndarray | None:
    if node.op_type not in _ELEMENTWISE and node.op_type != "Tanh":
        return None
    if not any(i in values for i in node.input) or node.output[0] in values:
        return None
    args: list[np.ndarray] = []
    for name in node.input:
        if name in values:
            args.append(values[name])
        elif name in g.consts and g.consts[name].size == 1:
            args.append(np.float64(g.consts[name].reshape(())))  # type: ignore[arg-type]
        else:
            return None  # an activation from outside, or a constant that is no scalar
    if node.op_type == "Tanh":
        return np.tanh(np.asarray(args[0]))
    return np.asarray(_ELEMENTWISE[node.op_type](*args))


def _ancestors(
    g: RewriteGraph, out: str, x: str, made: dict[str, onnx.NodeProto]
) -> list[onnx.NodeProto]:
    """The evaluated nodes ``out`` is computed from, back to ``x``, in graph order."""
    seen: set[str] = set()
    todo = [out]
    while todo:
        value = todo.pop()
        if value in seen or value not in made:
            continue
        seen.add(value)
        todo += list(made[value].input)
    return [n for n in g.nodes if n.output[0] in seen]


def _read_within(g: RewriteGraph, value: str, chain: list[onnx.NodeProto]) -> bool:
    return value not in g.outputs and all(any(r is n for n in chain) for r in g.readers(value))


def fuse_gelu(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` with every GELU chain replaced by one ``com.microsoft`` Gelu (exact) or FastGelu
    (tanh) node, named after the chain's Erf or Tanh and writing the chain's output; unchanged
    if there is none."""
    view = RewriteGraph(proto)
    fused: dict[int, onnx.NodeProto] = {}  # index of the chain's last node -> its Gelu
    dropped: set[int] = set()
    index = {id(n): i for i, n in enumerate(view.nodes)}
    for core in (n for n in view.nodes if n.op_type in ("Erf", "Tanh")):
        if index[id(core)] in dropped:
            continue
        found = _match(view, core) if core.op_type == "Erf" else _match_tanh(view, core)
        if found is None:
            continue
        x, chain = found
        op = "Gelu" if core.op_type == "Erf" else "FastGelu"
        gelu = helper.make_node(
            op, [x], [chain[-1].output[0]], name=core.name or None, domain=MS_DOMAIN
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
    view.nodes = nodes
    proto = view.commit(keep_shapes=True)
    if not any(o.domain == MS_DOMAIN for o in proto.opset_import):
        proto.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return proto

"""Host regions: the ONNX nodes placed on the host, formed into ``host`` IR nodes.

The importer marks every node it cannot map (an op without a handler, or one its handler
refuses) with :func:`mark_host`; after the last node, :func:`form_regions` replaces each run of
consecutive marks by one ``host`` node per value read outside it, holding the run's ONNX model
(:mod:`compiler.onnx.host_models`). Nodes that onnxruntime cannot run either are collected in
``state.blockers``.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from arch.host_runtime import HostModelError

from ..errors import CompileError, Unplaceable
from ..ir import Node, Tensor
from . import host_models
from .read import (
    elem_type,
    shape_of,
)
from .state import HostMark, ImportState, ir_shape

__all__ = ["CARRIED", "CARRY", "form_regions", "mark_host"]

#: Types of host values that cross to another host region as float, under the name
#: ``<value>#float``, and are cast back there: bool masks, as int8 codes 0 and 1 of scale 1
#: (exact). An integer value (an index) would be rounded by its int8 codes: refused.
CARRIED = frozenset({TensorProto.BOOL})
CARRY = "#float"


#: Ops whose output differs from one run to the next: no reference can check what follows.
NOT_DETERMINISTIC = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial"}
    | {"Bernoulli"}
)


def mark_host(st: ImportState, index: int, node: onnx.NodeProto, name: str, reason: str) -> None:
    """Place ``node`` on the host: its outputs become fp32 tensors of the inferred shapes
    (its region is formed after the last node). An op that is not deterministic is refused."""
    if node.op_type in NOT_DETERMINISTIC:
        raise CompileError(
            name,
            node.op_type,
            "draws random numbers: its output differs from run to run, so no reference can "
            "check the layers after it",
            "deterministic ops (a random input belongs in the input, IMAGE=)",
        )
    st.marks.append(HostMark(index, name, node, reason))
    placeholder = Node(name, "host", [], node.output[0], {"mark": len(st.marks) - 1})
    st.nodes.append(placeholder)
    for out in node.output:
        if out and out in st.inferred:
            st.tensors[out] = Tensor(out, ir_shape(st.inferred[out]))
            st.alias[out] = out


def form_regions(st: ImportState) -> None:
    """Replace runs of host placeholders by ``host`` nodes, one per value read outside."""
    result: list[Node] = []
    run: list[HostMark] = []
    for ir in [*st.nodes, None]:
        if ir is not None and _is_placeholder(ir):
            mark = st.marks[ir.attrs["mark"]]
            produced = {o for m in run for o in m.node.output}
            fed_inside = any(
                i in st.alias and st.alias[i] in produced and i not in produced
                for i in mark.node.input
            )
            if run and fed_inside:  # reads a region value through an outside node
                result += region(st, run)
                run = []
            run.append(mark)
            continue
        if run:
            result += region(st, run)
            run = []
        if ir is not None:
            result.append(ir)
    st.nodes = result


def region(st: ImportState, marks: list[HostMark]) -> list[Node]:
    """The ``host`` IR nodes of one region (one per value read outside it); none if the region
    cannot run (its nodes are then named in ``st.blockers``)."""
    nodes = [m.node for m in marks]
    feeds, fetches = _feeds_and_fetches(st, marks)
    if not feeds:
        st.blockers.append(_unfoldable(st, marks[0]))
        return []
    if not _feeds_ok(st, marks, feeds):
        return []
    _retry_bad_rank(st, fetches)
    model_feeds, reshapes, consts = region_feeds(st, feeds)
    not_float = [f for f in fetches if elem_type(st, f) != TensorProto.FLOAT]
    first = marks[0]
    refused = [f for f in not_float if elem_type(st, f) not in CARRIED]
    if refused:
        kind = TensorProto.DataType.Name(elem_type(st, refused[0]))
        st.blockers.append(
            f"'{first.name}' ({first.node.op_type}): its {kind} output '{refused[0]}' is "
            "read by nodes after an accelerator node (host regions pass float values, and "
            "bool masks as codes 0 and 1)"
        )
        return []
    carry = [
        helper.make_node("Cast", [f], [f"{f}{CARRY}"], to=TensorProto.FLOAT) for f in not_float
    ]
    outputs = {f: f"{f}{CARRY}" if f in not_float else f for f in fetches}
    model = host_models.make_model(
        st.proto,
        reshapes + nodes + carry,
        model_feeds,
        [(outputs[o], TensorProto.FLOAT, st.inferred.get(o)) for o in fetches],
        consts,
    )
    model_ok = True
    try:
        host_models.check(model)
    except HostModelError:
        model_ok = False
        st.blockers += blockers_of(st, marks)
    unshaped = [f for f in fetches if f not in st.inferred]
    if unshaped:
        if model_ok:  # else the region's blockers are named already
            st.blockers.append(
                f"'{first.name}' ({first.node.op_type}): output '{unshaped[0]}' has no static shape"
            )
        return []
    for f in not_float:  # 0 and 1 as codes of scale 1: exact (the quantize pass keeps it)
        st.tensors[f] = Tensor(f, st.tensors[f].shape, 1.0, 0)
    out_nodes = _host_nodes(st, marks, feeds, outputs, [f for f, _ in model_feeds], model)
    for n in nodes:  # values only the region reads stay out of the IR
        for o in n.output:
            if o and o not in fetches:
                st.tensors.pop(o, None)
    return out_nodes


def _feeds_and_fetches(st: ImportState, marks: list[HostMark]) -> tuple[list[str], list[str]]:
    """The activations a region reads, and its values read outside it."""
    nodes = [m.node for m in marks]
    produced = {o for n in nodes for o in n.output if o}
    feeds: list[str] = []
    for value in (v for n in nodes for v in n.input):
        if value and value not in produced and value not in st.consts and value not in feeds:
            feeds.append(value)
    read_later = {i for ir in st.nodes if not _is_placeholder(ir) for i in ir.inputs}
    # ONNX values read outside the region (graph outputs included), through aliases: a
    # Cast or Identity between the region's nodes reads its values too.
    inside = {m.index for m in marks}
    outside = {
        i
        for k, n in enumerate(st.proto.graph.node)
        if k > marks[0].index and k not in inside
        for i in n.input
    } | {o.name for o in st.proto.graph.output}
    resolved = {st.alias.get(v, v) for v in outside}
    fetches = [o for n in nodes for o in n.output if o and (o in read_later or o in resolved)]
    return feeds, fetches


def _unfoldable(st: ImportState, mark: HostMark) -> str:
    """Why a region that reads only constants (a host step of no input) cannot be: its first
    node could not be folded at compile time."""
    why = "it cannot be computed at compile time"
    if all(i in st.consts for i in mark.node.input if i):
        try:
            host_models.fold_constants(st.proto, mark.node, st.consts)
        except HostModelError as exc:
            why = str(exc)
    return f"'{mark.name}' ({mark.node.op_type}): its inputs are all constants, and {why}"


def _feeds_ok(st: ImportState, marks: list[HostMark], feeds: list[str]) -> bool:
    """False (the region's nodes named as blockers) if a feed is computed nowhere; int8 codes
    as a feed are an error."""
    first = marks[0]
    for value in feeds:
        if value not in st.alias:
            st.blockers += blockers_of(st, marks)
            return False
        if value in st.qview:
            # say first why the node reading the codes was not placed on the accelerator
            # (a bad scale, a refused zero point): that is what the user has to change
            mark = next((m for m in marks if value in m.node.input), first)
            raise CompileError(
                mark.name,
                mark.node.op_type,
                f"{mark.reason}; on the host instead, it would read int8 codes '{value}'",
                "float inputs for host nodes",
            )
    return True


def _retry_bad_rank(st: ImportState, fetches: list[str]) -> None:
    """Accelerator nodes reading a host value of a rank the IR lacks go to the host too
    (:func:`compiler.placement.place` imports again)."""
    bad_rank = [o for o in fetches if len(st.inferred.get(o, ())) not in (2, 3, 4)]
    consumers = {
        st.origins[ir.name]
        for ir in st.nodes
        if ir.name in st.origins
        and not _is_placeholder(ir)
        and any(o in ir.inputs for o in bad_rank)
    }
    if consumers - set(st.forced):
        raise Unplaceable(
            None,
            None,
            "reads a host value of a shape the accelerator lacks",
            indices=frozenset(consumers),
        )


def _host_nodes(
    st: ImportState,
    marks: list[HostMark],
    feeds: list[str],
    fetches: dict[str, str],
    model_feeds: list[str],
    model: bytes,
) -> list[Node]:
    """One ``host`` node per fetched value (value -> the model's output of it), all running
    the region's model."""
    first = marks[0]
    ops = tuple(dict.fromkeys(m.node.op_type for m in marks))
    macs = host_models.count_macs([m.node for m in marks], st.inferred, st.consts)
    out_nodes = []
    for k, (fetch, output) in enumerate(fetches.items()):
        name = first.name if k == 0 else st.unique(f"{first.name}:{fetch}")
        attrs = {
            "onnx_ops": ops,
            "feeds": tuple(model_feeds),
            "fetch": output,
            "macs": macs if k == 0 else 0,
        }
        params = {"model": np.frombuffer(model, np.uint8).copy()}
        inputs = [st.alias[v] for v in feeds]
        out_nodes.append(Node(name, "host", inputs, fetch, attrs, params, [m.name for m in marks]))
        st.origins[name] = first.index
        st.host_reasons[name] = "; ".join(f"{m.name} ({m.node.op_type}): {m.reason}" for m in marks)
    return out_nodes


def _is_placeholder(ir: Node) -> bool:
    """A host node marked by :func:`mark_host` whose region is not formed yet."""
    return ir.op == "host" and "mark" in ir.attrs


def region_feeds(
    st: ImportState, feeds: list[str]
) -> tuple[list[tuple[str, tuple[int, ...]]], list[onnx.NodeProto], dict[str, np.ndarray]]:
    """A host model's inputs in the IR's shapes and types: a (1, C, L) value the IR holds as
    (1, C, 1, L) enters as ``<name>#ir`` and is reshaped back inside the model; a bool or
    integer value another region carried as float (:data:`CARRY`) is cast back."""
    model_feeds, moves, consts = [], [], st.consts
    for v in feeds:
        shape, onnx_shape = shape_of(st, st.alias[v]), st.inferred.get(v)
        carried = elem_type(st, v) in CARRIED
        entry = f"{v}{CARRY}" if carried else v
        if onnx_shape is not None and len(onnx_shape) != len(shape):
            if consts is st.consts:
                consts = dict(st.consts)
            consts[f"{v}#shape"] = np.array(onnx_shape, np.int64)
            moves.append(helper.make_node("Reshape", [f"{v}#ir", f"{v}#shape"], [entry]))
            model_feeds.append((f"{v}#ir", shape))
        else:
            model_feeds.append((entry, shape))
        if carried:
            moves.append(helper.make_node("Cast", [entry], [v], to=elem_type(st, v)))
    return model_feeds, moves, consts


def blockers_of(st: ImportState, marks: list[HostMark]) -> list[str]:
    """The nodes of a region onnxruntime refuses, each tried alone, with its reason."""
    found = []
    for mark in marks:
        node = mark.node
        feeds = [(v, st.inferred.get(v)) for v in node.input if v and v not in st.consts]
        fetches = [(o, elem_type(st, o), st.inferred.get(o)) for o in node.output if o]
        model = host_models.make_model(st.proto, [node], feeds, fetches, st.consts)
        try:
            host_models.check(model)
        except HostModelError as exc:
            op = f"{node.domain}.{node.op_type}" if node.domain else node.op_type
            found.append(f"'{mark.name}' ({op}): {mark.reason}, and {exc}")
    return found or [f"'{marks[0].name}' ({marks[0].node.op_type}) and the nodes after it"]

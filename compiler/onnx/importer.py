"""The import driver: each ONNX node folded, imported by its handler, or placed on the host.

:func:`load_onnx` prepares the model (:mod:`compiler.onnx.prepare`), then walks its nodes once:
a node whose inputs are all known is folded into a constant; any other goes to its handler
(:mod:`compiler.onnx.registry`), and to the host (:mod:`compiler.onnx.host_regions`) if it has
none or the handler refuses it - the state rolled back to before the handler ran.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from arch.host_runtime import HostModelError

from ..errors import CompileError
from ..ir import Graph, Tensor
from ..placement import place
from . import host_models
from .gelu_pattern import FUSED_OPS, MS_DOMAIN
from .host_regions import form_regions, mark_host
from .prepare import OnnxModel, prepare, read_model
from .qdq_params import BadScale
from .read import attrs_of, elem_type, shape_of
from .registry import HANDLERS
from .state import ImportState, ir_shape
from .token_inputs import TOKENS_INPUT, token_inputs_of

__all__ = ["import_prepared", "load_onnx", "prepare_model"]

#: IR ops that exist only to be folded into the node before them (canonicalize): after a host
#: node there is nothing to fold them into, so they join it on the host.
_FOLDED_INTO_PRODUCER = ("batchnorm", "relu", "relu6", "bias_add", "table")
#: Element types of values no accelerator op reads (int8 and uint8 codes are QDQ's)
_NOT_ACTIVATIONS = frozenset({TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL})


def load_onnx(model: str | Path | onnx.ModelProto, host: Mapping[int, str] | None = None) -> Graph:
    """Import an ONNX model (file path or proto, not modified) as an fp32-stage graph; the ONNX
    nodes with indices in ``host`` go to the host whatever their op (for the reason given).

    Raises
    ------
    CompileError
        For a missing or unreadable file, a graph input that is not a static fp32 tensor, or
        nodes that neither the accelerator nor onnxruntime can run (all named at once).
    """
    prepared = prepare_model(model)
    return place(lambda placement: import_prepared(prepared, placement.forced), host)


def prepare_model(model: str | Path | onnx.ModelProto) -> OnnxModel:
    """``model`` read and through the ONNX-level passes, ready to import (again and again)."""
    return prepare(read_model(model))


def import_prepared(
    prepared: OnnxModel, forced: Mapping[int, str], norm_unit: bool = False
) -> Graph:
    """The verified IR graph of a prepared model, the ONNX nodes ``forced`` on the host; an
    :class:`~compiler.errors.Unplaceable` names accelerator nodes to force there too.
    ``norm_unit``: the target has the norm unit (else LayerNorm and Softmax go to the host)."""
    graph = import_graph(ImportState.of(prepared.proto, forced, norm_unit))
    if prepared.inference_error is not None:  # the handlers found nothing more specific
        raise prepared.inference_error
    graph.verify()
    return graph


def import_graph(st: ImportState) -> Graph:
    """The IR graph of ``st.proto``, every node imported, folded or placed on the host."""
    graph = st.proto.graph
    (x,) = [i for i in graph.input if i.name not in st.consts]
    shape = tuple(int(d.dim_value) for d in x.type.tensor_type.shape.dim)
    # Ranks other than 2, 3 and 4 are left to the op handlers (which name the node) and to
    # Graph.verify.
    # packed token ids are base-128 digits: int8 codes of scale 1 hold them exactly
    tokens = token_inputs_of(st.proto) is not None
    st.tensors[x.name] = Tensor(x.name, ir_shape(shape), 1.0 if tokens else None, 0)
    st.alias[x.name] = x.name
    for index, node in enumerate(graph.node):
        name = st.unique(node.name or f"{node.op_type}_{index}")
        if fold(st, node, name):
            continue
        start = len(st.nodes)
        reason = try_handler(st, index, node, name)
        if reason is not None and not fold_refused(st, node):
            mark_host(st, index, node, name, reason)
        for ir in st.nodes[start:]:
            st.origins.setdefault(ir.name, index)
    form_regions(st)
    _check_complete(st)
    outputs = []
    for out in graph.output:
        if out.name not in st.alias:
            raise CompileError(
                out.name, "graph output", "is not computed from the input (a constant?)"
            )
        outputs.append(st.alias[out.name])
    return Graph(
        st.nodes,
        st.tensors,
        [x.name],
        outputs,
        quantized=False,
        source=st.proto,
        origins=st.origins,
        host_reasons=st.host_reasons,
    )


def _check_complete(st: ImportState) -> None:
    """Refuse a graph with nodes nothing can run, or an integer accumulator never scaled."""
    if st.blockers:
        raise CompileError(
            None,
            "model",
            f"{len(st.blockers)} node(s) can run neither on the accelerator nor on the host: "
            + "; ".join(st.blockers),
        )
    for p in st.pending.values():
        raise CompileError(
            p.node.name,
            "ConvInteger" if p.node.op == "conv" else "MatMulInteger",
            "the int32 output is never scaled",
            "ConvInteger/MatMulInteger -> Cast(to=FLOAT) -> Mul(scale)",
        )


def try_handler(st: ImportState, index: int, node: onnx.NodeProto, name: str) -> str | None:
    """Import ``node`` with its handler; the reason it goes to the host if it does not (the
    state then as it was before)."""
    if node.domain == MS_DOMAIN and node.op_type in FUSED_OPS:  # a fused GELU chain
        op = None
    else:
        op = f"{node.domain}.{node.op_type}" if node.domain not in ("", "ai.onnx") else None
    if op is not None or node.op_type not in HANDLERS:
        return f"op {op or node.op_type} has no accelerator mapping"
    if index in st.forced:
        return st.forced[index]
    not_activation = _reads_no_activation(st, node)
    if not_activation is not None:
        return not_activation
    start, saved = len(st.nodes), st.snapshot()
    try:
        HANDLERS[node.op_type](st, node, name)
        host_outputs = {ir.output for ir in st.nodes if ir.op == "host"}
        for ir in st.nodes[start:]:
            if ir.op in _FOLDED_INTO_PRODUCER and ir.inputs[0] in host_outputs:
                raise CompileError(name, node.op_type, "follows a host node")
    except BadScale:
        raise  # the model's own fault: the host cannot help
    except CompileError as exc:
        st.restore(saved)
        return exc.reason + (f" (supported: {exc.supported})" if exc.supported else "")
    return None


def _reads_no_activation(st: ImportState, node: onnx.NodeProto) -> str | None:
    """Why ``node`` goes to the host if it reads a value that is no activation - token ids,
    positions, masks, or the packed token input itself (the input stage's: it unpacks the ids
    on the host, however much its Gather of one row looks like a token view); else None."""
    for i in node.input:
        if i not in st.alias or i in st.pending:
            continue
        kind = elem_type(st, i)
        if kind in _NOT_ACTIVATIONS:
            name = TensorProto.DataType.Name(kind)
            return f"reads the {name} value '{i}' (the accelerator takes float activations)"
        if st.alias[i] == TOKENS_INPUT and token_inputs_of(st.proto) is not None:
            return f"reads the packed token input '{i}' (ids as digits, unpacked on the host)"
    return None


def fold(st: ImportState, node: onnx.NodeProto, name: str) -> bool:
    """Compute now what needs no input at run time: ``Shape`` of an activation (shapes are
    static), and a node without a handler whose inputs are all constants."""
    if node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type == "Shape" and node.input[0] in st.alias:
        # the ONNX shape: a (1, C, L) tensor is held as (1, C, 1, L) in the IR
        onnx_shape = st.inferred.get(node.input[0], shape_of(st, st.alias[node.input[0]]))
        shape = np.array(onnx_shape, np.int64)
        attrs = attrs_of(node)
        st.consts[node.output[0]] = shape[attrs.get("start", 0) : attrs.get("end", None)]
        return True
    inputs = [i for i in node.input if i]
    if node.op_type in HANDLERS or not all(i in st.consts for i in inputs):
        return False
    try:
        st.consts.update(host_models.fold_constants(st.proto, node, st.consts))
    except HostModelError:
        return False  # left to the host region, whose check names it
    return True


def fold_refused(st: ImportState, node: onnx.NodeProto) -> bool:
    """A node its handler refused whose inputs are all constants (a Concat of shapes, an
    Add of two initializers) is computed now rather than sent to the host."""
    inputs = [i for i in node.input if i]
    if not inputs or not all(i in st.consts for i in inputs):
        return False
    try:
        st.consts.update(host_models.fold_constants(st.proto, node, st.consts))
    except HostModelError:
        return False
    return True

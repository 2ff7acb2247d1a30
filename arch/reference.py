"""Integer reference evaluation of a quantized graph, with :mod:`arch.reference_ops` only.

The graph is anything shaped like one (:class:`RefGraph`): the compiler's quantized IR, or the
reference graph an executable carries (:mod:`arch.executable`), so the compiler and the
simulators hold the accelerator to one definition.

This is what the accelerator must reproduce bit for bit, node by node. Every int8 tensor has a
scale and a zero point ``z`` (0 unless the model gave one): it holds ``scale * (q - z)``. Below
``x - z`` is the input minus its zero point, ``rq(v) = requantize(v, mult, shift)``.

Each op is defined once, by its :class:`~arch.ops.spec.OpSpec` beside its evaluator in
:mod:`arch.ops` (whose module docstrings give the formulas): :mod:`arch.ops.conv` (conv, gemm),
:mod:`arch.ops.pool`, :mod:`arch.ops.elementwise` (add, scale), :mod:`arch.ops.views` (flatten,
concat, channel_slice, upsample, depth_to_space, the head views), :mod:`arch.ops.attention`
(batch_matmul, softmax) and :mod:`arch.ops.host`. The tables here are views of those specs.

The host quantizes the graph input with :func:`quantize_input`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from arch.ops import OP_SPECS
from arch.ops.check import MAX_ELEMENTS, NodeCheck, short
from arch.ops.norm import MASK_PARAMS
from arch.ops.quant import dequantize, quantize_input, store_zero_point, zero_point
from arch.ops.spec import (
    ACTS,
    RESIDUAL_PARAMS,
    TABLE_PARAMS,
    OpSpec,
    ReferenceError,
    RefGraph,
    RefNode,
    RefTensor,
)

__all__ = [
    "ACTS",
    "ARITY_OF_OP",
    "ATTRS_OF_OP",
    "MAX_ELEMENTS",
    "MAX_MACS",
    "PARAMS_OF_OP",
    "REFERENCE_OPS",
    "RESIDUAL_PARAMS",
    "TABLE_PARAMS",
    "RefGraph",
    "RefNode",
    "RefTensor",
    "ReferenceError",
    "check_graph",
    "check_node",
    "checked_input",
    "dequantize",
    "evaluate",
    "evaluate_node",
    "quantize_input",
    "reuse_or_evaluate",
    "store_zero_point",
    "zero_point",
]

#: The ops the integer reference defines.
REFERENCE_OPS: tuple[str, ...] = tuple(OP_SPECS)
#: The params each op reads (name -> dtype), exactly these: a node of the op has no others.
#: Their shapes follow from the node's input (see :func:`check_graph`).
PARAMS_OF_OP: dict[str, dict[str, str]] = {op: dict(s.params) for op, s in OP_SPECS.items()}
#: The attrs of each op's nodes, exactly these (``act`` None/relu/relu6 is informational:
#: ``clamp`` applies it; ``"table"`` applies the ``table`` param after the clamp; ``onnx_ops``
#: and ``macs`` of a host node are for reports).
ATTRS_OF_OP: dict[str, frozenset[str]] = {op: s.attrs for op, s in OP_SPECS.items()}
#: Inputs of each op (lowest, highest).
ARITY_OF_OP: dict[str, tuple[int, int]] = {op: s.arity for op, s in OP_SPECS.items()}
#: The most multiply-accumulates of conv and gemm nodes in a graph the reference evaluates
#: (ResNet-50 at 224x224: 4.1 G): more would take the reference hours.
MAX_MACS = 1 << 36


def evaluate(graph: RefGraph, input_q: npt.ArrayLike) -> dict[str, np.ndarray]:
    """Run a quantized graph on the int8 input; int8 output of every node (softmax: float32).

    The result also holds the input under its tensor name.
    """
    x = checked_input(graph, input_q)
    values: dict[str, np.ndarray] = {graph.inputs[0]: x}
    for node in graph.nodes:
        values[node.output] = evaluate_node(graph, node, [values[i] for i in node.inputs])
    return values


def checked_input(graph: RefGraph, input_q: npt.ArrayLike) -> np.ndarray:
    """``input_q`` as an array, if ``graph`` is quantized and it is the graph's int8 input."""
    if not graph.quantized:
        raise ReferenceError("the reference evaluates quantized graphs only")
    name = graph.inputs[0]
    x = np.asarray(input_q)
    if x.dtype != np.int8 or x.shape != graph.tensors[name].shape:
        raise ReferenceError(
            f"graph input {name!r} is {x.dtype} {x.shape}; "
            f"expected int8 {graph.tensors[name].shape} (see quantize_input)"
        )
    return x


def reuse_or_evaluate(
    graph: RefGraph, input_q: np.ndarray, known: Mapping[str, np.ndarray] | None
) -> Mapping[str, np.ndarray]:
    """``known`` (an earlier :func:`evaluate` of ``graph``) if it was of ``input_q``, else
    :func:`evaluate` of ``input_q``."""
    if known is not None:
        given = known.get(graph.inputs[0])
        if given is not None and given.dtype == input_q.dtype and np.array_equal(given, input_q):
            return known
    return evaluate(graph, input_q)


def evaluate_node(graph: RefGraph, node: RefNode, inputs: list[np.ndarray]) -> np.ndarray:
    """One node of ``graph`` on its input values (int8, or fp32 after a softmax)."""
    return OP_SPECS[node.op].evaluate(graph, node, inputs)


def check_graph(graph: RefGraph) -> None:
    """Raise :class:`ReferenceError` (naming the node) unless :func:`evaluate` can run every
    node of ``graph`` as this module defines it: a known op with its inputs, exactly the attrs
    of :data:`ATTRS_OF_OP` and the params of :data:`PARAMS_OF_OP` (dtypes, shapes that fit
    the input, multipliers, shifts and clamps in range), an output of the shape the op gives,
    and scales on every int8 tensor (a softmax output, fp32, has none).

    The graph's structure - tensors named in its table, nodes in topological order, shapes
    ``(1, C, H, W)`` or ``(1, F)`` - is the caller's to check first."""
    macs = 0
    for node in graph.nodes:
        check_node(graph, node)
        macs += OP_SPECS[node.op].macs(graph, node)
    if macs > MAX_MACS:
        raise ReferenceError(
            f"the graph needs {macs} multiply-accumulates, more than the reference evaluates "
            f"({MAX_MACS})"
        )


def check_node(graph: RefGraph, node: RefNode, c: NodeCheck | None = None) -> None:
    """Raise (naming the node; ``c`` says with which error) unless :func:`evaluate_node` can
    run ``node`` of a quantized graph: see :func:`check_graph`."""
    c = c or NodeCheck(graph, node)
    spec = OP_SPECS.get(node.op)
    if spec is None:
        c.fail(f"op is not one of {', '.join(REFERENCE_OPS)}")
    lo, hi = spec.arity
    if not lo <= len(node.inputs) <= hi:
        c.fail(f"has {len(node.inputs)} inputs; expected {lo}..{hi}")
    wrong = spec.attrs_error(node.attrs)
    if wrong:
        c.fail(wrong)
    if "act" in node.attrs and node.attrs["act"] not in ACTS:
        c.fail(f"attr 'act' {short(node.attrs['act'])} is not one of {ACTS}")
    _check_params(c, _wanted_params(node))
    xs = [tuple(graph.tensors[name].shape) for name in node.inputs]
    out = spec.output_shape(c, xs)
    if tuple(graph.tensors[node.output].shape) != out:
        c.fail(
            f"output {short(node.output)} has shape {tuple(graph.tensors[node.output].shape)}; "
            f"the op gives {out}"
        )
    _check_scales(c, spec)
    spec.check_quantized(c, xs)


def _check_scales(c: NodeCheck, spec: OpSpec) -> None:
    """Every int8 tensor of the node has a scale (a softmax output, fp32, none); an op that
    keeps its input's scale has the scale and zero point of every input."""
    graph, node = c.graph, c.node
    for name in node.inputs:
        if graph.tensors[name].scale is None:
            c.fail(f"input {short(name)} has no scale (an int8 tensor needs one)")
    scale = graph.tensors[node.output].scale
    if (node.op == "softmax") != (scale is None):
        c.fail(
            "a softmax output is fp32 and has no scale"
            if node.op == "softmax"
            else f"output {short(node.output)} has no scale (an int8 tensor needs one)"
        )
    codes = (scale, zero_point(graph, node.output))
    if spec.keeps_scale and any(
        (graph.tensors[name].scale, zero_point(graph, name)) != codes for name in node.inputs
    ):
        c.fail(
            f"output scale and zero point must equal every input's (a {node.op} moves int8 "
            "codes and never rescales)"
        )


def _wanted_params(node: RefNode) -> dict[str, str]:
    """The params ``node`` must have: its op's, a residual's, a table act's."""
    spec = OP_SPECS[node.op]
    wanted = dict(spec.params)
    if spec.residual and len(node.inputs) == 2:
        wanted |= RESIDUAL_PARAMS
    if node.attrs.get("act") == "table":
        wanted |= TABLE_PARAMS
        if "table_zp" in node.params:  # optional: the table input's zero point
            wanted |= {"table_zp": "int64"}
    if node.op == "row_softmax" and "mask" in node.params:  # optional: its constant mask
        wanted |= MASK_PARAMS
    return wanted


def _check_params(c: NodeCheck, wanted: Mapping[str, str]) -> None:
    params = c.node.params
    if set(params) != set(wanted):
        c.fail(f"params {short(sorted(params))} must be exactly {sorted(wanted)}")
    for key, dtype in wanted.items():
        if params[key].dtype != np.dtype(dtype):
            c.fail(f"param {key!r} must be {dtype}, not {params[key].dtype}")

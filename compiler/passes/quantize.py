"""quantize: fp32 canonical graph -> int8 graph (post-training, symmetric, per-channel weights).

Activation scales are ``T / 127`` for a clip threshold T over the calibration inputs, measured on
the original ONNX model (:mod:`compiler.calibrate`; T = max|x| by default, or by percentile,
entropy or MSE, :mod:`compiler.calib_methods`); scales and zero points given by an already-quantized
model are kept, as are its int8 weights (``weight_q``/``weight_scale``) and int32 biases
(``bias_q``, when their scale is ``s_in * s_w``). A concat input the model quantizes otherwise
than the concat is requantized by an inserted 1x1 average pool (the model's rounding point).
Each op's int8 params come from its quantizer (:mod:`compiler.quantizers`, named by
:mod:`compiler.op_rules`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from arch.ops.norm import MASK_INPUT_SCALE, SOFTMAX_OUT_SCALE

from .. import calibrate
from ..activations import make_table
from ..errors import CompileError, Unplaceable
from ..ir import Graph, Node, Tensor
from ..op_rules import KEEPS_SCALE, RULES, TABLE_PRODUCERS, TAKES_INPUT_SCALE
from ..quantizers import ADD_EXTRA_BITS, scale_of, store_clamp

__all__ = ["ADD_EXTRA_BITS", "run"]

#: Ops whose output scale is fixed: the fp32 softmax (none), the norm unit's row_softmax.
_FIXED_SCALE: dict[str, tuple[float | None, int]] = {
    "softmax": (None, 0),
    "row_softmax": (SOFTMAX_OUT_SCALE, 0),
}
#: Ops whose output scale is calibrated (measured on the source model): every op with int8
#: params but those that take their input's scale and those of a fixed scale.
_CALIBRATED = tuple(
    op
    for op, rule in RULES.items()
    if rule.quantize is not None and op not in TAKES_INPUT_SCALE and op not in _FIXED_SCALE
)
#: Producers that can requantize their output to any scale (so, to a concat's).
_RESCALING = tuple(op for op in _CALIBRATED if op not in KEEPS_SCALE)
#: ONNX ops that only move, select or take the maximum of values: a host node of these alone
#: gives its output its input's scale, so its int8 codes pass through exactly.
CODE_EXACT_OPS = frozenset(
    {
        "Transpose",
        "Reshape",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Identity",
        "MaxPool",
        "ReduceMax",
        "Slice",
        "Gather",
        "Tile",
        "Expand",
        "SpaceToDepth",
        "DepthToSpace",
    }
)


def run(
    graph: Graph,
    calibration_inputs: Sequence[np.ndarray],
    method: str = "minmax",
    ranges: calibrate.Ranges | None = None,
) -> Graph:
    """Return the quantized form of a canonical fp32 ``graph`` (which is not modified),
    calibrated by ``method`` (:mod:`compiler.calib_methods`); ``ranges``: thresholds measured
    before on the same model, inputs and method (the host placement's earlier attempts).

    Raises
    ------
    CompileError
        On an already-quantized or non-canonical graph or bad calibration inputs;
        :class:`~compiler.errors.Unplaceable` for a rescale out of the fixed-point range, a bias
        that does not fit int32, a concat input that cannot take its scale, or a lookup table
        on a vector with nothing to fuse it into (naming the node).
    """
    if graph.quantized:
        raise CompileError(None, "quantize", "the graph is already quantized")
    g = graph.copy()
    _propagate_given_scales(g)
    given = {name for name, t in g.tensors.items() if t.scale is not None}
    _calibrate(g, calibration_inputs, given, method, ranges)
    for node in g.nodes:
        quantize = RULES[node.op].quantize
        assert quantize is not None, node.op  # verified canonical: no import-only op but table
        quantize(g, node)
    _fuse_tables(g)
    g.quantized = True
    return g


# --------------------------------------------------------------------------- scales


def _propagate_given_scales(g: Graph) -> None:
    """Scale-preserving ops (maxpool, flatten): a given output scale also serves the input."""
    for node in reversed(g.nodes):
        if node.op in TAKES_INPUT_SCALE:
            x, y = g.tensors[node.inputs[0]], g.tensors[node.output]
            if x.scale is None and y.scale is not None:
                x.scale, x.zero_point = y.scale, y.zero_point


def _code_exact(node: Node) -> bool:
    """A host node of :data:`CODE_EXACT_OPS` on one input: it keeps its input's scale."""
    return (
        node.op == "host"
        and len(node.inputs) == 1
        and set(node.attrs["onnx_ops"]) <= CODE_EXACT_OPS
    )


def _only_concatenated(g: Graph, name: str) -> bool:
    """Read by concats alone (so it takes a concat's scale): e.g. the pieces of a grouped conv,
    which the source model does not have."""
    users = g.consumers(name)
    return bool(users) and all(u.op == "concat" for u in users) and name not in g.outputs


def _masked_scores(g: Graph, name: str) -> bool:
    """Read only by Softmaxes (attention scores plus a -inf mask): infinite by design; the
    Softmax then goes to the host with the reason (its quantizer refuses the scale)."""
    users = g.consumers(name)
    return bool(users) and all(u.op == "row_softmax" for u in users) and name not in g.outputs


def _overflowed(g: Graph, name: str, m: float) -> CompileError:
    """Tensor ``name``'s calibrated range ``m`` is not finite: float32 overflowed (or a NaN)
    computing it on the calibration inputs - named with the node that computes it."""
    node = next((n for n in g.nodes if n.output == name), None)
    return CompileError(
        node.name if node else name,
        node.op if node else "graph input",
        f"its output '{name}' reaches {m} on the calibration inputs (float32 overflows), so "
        "it has no int8 scale",
        "models whose float32 values stay finite on the calibration inputs",
    )


def _calibrate(
    g: Graph,
    inputs: Sequence[np.ndarray],
    given: set[str],
    method: str = "minmax",
    known: calibrate.Ranges | None = None,
) -> None:
    """Give every tensor its scale: measured, given, its input's (maxpool, flatten, and host
    nodes that only move codes), or a constant's from its own values (in a concat: the
    concat's)."""
    need = [n for n in g.inputs if g.tensors[n].scale is None]
    # A ConvTranspose's 1x1 conv writes groups that only its depth_to_space (the ONNX
    # output) interleaves: measured there.
    shuffled = {n.inputs[0]: n.output for n in g.nodes if n.op == "depth_to_space"}
    measured = [
        n
        for n in g.nodes
        if n.op in _CALIBRATED
        and g.tensors[n.output].scale is None
        and not _code_exact(n)
        and not _only_concatenated(g, n.output)
    ]
    for node in [n for n in measured if n.op == "constant"]:  # its own values
        m = calibrate.value_threshold(node.params["value"], method)
        g.tensors[node.output].scale = m / 127.0 if m > 0 else 1.0
    need += [shuffled.get(n.output, n.output) for n in measured if n.op != "constant"]
    if need:
        if g.source is None:
            raise CompileError(
                None,
                "quantize",
                f"{len(need)} tensors need calibration but the graph has no source ONNX model",
            )
        known = known or calibrate.Ranges()
        ranges = known.of(g.source, need, _check_inputs(g, inputs), method)
        for name, m in ranges.items():
            if not math.isfinite(m) and not _masked_scores(g, name):
                raise _overflowed(g, name, m)
            g.tensors[name].scale = m / 127.0 if m > 0 else 1.0
    for groups, shuffle_out in shuffled.items():
        if g.tensors[groups].scale is None:
            g.tensors[groups].scale = g.tensors[shuffle_out].scale
            g.tensors[groups].zero_point = g.tensors[shuffle_out].zero_point
    _requantize_concat_inputs(g, given)
    _share_concat_scales(g)
    for node in g.nodes:
        out = g.tensors[node.output]
        if node.op in TAKES_INPUT_SCALE or (_code_exact(node) and out.scale is None):
            out.scale = g.tensors[node.inputs[0]].scale
            out.zero_point = g.tensors[node.inputs[0]].zero_point
        elif node.op in _FIXED_SCALE:
            out.scale, out.zero_point = _FIXED_SCALE[node.op]
        if node.op == "row_softmax" and len(node.inputs) == 2:  # its mask input's fixed scale
            g.tensors[node.inputs[1]].scale, g.tensors[node.inputs[1]].zero_point = (
                MASK_INPUT_SCALE,
                0,
            )


def _requantize_concat_inputs(g: Graph, given: set[str]) -> None:
    """An imported model's concat input quantized otherwise than the concat output is a
    rounding point to keep: a 1x1 average pool requantizes it to the concat's scale and zero
    point (the producer keeps its own output, which other nodes may read too)."""
    for node in [n for n in g.nodes if n.op == "concat"]:
        out = g.tensors[node.output]
        for k, name in enumerate(node.inputs):
            t = g.tensors[name]
            if name not in given or (t.scale, t.zero_point) == (out.scale, out.zero_point):
                continue
            copy = f"{name}#requant"
            while copy in g.tensors:
                copy += "_"
            g.tensors[copy] = Tensor(copy, t.shape, out.scale, out.zero_point)
            attrs = {
                "kernel": (1, 1),
                "stride": (1, 1),
                "pads": (0, 0, 0, 0),
                "count_include_pad": 1,
            }
            pool = Node(copy, "avgpool", [name], copy, attrs, {}, [])
            g.nodes.insert(g.nodes.index(node), pool)
            node.inputs[k] = copy


def _share_concat_scales(g: Graph) -> None:
    """An int8 concat copies codes, so its inputs take its (calibrated) scale: each input's
    producer requantizes straight to it - through scale-keeping ops (max pool, upsample,
    flatten) back to one that rescales. Each such chain may feed one concat only."""
    taken: dict[str, str] = {}
    for node in g.nodes:
        if node.op != "concat":
            continue
        scale, zp = g.tensors[node.output].scale, g.tensors[node.output].zero_point
        for name in node.inputs:
            chain, producer = [name], g.producer(name)
            while producer is not None and producer.op in TAKES_INPUT_SCALE:
                chain.append(producer.inputs[0])
                producer = g.producer(producer.inputs[0])
            shared = next((t for t in chain if t in taken), None)
            if producer is None or producer.op not in _RESCALING or shared is not None:
                why = (
                    f"shares '{shared}' with concat '{taken[shared]}'"
                    if shared is not None
                    else f"comes from {'the graph input' if producer is None else producer.op}"
                )
                raise Unplaceable(
                    node.name,
                    "concat",
                    f"input '{name}' {why} and cannot take the concat's scale",
                    "inputs made by conv, FC, add, average pool or host nodes, one concat each",
                )
            for tensor in chain:
                taken[tensor] = node.name
                g.tensors[tensor].scale, g.tensors[tensor].zero_point = scale, zp


def _check_inputs(g: Graph, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    shape = g.tensors[g.inputs[0]].shape
    if isinstance(inputs, np.ndarray) or len(inputs) == 0:
        raise CompileError(
            None, "calibration", "expected a non-empty list of input arrays", f"arrays of {shape}"
        )
    checked = []
    for i, x in enumerate(inputs):
        arr = np.asarray(x)
        if arr.shape == shape[1:]:
            arr = arr[None]
        arr = calibrate.as_shape(arr, shape)  # a Conv1d net's (1, C, L), held as (1, C, 1, L)
        if arr.shape != shape or arr.dtype.kind != "f":
            raise CompileError(
                None,
                "calibration",
                f"input {i} is {arr.dtype} {arr.shape}",
                f"float arrays of shape {shape}",
            )
        checked.append(arr.astype(np.float32))
    return checked


# --------------------------------------------------------------------------- per op


def _fuse_tables(g: Graph) -> None:
    """Each table node becomes the ``table`` act of the conv, gemm, add or scale before it:
    that node's STORE maps its int8 output (at its own calibrated scale) through the function
    to the table node's output scale. A table that cannot be fused (its input has another
    reader, or comes from a pool, a concat or the graph input) becomes a one-input ``scale``
    of its own: an identity requantization, then the table."""
    for node in [n for n in g.nodes if n.op == "table"]:
        prod = g.producer(node.inputs[0])
        users = g.consumers(node.inputs[0])
        s_in, s_out = scale_of(g, node.inputs[0]), scale_of(g, node.output)
        z_in, z_out = g.tensors[node.inputs[0]].zero_point, g.tensors[node.output].zero_point
        table = make_table(node.attrs["function"], node.attrs["args"], s_in, s_out, z_in, z_out)
        if (
            prod is None
            or prod.op not in TABLE_PRODUCERS
            or prod.attrs["act"] == "table"
            or users != [node]
            or node.inputs[0] in g.outputs
        ):
            shape = g.tensors[node.inputs[0]].shape
            if len(shape) != 4:  # a scale layer of its own runs on (1, C, H, W) only
                raise Unplaceable(
                    node.name,
                    node.op,
                    f"a lookup table on a {shape} tensor with no conv, gemm or add before it "
                    "to fuse into is not supported",
                    "tables on (1, C, H, W) tensors, or right after a Conv, Gemm, MatMul or Add",
                )
            one, zero = np.array([1], np.int64), np.array([0], np.int64)
            node.op, node.attrs = "scale", {"act": "table"}
            node.params = {"mult": one, "shift": zero, "clamp": store_clamp(None, s_out)}
            node.params["table"] = table
            if z_in:  # the scale centres its input; the STORE adds the zero point back
                node.params["table_zp"] = np.array([z_in], np.int64)
            continue
        prod.attrs["act"] = "table"
        prod.params["table"] = table
        if z_in:  # the producer's STORE adds its own output's zero point before the table
            prod.params["table_zp"] = np.array([z_in], np.int64)
        del g.tensors[prod.output]
        prod.output = node.output
        prod.onnx_nodes.extend(node.onnx_nodes)
        g.nodes.remove(node)

"""conv and gemm: a weighted sum on the systolic array, then the STORE's post-processing.

* conv: ``acc = conv2d(x - z, weight) + bias`` (zero padding of ``x - z``: the hardware pads
  with ``z`` and folds ``-z * sum(weight)`` into the bias); with a residual ``r``:
  ``acc = add_wrap32(acc, R(r))``; ``y = to_int8(clamp(rq(acc) + z_out, lo, hi))`` (per
  channel, axis 1; for a ``table`` act ``z_out`` is the param ``table_zp``, the table input's).
* gemm the same with ``matmul(x - z, weight.T)`` over the last axis: of a vector ``(1, F)``
  or of each token of a ``(1, T, 1, F)`` tensor (a transformer's ``(1, T, F)``, held like a
  Conv1d's), channels last.
"""

from __future__ import annotations

import math

import numpy as np

from arch import reference_ops as ro
from arch.ops.check import NodeCheck, short
from arch.ops.quant import centred, rescaled_residual, store
from arch.ops.spec import RESIDUAL_PARAMS, OpSpec, RefGraph, RefNode, Shape

__all__ = ["CONV", "GEMM", "SPECS"]

_WEIGHTED = {"weight": "int8", "bias": "int32", "mult": "int64", "shift": "int64", "clamp": "int64"}


def _conv(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    p, a = node.params, node.attrs
    acc = ro.conv2d(
        centred(graph, node.inputs[0], xs[0]),
        p["weight"],
        stride=a["stride"],
        padding=a["pads"],
        dilation=a["dilation"],
        groups=a["group"],
    )
    acc = ro.add_wrap32(acc, p["bias"][None, :, None, None])
    if len(xs) == 2:
        res = rescaled_residual(graph, node.inputs[1], xs[1], p["res_mult"], p["res_shift"])
        acc = ro.add_wrap32(acc, res)
    return store(graph, node, acc, axis=1)


def _gemm(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    p = node.params
    x = centred(graph, node.inputs[0], xs[0])
    acc = ro.add_wrap32(ro.matmul(x, p["weight"].T), p["bias"])
    if len(xs) == 2:
        res = rescaled_residual(
            graph, node.inputs[1], xs[1], p["res_mult"], p["res_shift"], axis=-1
        )
        acc = ro.add_wrap32(acc, res)
    return store(graph, node, acc, axis=-1)


def _conv_shape(c: NodeCheck, xs: list[Shape]) -> Shape:
    weight = c.node.params["weight"]
    x = c.shape(c.node.inputs[0], 4, "input")
    kernel, dilation = c.ints("kernel", 2, 1), c.ints("dilation", 2, 1)
    group = c.positive("group")
    if weight.ndim != 4 or weight.shape[2:] != kernel:
        c.fail(
            f"param 'weight' has shape {weight.shape}; expected "
            f"(O, C/group, {kernel[0]}, {kernel[1]})"
        )
    o = weight.shape[0]
    if weight.shape[1] * group != x[1] or o % group:
        c.fail(f"param 'weight' {weight.shape} does not fit input {x} with group {group}")
    return _weighted(c, xs, (1, o, *c.window(x, kernel, dilation)))


def _gemm_shape(c: NodeCheck, xs: list[Shape]) -> Shape:
    node = c.node
    weight = node.params["weight"]
    x = tuple(c.graph.tensors[node.inputs[0]].shape)
    if not (len(x) == 2 or (len(x) == 4 and x[2] == 1)) or x[0] != 1:
        c.fail(f"input {short(node.inputs[0])} must be (1, F) or tokens (1, T, 1, F), not {x}")
    if weight.ndim != 2 or weight.shape[1] != x[-1]:
        c.fail(f"param 'weight' has shape {weight.shape}; expected (N, {x[-1]})")
    return _weighted(c, xs, (*x[:-1], weight.shape[0]))


def _weighted(c: NodeCheck, xs: list[Shape], out: Shape) -> Shape:
    """``out``, the output of a conv or gemm, after checking its residual input's shape."""
    if len(c.node.inputs) == 2 and xs[1] != out:
        c.fail(f"residual {short(c.node.inputs[1])} has shape {xs[1]}; expected {out}")
    return out


def _weighted_quantized(c: NodeCheck, xs: list[Shape]) -> None:
    """The per-channel int8 params of a conv or gemm (and of its residual), the clamp."""
    node = c.node
    per_channel = ["bias", "mult", "shift"]
    if len(node.inputs) == 2:
        per_channel += list(RESIDUAL_PARAMS)
        c.rescale("res_mult", "res_shift")
    c.param_shapes({key: (node.params["weight"].shape[0],) for key in per_channel})
    c.param_shapes({"clamp": (2,)})
    c.rescale("mult", "shift")
    c.clamp()


def _weighted_macs(graph: RefGraph, node: RefNode) -> int:
    """Output elements x weights per output."""
    weight = node.params["weight"]
    return math.prod(graph.tensors[node.output].shape) * (weight.size // weight.shape[0])


CONV = OpSpec(
    name="conv",
    attrs=frozenset({"kernel", "stride", "pads", "dilation", "group", "act"}),
    params=_WEIGHTED,
    arity=(1, 2),
    keeps_scale=False,
    output_shape=_conv_shape,
    evaluate=_conv,
    check_quantized=_weighted_quantized,
    macs=_weighted_macs,
    residual=True,
)
GEMM = OpSpec(
    name="gemm",
    attrs=frozenset({"act"}),
    params=_WEIGHTED,
    arity=(1, 2),
    keeps_scale=False,
    output_shape=_gemm_shape,
    evaluate=_gemm,
    check_quantized=_weighted_quantized,
    macs=_weighted_macs,
    residual=True,
)
SPECS = (CONV, GEMM)

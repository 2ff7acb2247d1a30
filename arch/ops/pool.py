"""Pools: maxpool keeps its input's codes; avgpool and global_avgpool sum and requantize.

* maxpool: ``max_pool2d`` (output scale and zero point = input's);
* avgpool: ``to_int8(rq(sum_pool2d(x - z)) + z_out)``; global_avgpool likewise with
  ``global_sum_pool``.
"""

from __future__ import annotations

import numpy as np

from arch import reference_ops as ro
from arch.ops.check import NodeCheck
from arch.ops.quant import centred, zero_point
from arch.ops.spec import OpSpec, RefGraph, RefNode, Shape

__all__ = ["AVGPOOL", "GLOBAL_AVGPOOL", "MAXPOOL", "SPECS"]

_RESCALE = {"mult": "int64", "shift": "int64"}


def _maxpool(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    a = node.attrs
    return ro.max_pool2d(xs[0], a["kernel"], stride=a["stride"], padding=a["pads"])


def _avgpool(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    a, p = node.attrs, node.params
    x = centred(graph, node.inputs[0], xs[0])  # padding adds 0 = the zero point's value
    acc = ro.sum_pool2d(x, a["kernel"], stride=a["stride"], padding=a["pads"])
    zp = zero_point(graph, node.output)
    return ro.to_int8(ro.requantize(acc, p["mult"], p["shift"]) + zp)


def _global_avgpool(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    p = node.params
    acc = ro.global_sum_pool(centred(graph, node.inputs[0], xs[0]))
    zp = zero_point(graph, node.output)
    return ro.to_int8(ro.requantize(acc, p["mult"], p["shift"]) + zp)


def _pooled(c: NodeCheck, xs: list[Shape]) -> Shape:
    x = c.shape(c.node.inputs[0], 4, "input")
    if c.node.op == "global_avgpool":
        return (1, x[1], 1, 1)
    kernel = c.ints("kernel", 2, 1)
    out = (1, x[1], *c.window(x, kernel, (1, 1)))
    pads = c.node.attrs["pads"]
    if c.node.op == "maxpool":
        if max(pads[0], pads[2]) >= kernel[0] or max(pads[1], pads[3]) >= kernel[1]:
            c.fail(f"pads {pads} must be smaller than the kernel {kernel}")
    elif any(pads) and c.node.attrs["count_include_pad"] != 1:
        c.fail("padding needs count_include_pad=1 (the padded zeros are counted)")
    return out


def _rescaled_pool(c: NodeCheck, xs: list[Shape]) -> None:
    c.param_shapes({"mult": (1,), "shift": (1,)})
    c.rescale("mult", "shift")


MAXPOOL = OpSpec(
    name="maxpool",
    attrs=frozenset({"kernel", "stride", "pads"}),
    params={},
    arity=(1, 1),
    keeps_scale=True,
    output_shape=_pooled,
    evaluate=_maxpool,
)
AVGPOOL = OpSpec(
    name="avgpool",
    attrs=frozenset({"kernel", "stride", "pads", "count_include_pad"}),
    params=_RESCALE,
    arity=(1, 1),
    keeps_scale=False,
    output_shape=_pooled,
    evaluate=_avgpool,
    check_quantized=_rescaled_pool,
)
GLOBAL_AVGPOOL = OpSpec(
    name="global_avgpool",
    attrs=frozenset(),
    params=_RESCALE,
    arity=(1, 1),
    keeps_scale=False,
    output_shape=_pooled,
    evaluate=_global_avgpool,
    check_quantized=_rescaled_pool,
)
SPECS = (MAXPOOL, AVGPOOL, GLOBAL_AVGPOOL)

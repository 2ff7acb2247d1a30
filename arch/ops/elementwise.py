"""add and scale: elementwise ops of the vector unit, then the STORE's post-processing.

Below ``R(r) = rq_res(r) - rq_res(z_r)``: an add input with its zero point (the hardware adds
``rq_res(r)`` and folds ``-rq_res(z_r)`` into the bias).

* add: ``acc = add_wrap32(R_a(a), R_b(b))``, ``y = to_int8(clamp(rq(acc) + z_out, lo, hi))``.
* scale: ``acc = x - z`` (times the per-channel ``gate - z_gate``, a (1, C, 1, 1) second
  input, if given), ``y = to_int8(clamp(rq(acc) + z_out, lo, hi))``: a channel-wise product
  (the squeeze-excitation gate), or with one input a requantize-clamp-table of its own (an
  activation no conv, gemm or add can take; the hardware adds ``-z`` as a bias; a gated scale
  runs on the array only with both zero points 0).
"""

from __future__ import annotations

import numpy as np

from arch import reference_ops as ro
from arch.ops.check import NodeCheck, short
from arch.ops.quant import centred, rescaled_residual, store
from arch.ops.spec import OpSpec, RefGraph, RefNode, Shape

__all__ = ["ADD", "SCALE", "SPECS"]


def _add(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    p = node.params
    acc = ro.add_wrap32(
        rescaled_residual(graph, node.inputs[0], xs[0], p["a_mult"], p["a_shift"]),
        rescaled_residual(graph, node.inputs[1], xs[1], p["b_mult"], p["b_shift"]),
    )
    return store(graph, node, acc, axis=1)


def _scale(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    acc = centred(graph, node.inputs[0], xs[0])
    if len(xs) == 2:
        acc = acc * centred(graph, node.inputs[1], xs[1])
    return store(graph, node, acc, axis=1)


def _added(c: NodeCheck, xs: list[Shape]) -> Shape:
    if xs[1] != xs[0]:
        c.fail(f"inputs have shapes {xs[0]} and {xs[1]}; they must be equal")
    return xs[0]


def _added_quantized(c: NodeCheck, xs: list[Shape]) -> None:
    c.param_shapes({key: (1,) for key in ADD.params if key != "clamp"} | {"clamp": (2,)})
    for prefix in ("a_", "b_", ""):
        c.rescale(f"{prefix}mult", f"{prefix}shift")
    c.clamp()


def _scaled(c: NodeCheck, xs: list[Shape]) -> Shape:
    x = c.shape(c.node.inputs[0], 4, "input")
    if len(xs) == 2 and xs[1] != (1, x[1], 1, 1):
        c.fail(f"gate {short(c.node.inputs[1])} has shape {xs[1]}; expected {(1, x[1], 1, 1)}")
    return x


ADD = OpSpec(
    name="add",
    attrs=frozenset({"act"}),
    params={
        "a_mult": "int64",
        "a_shift": "int64",
        "b_mult": "int64",
        "b_shift": "int64",
        "mult": "int64",
        "shift": "int64",
        "clamp": "int64",
    },
    arity=(2, 2),
    keeps_scale=False,
    output_shape=_added,
    evaluate=_add,
    check_quantized=_added_quantized,
)
SCALE = OpSpec(
    name="scale",
    attrs=frozenset({"act"}),
    params={"mult": "int64", "shift": "int64", "clamp": "int64"},
    arity=(1, 2),
    keeps_scale=False,
    output_shape=_scaled,
    evaluate=_scale,
    check_quantized=NodeCheck.rescaled,
)
SPECS = (ADD, SCALE)

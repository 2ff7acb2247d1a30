"""The IR verifier's checks of an fp32 node (:meth:`compiler.ir.Graph.verify`), per op.

A canonical op's attrs and output shape are checked by its :class:`~arch.ops.spec.OpSpec`'s
rule, in both stages, and a quantized node wholly by :func:`arch.reference.check_node` (the
integer reference's own definition). What is left here is what only the fp32 stage has: the
float params of each canonical op, and the import-only ops (:data:`compiler.op_rules.IMPORT_OPS`)
with their output shapes. Every check takes the node's :class:`~arch.ops.check.NodeCheck`
(whose failures are :class:`~compiler.errors.VerifyError` naming the node) and its inputs'
shapes. Also two shape predicates the passes share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

import numpy as np

from arch.ops import OP_SPECS
from arch.ops.check import NodeCheck

from .activations import FUNCTIONS

if TYPE_CHECKING:
    from .ir import Graph

Shape = tuple[int, ...]
ParamTypes = Mapping[str, tuple[type, Shape]]


def is_depthwise(weight: np.ndarray, group: int) -> bool:
    """A conv whose every output channel reads its own input channel only (DWCONV's)."""
    return group > 1 and group == weight.shape[0] and weight.shape[1] == 1


def is_tokens(shape: Shape) -> bool:
    """Whether a gemm input of this shape is tokens (1, T, 1, F): a transformer's (1, T, F),
    held like a Conv1d's (1, C, L), that a gemm multiplies over its last axis per token."""
    return len(shape) == 4 and shape[0] == 1 and shape[2] == 1


def params(c: NodeCheck, required: ParamTypes, optional: ParamTypes | None = None) -> None:
    """Exactly the ``required`` params (plus any of ``optional``), with dtype and shape."""
    optional = optional or {}
    node = c.node
    for key in node.params:
        if key not in required and key not in optional:
            c.fail(f"unexpected param '{key}'")
    for key, (dtype, shape) in {**required, **optional}.items():
        if key not in node.params:
            if key in required:
                c.fail(f"param '{key}' is missing")
            continue
        arr = node.params[key]
        if not isinstance(arr, np.ndarray) or arr.dtype != dtype or arr.shape != tuple(shape):
            got = f"{arr.dtype} {arr.shape}" if isinstance(arr, np.ndarray) else type(arr).__name__
            c.fail(f"param '{key}' must be {np.dtype(dtype).name} {tuple(shape)}, got {got}")


# --------------------------------------------------------------------------- canonical ops


def no_params(c: NodeCheck, xs: list[Shape]) -> None:
    params(c, {})


def weighted(c: NodeCheck, xs: list[Shape]) -> None:
    """conv, gemm, matmul: float weights (a matmul has no bias), and the weight's int8 codes
    when the model gave them."""
    weight = c.node.params.get("weight")
    if not isinstance(weight, np.ndarray):
        c.fail("param 'weight' is missing")
    wshape, o = weight.shape, (weight.shape[0],)
    required: dict[str, tuple[type, Shape]] = {"weight": (np.float32, wshape)}
    if c.node.op != "matmul":
        required["bias"] = (np.float32, o)
    optional: dict[str, tuple[type, Shape]] = {
        "weight_q": (np.int8, wshape),
        "weight_scale": (np.float32, o),
        "bias_q": (np.int32, o),
    }
    params(c, required, optional)
    if ("weight_q" in c.node.params) != ("weight_scale" in c.node.params):
        c.fail("weight_q and weight_scale come together")


def batch_matmul(c: NodeCheck, xs: list[Shape]) -> None:
    """An optional scalar ``alpha`` (a Mul of the product - or of a sum: ``add`` - by a
    constant, folded into the rescale by quantize)."""
    params(c, {}, {"alpha": (np.float32, (1,))})


def norm_affine(c: NodeCheck, xs: list[Shape]) -> None:
    """layer_norm, rms_norm: float ``gamma`` (and for layer_norm, optionally ``beta``) over the
    last axis, finite."""
    ch = (np.float32, (xs[0][-1],))
    params(c, {"gamma": ch}, {"beta": ch})
    if not all(np.isfinite(v).all() for v in c.node.params.values()):
        c.fail("gamma and beta must be finite")


def softmax_bias(c: NodeCheck, xs: list[Shape]) -> None:
    """row_softmax: an optional float ``bias_mask`` (M or 1, N) added to the scores' rows, the
    same for every head (-inf allowed: a masked position)."""
    bias = c.node.params.get("bias_mask")
    rows = xs[0][2] if bias is None or bias.shape[:1] != (1,) else 1
    params(c, {}, {"bias_mask": (np.float32, (rows, xs[0][3]))})
    if bias is not None and (np.isnan(bias).any() or np.isposinf(bias).any()):
        c.fail("bias_mask must not hold NaN or +inf")


def constant(c: NodeCheck, xs: list[Shape]) -> None:
    """constant: its float ``value`` (the output's shape, which its OpSpec takes from it),
    finite."""
    params(c, {"value": (np.float32, c.node.params["value"].shape)})
    if not np.isfinite(c.node.params["value"]).all():
        c.fail("param 'value' must be finite")


def host(c: NodeCheck, xs: list[Shape]) -> None:
    model = c.node.params.get("model")
    if (
        set(c.node.params) != {"model"}
        or not isinstance(model, np.ndarray)
        or model.dtype != np.uint8
    ):
        c.fail("params must be exactly 'model' (uint8 bytes)")


# --------------------------------------------------------------------------- import-only ops


def same_shape(c: NodeCheck, xs: list[Shape]) -> Shape:
    """relu, relu6, identity: the input's shape, no params."""
    params(c, {})
    return xs[0]


def summed(c: NodeCheck, xs: list[Shape]) -> Shape:
    """sum: an add of two inputs of one shape."""
    params(c, {})
    return OP_SPECS["add"].output_shape(c, xs)


def matmul(c: NodeCheck, xs: list[Shape]) -> Shape:
    """A gemm without its bias yet."""
    weighted(c, xs)
    return OP_SPECS["gemm"].output_shape(c, xs)


def reshape(c: NodeCheck, xs: list[Shape]) -> Shape:
    """A flatten with the target shape ONNX gave."""
    params(c, {})
    out = OP_SPECS["flatten"].output_shape(c, xs)
    if c.node.attrs["shape"] != out:
        c.fail(f"attr shape {c.node.attrs['shape']} != {out}")
    return out


def table(c: NodeCheck, xs: list[Shape]) -> Shape:
    function, args = c.node.attrs["function"], c.node.attrs["args"]
    if function not in FUNCTIONS:
        c.fail(f"function {function!r} is not one of {', '.join(FUNCTIONS)}")
    arity = FUNCTIONS[function][1]
    if not isinstance(args, tuple) or len(args) != arity:
        c.fail(f"{function} takes {arity} args, got {args!r}")
    if not all(isinstance(a, float) and math.isfinite(a) for a in args):
        c.fail(f"args must be finite floats, got {args!r}")
    params(c, {})
    return xs[0]


#: Import ops of one value per channel (a bias, a batchnorm, a layer scale).
_PER_CHANNEL = ("bias_add", "batchnorm", "channel_mul")


def per_channel(c: NodeCheck, xs: list[Shape]) -> Shape:
    """batchnorm, bias_add, channel_mul: float params per channel (a token gemm's channels are
    last, also through other per-channel ops after it)."""
    x, node, graph = xs[0], c.node, cast("Graph", c.graph)
    producer = graph.producer(node.inputs[0])
    while producer is not None and producer.op in _PER_CHANNEL:
        producer = graph.producer(producer.inputs[0])
    last = is_tokens(x) and producer is not None and producer.op in ("matmul", "gemm")
    ch = (np.float32, (x[-1] if last else x[1],))
    if node.op == "channel_mul":
        params(c, {"scale": ch})
    elif node.op == "batchnorm":
        eps = node.attrs["epsilon"]
        if not isinstance(eps, float) or not eps >= 0:
            c.fail(f"epsilon must be a float >= 0, got {eps!r}")
        params(c, {"gamma": ch, "beta": ch, "mean": ch, "var": ch})
    else:
        params(c, {"bias": ch})
    return x

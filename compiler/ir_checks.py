"""The IR verifier's per-op checks (:meth:`compiler.ir.Graph.verify`), one function per op.

Each check takes the graph, the node and its first input's shape, checks the node's attrs and
its params for the graph's stage (fp32 or quantized), and returns the output shape, raising
:class:`~compiler.errors.VerifyError` naming the node. :mod:`compiler.op_rules` says which
check each op has. Also the shape arithmetic the importer shares.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from arch.isa import INT32_MAX, INT32_MIN, MAX_SHIFT, TABLE_ENTRIES

from .activations import FUNCTIONS
from .errors import VerifyError

if TYPE_CHECKING:
    from .ir import Graph, Node

Shape = tuple[int, ...]

# --------------------------------------------------------------------------- shape arithmetic


def conv_output_shape(
    x_shape: Shape,
    out_channels: int,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pads: tuple[int, int, int, int],
    dilation: tuple[int, int] = (1, 1),
) -> Shape:
    """``(N, O, OH, OW)`` of an ONNX convolution (floor mode), or ValueError if it is empty."""
    n, _, h, w = x_shape
    eh, ew = dilation[0] * (kernel[0] - 1) + 1, dilation[1] * (kernel[1] - 1) + 1
    oh = (h + pads[0] + pads[2] - eh) // stride[0] + 1
    ow = (w + pads[1] + pads[3] - ew) // stride[1] + 1
    if oh < 1 or ow < 1:
        raise ValueError(
            f"kernel {kernel[0]}x{kernel[1]} does not fit the padded input "
            f"{h + pads[0] + pads[2]}x{w + pads[1] + pads[3]}"
        )
    return (n, out_channels, oh, ow)


def pool_output_shape(
    x_shape: Shape,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pads: tuple[int, int, int, int],
) -> Shape:
    """``(N, C, OH, OW)`` of an ONNX pool in floor mode, or ValueError if it is empty."""
    return conv_output_shape(x_shape, x_shape[1], kernel, stride, pads)


def is_depthwise(weight: np.ndarray, group: int) -> bool:
    """A conv whose every output channel reads its own input channel only (DWCONV's)."""
    return group > 1 and group == weight.shape[0] and weight.shape[1] == 1


def is_tokens(shape: Shape) -> bool:
    """Whether a gemm input of this shape is tokens (1, T, 1, F): a transformer's (1, T, F),
    held like a Conv1d's (1, C, L), that a gemm multiplies over its last axis per token."""
    return len(shape) == 4 and shape[0] == 1 and shape[2] == 1


# --------------------------------------------------------------------------- helpers


def _ints(node: Node, key: str, count: int, minimum: int) -> Any:
    """Attr ``key`` checked to be a tuple of ``count`` ints >= ``minimum`` (typed Any so that
    callers can pass it on as a fixed-length tuple)."""
    value = node.attrs[key]
    if (
        not isinstance(value, tuple)
        or len(value) != count
        or not all(isinstance(v, int) and v >= minimum for v in value)
    ):
        raise VerifyError(
            node.name,
            node.op,
            f"attr {key} must be a tuple of {count} ints >= {minimum}, got {value!r}",
        )
    return value


def expect_shape(g: Graph, node: Node, name: str, expected: Shape, what: str) -> None:
    actual = g.tensors[name].shape
    if actual != tuple(expected):
        raise VerifyError(
            node.name, node.op, f"{what} '{name}' has shape {actual}, expected {tuple(expected)}"
        )


def _check_params(
    node: Node,
    required: Mapping[str, tuple[type, Shape]],
    optional: Mapping[str, tuple[type, Shape]] | None = None,
) -> None:
    """Exactly the ``required`` params (plus any of ``optional``), with dtype and shape."""
    optional = optional or {}
    for key in node.params:
        if key not in required and key not in optional:
            raise VerifyError(node.name, node.op, f"unexpected param '{key}'")
    for key, (dtype, shape) in {**required, **optional}.items():
        if key not in node.params:
            if key in required:
                raise VerifyError(node.name, node.op, f"param '{key}' is missing")
            continue
        arr = node.params[key]
        if not isinstance(arr, np.ndarray) or arr.dtype != dtype or arr.shape != tuple(shape):
            got = f"{arr.dtype} {arr.shape}" if isinstance(arr, np.ndarray) else type(arr).__name__
            raise VerifyError(
                node.name,
                node.op,
                f"param '{key}' must be {np.dtype(dtype).name} {tuple(shape)}, got {got}",
            )


def _check_rescale(node: Node, mult: str, shift: str) -> None:
    m, s = node.params[mult], node.params[shift]
    if m.size and (int(m.min()) < INT32_MIN or int(m.max()) > INT32_MAX):
        raise VerifyError(node.name, node.op, f"param '{mult}' is outside the int32 range")
    if s.size and (int(s.min()) < 0 or int(s.max()) > MAX_SHIFT):
        raise VerifyError(node.name, node.op, f"param '{shift}' is outside 0..{MAX_SHIFT}")


def _post_params(node: Node) -> dict[str, tuple[type, Shape]]:
    """The STORE post-processing params of a quantized conv, gemm, add or scale: the clamp, and the
    table of a ``table`` act."""
    post: dict[str, tuple[type, Shape]] = {"clamp": (np.int64, (2,))}
    if node.attrs["act"] == "table":
        post["table"] = (np.int8, (TABLE_ENTRIES,))
        if "table_zp" in node.params:  # the table input's zero point (absent: 0)
            post["table_zp"] = (np.int64, (1,))
    return post


def _check_clamp(node: Node) -> None:
    lo, hi = (int(v) for v in node.params["clamp"])
    if not -128 <= lo <= hi <= 127:
        raise VerifyError(
            node.name, node.op, f"clamp [{lo}, {hi}] must satisfy -128 <= lo <= hi <= 127"
        )


def _weighted_params(g: Graph, node: Node, wshape: Shape, out_ch: int) -> None:
    """conv / gemm / matmul params for the graph's stage."""
    o = (out_ch,)
    if g.quantized:
        required: dict[str, tuple[type, Shape]] = {
            "weight": (np.int8, wshape),
            "bias": (np.int32, o),
            "mult": (np.int64, o),
            "shift": (np.int64, o),
            **_post_params(node),
        }
        if len(node.inputs) == 2:
            required |= {"res_mult": (np.int64, o), "res_shift": (np.int64, o)}
        _check_params(node, required)
        _check_rescale(node, "mult", "shift")
        if len(node.inputs) == 2:
            _check_rescale(node, "res_mult", "res_shift")
        _check_clamp(node)
    else:
        required = {"weight": (np.float32, wshape)}
        if node.op != "matmul":
            required["bias"] = (np.float32, o)
        optional: dict[str, tuple[type, Shape]] = {
            "weight_q": (np.int8, wshape),
            "weight_scale": (np.float32, o),
            "bias_q": (np.int32, o),
        }
        _check_params(node, required, optional)
        if ("weight_q" in node.params) != ("weight_scale" in node.params):
            raise VerifyError(node.name, node.op, "weight_q and weight_scale come together")


def _need_4d(node: Node, x: Shape) -> None:
    if len(x) != 4 or x[0] != 1:
        raise VerifyError(
            node.name, node.op, f"input has shape {x}; supported: (1, C, H, W), (1, F)"
        )


def _need_2d(node: Node, x: Shape) -> None:
    if len(x) != 2 or x[0] != 1:
        raise VerifyError(
            node.name, node.op, f"input has shape {x}; supported: (1, C, H, W), (1, F)"
        )


def _weight(node: Node, ndim: int) -> Shape:
    w = node.params.get("weight")
    if not isinstance(w, np.ndarray) or w.ndim != ndim:
        raise VerifyError(node.name, node.op, f"param 'weight' must be a {ndim}-D array")
    return tuple(int(d) for d in w.shape)


def conv(g: Graph, node: Node, x: Shape) -> Shape:
    _need_4d(node, x)
    kernel = _ints(node, "kernel", 2, 1)
    stride = _ints(node, "stride", 2, 1)
    pads = _ints(node, "pads", 4, 0)
    dilation = _ints(node, "dilation", 2, 1)
    group = node.attrs["group"]
    if not isinstance(group, int) or group < 1:
        raise VerifyError(node.name, node.op, f"group must be a positive int, got {group!r}")
    wshape = _weight(node, 4)
    o, cg, kh, kw = wshape
    if (kh, kw) != kernel:
        raise VerifyError(node.name, node.op, f"weight kernel {kh}x{kw} != attr kernel {kernel}")
    if cg * group != x[1] or o % group:
        raise VerifyError(
            node.name, node.op, f"weight {wshape} does not fit input {x} with group {group}"
        )
    try:
        out = conv_output_shape(x, o, kernel, stride, pads, dilation)
    except ValueError as exc:
        raise VerifyError(node.name, node.op, str(exc)) from None
    if len(node.inputs) == 2:
        expect_shape(g, node, node.inputs[1], out, "residual")
    _weighted_params(g, node, wshape, o)
    return out


def gemm(g: Graph, node: Node, x: Shape) -> Shape:
    if not is_tokens(x):
        _need_2d(node, x)
    wshape = _weight(node, 2)
    if wshape[1] != x[-1]:
        raise VerifyError(node.name, node.op, f"weight {wshape} (N, K) does not fit input {x}")
    out = (*x[:-1], wshape[0])
    if len(node.inputs) == 2:
        expect_shape(g, node, node.inputs[1], out, "residual")
    _weighted_params(g, node, wshape, wshape[0])
    return out


def pool(g: Graph, node: Node, x: Shape) -> Shape:
    _need_4d(node, x)
    kernel = _ints(node, "kernel", 2, 1)
    stride = _ints(node, "stride", 2, 1)
    pads = _ints(node, "pads", 4, 0)
    if node.op == "maxpool":
        if max(pads[0], pads[2]) >= kernel[0] or max(pads[1], pads[3]) >= kernel[1]:
            raise VerifyError(node.name, node.op, f"pads {pads} must be smaller than the kernel")
        _check_params(node, {})
    else:
        if any(pads) and node.attrs["count_include_pad"] != 1:
            raise VerifyError(
                node.name,
                node.op,
                "padding needs count_include_pad=1",
                "pads 0 or count_include_pad 1",
            )
        _check_params(
            node, {"mult": (np.int64, (1,)), "shift": (np.int64, (1,))} if g.quantized else {}
        )
        if g.quantized:
            _check_rescale(node, "mult", "shift")
    try:
        return pool_output_shape(x, kernel, stride, pads)
    except ValueError as exc:
        raise VerifyError(node.name, node.op, str(exc)) from None


def global_avgpool(g: Graph, node: Node, x: Shape) -> Shape:
    _need_4d(node, x)
    _check_params(
        node, {"mult": (np.int64, (1,)), "shift": (np.int64, (1,))} if g.quantized else {}
    )
    if g.quantized:
        _check_rescale(node, "mult", "shift")
    return (1, x[1], 1, 1)


def add(g: Graph, node: Node, x: Shape) -> Shape:
    expect_shape(g, node, node.inputs[1], x, "second input")
    if node.op == "add" and g.quantized:
        one = (np.int64, (1,))
        _check_params(
            node,
            {k: one for k in ("a_mult", "a_shift", "b_mult", "b_shift", "mult", "shift")}
            | _post_params(node),
        )
        for prefix in ("a_", "b_", ""):
            _check_rescale(node, f"{prefix}mult", f"{prefix}shift")
        _check_clamp(node)
    else:
        _check_params(node, {})
    return x


def _check_rescaled(node: Node) -> None:
    """A quantized node requantized by one multiplier and shift, with post-processing."""
    one = (np.int64, (1,))
    _check_params(node, {"mult": one, "shift": one} | _post_params(node))
    _check_rescale(node, "mult", "shift")
    _check_clamp(node)


def scale(g: Graph, node: Node, x: Shape) -> Shape:
    """x [* gate]: a channel-wise product, or (one input) a rescale of its own."""
    _need_4d(node, x)
    if len(node.inputs) == 2:
        expect_shape(g, node, node.inputs[1], (1, x[1], 1, 1), "gate")
    if g.quantized:
        _check_rescaled(node)
    else:
        _check_params(node, {})
    return x


def batch_matmul(g: Graph, node: Node, x: Shape) -> Shape:
    """(1, H, M, K) @ (1, H, K, N) of two activations; fp32: an optional scalar ``alpha``
    (a Mul of the product by a constant, folded into the rescale by quantize)."""
    b = g.tensors[node.inputs[1]].shape
    _need_4d(node, x)
    if len(b) != 4 or b[:2] != x[:2] or b[2] != x[3]:
        raise VerifyError(node.name, node.op, f"inputs {x} and {b} are not (1,H,M,K), (1,H,K,N)")
    if g.quantized:
        _check_rescaled(node)
    else:
        _check_params(node, {}, {"alpha": (np.float32, (1,))})
    return (*x[:3], b[3])


def split_heads(g: Graph, node: Node, x: Shape) -> Shape:
    heads = node.attrs["heads"]
    if not is_tokens(x) or not isinstance(heads, int) or heads < 1 or x[3] % heads:
        raise VerifyError(node.name, node.op, f"input {x} is not tokens of {heads!r} heads")
    _check_params(node, {})
    if node.op == "split_heads_t":
        return (1, heads, x[3] // heads, x[1])
    return (1, heads, x[1], x[3] // heads)


def merge_heads(g: Graph, node: Node, x: Shape) -> Shape:
    _need_4d(node, x)
    _check_params(node, {})
    return (1, x[2], 1, x[1] * x[3])


def map_to_tokens(g: Graph, node: Node, x: Shape) -> Shape:
    _need_4d(node, x)
    _check_params(node, {})
    return (1, x[2] * x[3], 1, x[1])


def tokens_to_map(g: Graph, node: Node, x: Shape) -> Shape:
    size = node.attrs["size"]
    if (
        not is_tokens(x)
        or not isinstance(size, tuple)
        or len(size) != 2
        or not all(isinstance(v, int) and v >= 1 for v in size)
        or size[0] * size[1] != x[1]
    ):
        raise VerifyError(node.name, node.op, f"input {x} is not tokens of a map of size {size!r}")
    _check_params(node, {})
    return (1, x[3], *size)


def select_token(g: Graph, node: Node, x: Shape) -> Shape:
    index = node.attrs["index"]
    if not is_tokens(x) or not isinstance(index, int) or not 0 <= index < x[1]:
        raise VerifyError(node.name, node.op, f"input {x} is not tokens with a token {index!r}")
    _check_params(node, {})
    return (1, x[3])


def flatten(g: Graph, node: Node, x: Shape) -> Shape:
    _need_4d(node, x)
    _check_params(node, {})
    out = (1, x[1] * x[2] * x[3])
    if node.op == "reshape" and node.attrs["shape"] != out:
        raise VerifyError(node.name, node.op, f"attr shape {node.attrs['shape']} != {out}")
    return out


def softmax(g: Graph, node: Node, x: Shape) -> Shape:
    _need_2d(node, x)
    _check_params(node, {})
    return x


def host(g: Graph, node: Node, x: Shape) -> Shape:
    a = node.attrs
    if not (isinstance(a["feeds"], tuple) and len(a["feeds"]) == len(node.inputs)):
        raise VerifyError(node.name, node.op, "attr feeds must name one model input per input")
    if not isinstance(a["fetch"], str) or not isinstance(a["macs"], int) or a["macs"] < 0:
        raise VerifyError(node.name, node.op, "attr fetch must be a name and macs an int >= 0")
    model = node.params.get("model")
    if (
        set(node.params) != {"model"}
        or not isinstance(model, np.ndarray)
        or model.dtype != np.uint8
    ):
        raise VerifyError(node.name, node.op, "params must be exactly 'model' (uint8 bytes)")
    return g.tensors[node.output].shape


def concat(g: Graph, node: Node, x: Shape) -> Shape:
    shapes = [g.tensors[name].shape for name in node.inputs]
    for shape in shapes:
        _need_4d(node, shape)
        if shape[2:] != x[2:]:
            raise VerifyError(node.name, node.op, f"inputs {shapes} differ in height or width")
    _check_params(node, {})
    return (1, sum(s[1] for s in shapes), x[2], x[3])


def channel_slice(g: Graph, node: Node, x: Shape) -> Shape:
    _need_4d(node, x)
    start, channels = node.attrs["start"], node.attrs["channels"]
    if not (isinstance(start, int) and isinstance(channels, int)) or not (
        0 <= start < start + channels <= x[1]
    ):
        raise VerifyError(node.name, node.op, f"channels {start}+{channels} do not fit {x}")
    _check_params(node, {})
    return (1, channels, x[2], x[3])


def upsample(g: Graph, node: Node, x: Shape) -> Shape:
    _need_4d(node, x)
    sh, sw = _ints(node, "scale", 2, 1)
    _check_params(node, {})
    return (1, x[1], x[2] * sh, x[3] * sw)


def depth_to_space(g: Graph, node: Node, x: Shape) -> Shape:
    _need_4d(node, x)
    sh, sw = _ints(node, "block", 2, 1)
    if x[1] % (sh * sw):
        raise VerifyError(
            node.name, node.op, f"input channels {x[1]} are not a multiple of {sh}x{sw}"
        )
    _check_params(node, {})
    return (1, x[1] // (sh * sw), x[2] * sh, x[3] * sw)


def elementwise(g: Graph, node: Node, x: Shape) -> Shape:
    _check_params(node, {})
    return x


def table(g: Graph, node: Node, x: Shape) -> Shape:
    function, args = node.attrs["function"], node.attrs["args"]
    if function not in FUNCTIONS:
        raise VerifyError(
            node.name, node.op, f"function {function!r} is not one of {', '.join(FUNCTIONS)}"
        )
    arity = FUNCTIONS[function][1]
    if not isinstance(args, tuple) or len(args) != arity:
        raise VerifyError(node.name, node.op, f"{function} takes {arity} args, got {args!r}")
    if not all(isinstance(a, float) and math.isfinite(a) for a in args):
        raise VerifyError(node.name, node.op, f"args must be finite floats, got {args!r}")
    _check_params(node, {})
    return x


#: Import ops of one value per channel (a bias, a batchnorm, a layer scale).
_PER_CHANNEL = ("bias_add", "batchnorm", "channel_mul")


def per_channel(g: Graph, node: Node, x: Shape) -> Shape:
    producer = g.producer(node.inputs[0])
    while producer is not None and producer.op in _PER_CHANNEL:
        producer = g.producer(producer.inputs[0])
    last = is_tokens(x) and producer is not None and producer.op in ("matmul", "gemm")
    c = (np.float32, (x[-1] if last else x[1],))  # a token gemm's channels are last
    if node.op == "channel_mul":
        _check_params(node, {"scale": c})
    elif node.op == "batchnorm":
        eps = node.attrs["epsilon"]
        if not isinstance(eps, float) or not eps >= 0:
            raise VerifyError(node.name, node.op, f"epsilon must be a float >= 0, got {eps!r}")
        _check_params(node, {"gamma": c, "beta": c, "mean": c, "var": c})
    else:
        _check_params(node, {"bias": c})
    return x


def matmul(g: Graph, node: Node, x: Shape) -> Shape:
    return gemm(g, node, x)

"""Integer reference evaluation of a quantized graph, with :mod:`arch.reference_ops` only.

The graph is anything shaped like one (:class:`RefGraph`): the compiler's quantized IR, or the
reference graph an executable carries (:mod:`arch.executable`), so the compiler and the
simulators hold the accelerator to one definition.

This is what the accelerator must reproduce bit for bit, node by node:

Every int8 tensor has a scale and a zero point ``z`` (0 unless the model gave one): it holds
``scale * (q - z)``. Below ``x - z`` is the input minus its zero point, ``rq(v) = requantize(v,
mult, shift)`` and ``R(r) = rq_res(r) - rq_res(z_r)`` (a residual or add input with its zero
point: the hardware adds ``rq_res(r)`` and folds ``-rq_res(z_r)`` into the bias).

* conv: ``acc = conv2d(x - z, weight) + bias`` (zero padding of ``x - z``: the hardware pads
  with ``z`` and folds ``-z * sum(weight)`` into the bias); with a residual ``r``:
  ``acc = add_wrap32(acc, R(r))``; ``y = to_int8(clamp(rq(acc) + z_out, lo, hi))`` (per
  channel, axis 1; for a ``table`` act ``z_out`` is the param ``table_zp``, the table input's).
  gemm the same with ``matmul(x - z, weight.T)`` over the last axis: of a vector ``(1, F)``
  or of each token of a ``(1, T, 1, F)`` tensor (a transformer's ``(1, T, F)``, held like a
  Conv1d's), channels last.
* maxpool: ``max_pool2d`` (output scale and zero point = input's); avgpool:
  ``to_int8(rq(sum_pool2d(x - z)) + z_out)``; global_avgpool likewise with ``global_sum_pool``.
* add: ``acc = add_wrap32(R_a(a), R_b(b))``, ``y = to_int8(clamp(rq(acc) + z_out, lo, hi))``.
* scale: ``acc = x - z`` (times the per-channel ``gate - z_gate``, a (1, C, 1, 1) second
  input, if given), ``y = to_int8(clamp(rq(acc) + z_out, lo, hi))``: a channel-wise product
  (the squeeze-excitation gate), or with one input a requantize-clamp-table of its own (an
  activation no conv, gemm or add can take; the hardware adds ``-z`` as a bias; a gated scale
  runs on the array only with both zero points 0).
* concat: the inputs, which share the output's scale, side by side along channels.
* channel_slice: channels ``start .. start + channels - 1`` of the input (a view, no copy).
* upsample: nearest-neighbour, each pixel repeated ``scale`` = (sh, sw) times.
* depth_to_space: ``block`` = (sh, sw); ``out[c, y*sh + a, x*sw + b] = in[(a*sw + b)*C + c, y, x]``
  (ONNX DepthToSpace, DCR order): the channel groups of a 1x1 conv interleaved into pixels - a
  ConvTranspose whose kernel equals its stride.
* batch_matmul: per head, ``acc = matmul(a - z_a, b - z_b)`` of a (1, H, M, K) and a
  (1, H, K, N) activation (attention's ``q @ k^T`` and ``p @ v``), then the STORE as for conv
  (per-tensor ``mult``/``shift``).
* split_heads: tokens (1, T, 1, F) -> (1, H, T, F/H) (attrs ``heads``): ONNX's Reshape to
  (1, T, H, F/H) then Transpose (0, 2, 1, 3); merge_heads the inverse; split_heads_t:
  tokens (1, T, 1, F) -> (1, H, F/H, T), the Transpose (0, 2, 3, 1) of k for ``q @ k^T``
  (the producer stores it transposed). Views: no rescale.
* flatten: a reshape (NCHW order); softmax: fp32 on the host, after :func:`dequantize`.
* host (nodes the accelerator does not run): their ONNX model (param ``model``) in fp32 on
  onnxruntime (:mod:`arch.host_runtime`), inputs dequantized and fed as ``feeds``, output
  ``fetch`` quantized back with :func:`quantize_input` and the output scale.

The host quantizes the graph input with :func:`quantize_input`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn, Protocol

import numpy as np
import numpy.typing as npt

from arch import host_runtime
from arch import reference_ops as ro
from arch.isa import INT32_MAX, INT32_MIN, MAX_SHIFT, TABLE_ENTRIES

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
    "ReferenceError",
    "check_graph",
    "dequantize",
    "evaluate",
    "evaluate_node",
    "quantize_input",
]


class ReferenceError(ValueError):
    """The graph or its input cannot be evaluated."""


class RefTensor(Protocol):
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def scale(self) -> float | None: ...


class RefNode(Protocol):
    name: str
    op: str
    inputs: list[str]
    output: str
    attrs: dict[str, Any]
    params: dict[str, np.ndarray]


class RefGraph(Protocol):
    @property
    def nodes(self) -> Sequence[RefNode]: ...
    @property
    def tensors(self) -> Mapping[str, RefTensor]: ...
    @property
    def inputs(self) -> Sequence[str]: ...
    @property
    def outputs(self) -> Sequence[str]: ...
    @property
    def quantized(self) -> bool: ...


def quantize_input(x: npt.ArrayLike, scale: float, zero_point: int = 0) -> npt.NDArray[np.int8]:
    """Host input quantization:
    ``clip(round_half_away_from_zero(x / scale) + zero_point, -128, 127)``."""
    v = np.asarray(x, np.float64) / float(scale)
    rounded = np.sign(v) * np.floor(np.abs(v) + 0.5) + int(zero_point)
    return np.clip(rounded, -128, 127).astype(np.int8)


def dequantize(q: npt.ArrayLike, scale: float, zero_point: int = 0) -> npt.NDArray[np.float32]:
    """``scale * (q - zero_point)`` as float32."""
    return ((np.asarray(q, np.float64) - int(zero_point)) * float(scale)).astype(np.float32)


def zero_point(graph: RefGraph, name: str) -> int:
    """The zero point of tensor ``name`` (0: symmetric; graphs without them are symmetric)."""
    return int(getattr(graph.tensors[name], "zero_point", 0) or 0)


def store_zero_point(graph: RefGraph, node: RefNode) -> int:
    """The zero point a node's STORE adds: its output's, or for a ``table`` act the table
    input's (param ``table_zp``, 0 when absent)."""
    if node.attrs.get("act") == "table":
        return int(node.params["table_zp"][0]) if "table_zp" in node.params else 0
    return zero_point(graph, node.output)


def _centred(graph: RefGraph, name: str, x: np.ndarray) -> np.ndarray:
    """``x - zero_point`` as int64: the value an int8 tensor holds, in units of its scale."""
    return x.astype(np.int64) - zero_point(graph, name)


def _rescaled_residual(
    graph: RefGraph, name: str, x: np.ndarray, mult: np.ndarray, shift: np.ndarray, axis: int = 1
) -> np.ndarray:
    """``requant(x) - requant(zero_point)``: a residual or add input with a zero point, as the
    hardware adds it (the zero point's share is a bias the compiler folds; exact when the
    zero point is 0, else within one accumulator unit of ``requant(x - zero_point)``)."""
    out = ro.requantize(x, mult, shift, axis=axis)
    z = zero_point(graph, name)
    if z:
        zs = np.full(np.shape(mult) if np.ndim(mult) else (1,), z, np.int64)
        corr = ro.requantize(zs, mult, shift, axis=0)
        along = [1] * out.ndim
        along[axis] = -1
        out = out - corr.reshape(along)
    return out


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
    return _EVAL[node.op](graph, node, inputs)


def _clamp_int8(graph: RefGraph, node: RefNode, acc: np.ndarray, axis: int) -> np.ndarray:
    """The STORE post-processing: requantize, add the output zero point (a table act's: its
    input's, ``table_zp``), saturate, then the table of a ``table`` act."""
    p = node.params
    lo, hi = (int(v) for v in p["clamp"])
    table = node.attrs["act"] == "table"
    zp = store_zero_point(graph, node)
    scaled = ro.requantize(acc, p["mult"], p["shift"], axis=axis) + zp
    out = ro.to_int8(ro.clamp(scaled, lo, hi))
    return ro.lookup(out, p["table"]) if table else out


def _conv(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    p, a = node.params, node.attrs
    acc = ro.conv2d(
        _centred(graph, node.inputs[0], xs[0]),
        p["weight"],
        stride=a["stride"],
        padding=a["pads"],
        dilation=a["dilation"],
        groups=a["group"],
    )
    acc = ro.add_wrap32(acc, p["bias"][None, :, None, None])
    if len(xs) == 2:
        res = _rescaled_residual(graph, node.inputs[1], xs[1], p["res_mult"], p["res_shift"])
        acc = ro.add_wrap32(acc, res)
    return _clamp_int8(graph, node, acc, axis=1)


def _gemm(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    p = node.params
    x = _centred(graph, node.inputs[0], xs[0])
    acc = ro.add_wrap32(ro.matmul(x, p["weight"].T), p["bias"])
    if len(xs) == 2:
        res = _rescaled_residual(
            graph, node.inputs[1], xs[1], p["res_mult"], p["res_shift"], axis=-1
        )
        acc = ro.add_wrap32(acc, res)
    return _clamp_int8(graph, node, acc, axis=-1)


def _maxpool(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    a = node.attrs
    return ro.max_pool2d(xs[0], a["kernel"], stride=a["stride"], padding=a["pads"])


def _avgpool(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    a, p = node.attrs, node.params
    x = _centred(graph, node.inputs[0], xs[0])  # padding adds 0 = the zero point's value
    acc = ro.sum_pool2d(x, a["kernel"], stride=a["stride"], padding=a["pads"])
    zp = zero_point(graph, node.output)
    return ro.to_int8(ro.requantize(acc, p["mult"], p["shift"]) + zp)


def _global_avgpool(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    p = node.params
    acc = ro.global_sum_pool(_centred(graph, node.inputs[0], xs[0]))
    zp = zero_point(graph, node.output)
    return ro.to_int8(ro.requantize(acc, p["mult"], p["shift"]) + zp)


def _add(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    p = node.params
    acc = ro.add_wrap32(
        _rescaled_residual(graph, node.inputs[0], xs[0], p["a_mult"], p["a_shift"]),
        _rescaled_residual(graph, node.inputs[1], xs[1], p["b_mult"], p["b_shift"]),
    )
    return _clamp_int8(graph, node, acc, axis=1)


def _scale(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    acc = _centred(graph, node.inputs[0], xs[0])
    if len(xs) == 2:
        acc = acc * _centred(graph, node.inputs[1], xs[1])
    return _clamp_int8(graph, node, acc, axis=1)


def _batch_matmul(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    a = _centred(graph, node.inputs[0], xs[0])
    b = _centred(graph, node.inputs[1], xs[1])
    return _clamp_int8(graph, node, ro.matmul(a, b), axis=-1)


def _split_heads(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    _, t, _, d = xs[0].shape
    heads = node.attrs["heads"]
    return xs[0].reshape(1, t, heads, d // heads).transpose(0, 2, 1, 3).copy()


def _split_heads_t(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    _, t, _, d = xs[0].shape
    heads = node.attrs["heads"]
    return xs[0].reshape(1, t, heads, d // heads).transpose(0, 2, 3, 1).copy()


def _merge_heads(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    _, heads, t, d = xs[0].shape
    return xs[0].transpose(0, 2, 1, 3).reshape(1, t, 1, heads * d).copy()


def _flatten(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    return xs[0].reshape(graph.tensors[node.output].shape)


def _concat(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(xs, axis=1)


def _channel_slice(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    start = node.attrs["start"]
    return xs[0][:, start : start + node.attrs["channels"]]


def _upsample(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    sh, sw = node.attrs["scale"]
    return np.repeat(np.repeat(xs[0], sh, axis=2), sw, axis=3)


def _depth_to_space(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    sh, sw = node.attrs["block"]
    n, cs, h, w = xs[0].shape
    blocks = xs[0].reshape(n, sh, sw, cs // (sh * sw), h, w)
    return blocks.transpose(0, 3, 4, 1, 5, 2).reshape(n, cs // (sh * sw), h * sh, w * sw)


def _softmax(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    scale = graph.tensors[node.inputs[0]].scale
    assert scale is not None  # verified
    x = dequantize(xs[0], scale, zero_point(graph, node.inputs[0]))
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def _host(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    """Nodes the accelerator does not run: their ONNX model in fp32 (onnxruntime) on the
    dequantized inputs, the output quantized back with its scale like the network input."""
    feeds = {
        feed: dequantize(x, graph.tensors[name].scale or 1.0, zero_point(graph, name))
        for feed, name, x in zip(node.attrs["feeds"], node.inputs, xs, strict=True)
    }
    model = node.params["model"].tobytes()
    y = host_runtime.run(model, feeds, node.attrs["fetch"])
    out = graph.tensors[node.output]
    return quantize_input(y.reshape(out.shape), out.scale or 1.0, zero_point(graph, node.output))


_EVAL: dict[str, Any] = {
    "conv": _conv,
    "gemm": _gemm,
    "maxpool": _maxpool,
    "avgpool": _avgpool,
    "global_avgpool": _global_avgpool,
    "add": _add,
    "scale": _scale,
    "flatten": _flatten,
    "softmax": _softmax,
    "host": _host,
    "concat": _concat,
    "channel_slice": _channel_slice,
    "upsample": _upsample,
    "depth_to_space": _depth_to_space,
    "batch_matmul": _batch_matmul,
    "split_heads": _split_heads,
    "split_heads_t": _split_heads_t,
    "merge_heads": _merge_heads,
}

#: The ops the integer reference defines.
REFERENCE_OPS: tuple[str, ...] = tuple(_EVAL)


# --- what each op needs ----------------------------------------------------------------------

_WEIGHTED = {"weight": "int8", "bias": "int32", "mult": "int64", "shift": "int64", "clamp": "int64"}
_RESCALE = {"mult": "int64", "shift": "int64"}

#: The params each op reads (name -> dtype), exactly these: a node of the op has no others.
#: Their shapes follow from the node's input (see :func:`check_graph`).
PARAMS_OF_OP: dict[str, dict[str, str]] = {
    "conv": _WEIGHTED,
    "gemm": _WEIGHTED,
    "maxpool": {},
    "avgpool": _RESCALE,
    "global_avgpool": _RESCALE,
    "add": {
        "a_mult": "int64",
        "a_shift": "int64",
        "b_mult": "int64",
        "b_shift": "int64",
        "mult": "int64",
        "shift": "int64",
        "clamp": "int64",
    },
    "scale": {"mult": "int64", "shift": "int64", "clamp": "int64"},
    "flatten": {},
    "softmax": {},
    "host": {"model": "uint8"},
    "concat": {},
    "channel_slice": {},
    "upsample": {},
    "depth_to_space": {},
    "batch_matmul": {"mult": "int64", "shift": "int64", "clamp": "int64"},
    "split_heads": {},
    "split_heads_t": {},
    "merge_heads": {},
}
#: The params a conv or gemm with a residual (second) input reads besides its own.
RESIDUAL_PARAMS: dict[str, str] = {"res_mult": "int64", "res_shift": "int64"}
#: The param a conv, gemm, add or scale whose ``act`` is ``"table"`` reads besides its own: the
#: activation as :data:`arch.isa.TABLE_ENTRIES` int8 outputs, one per saturated int8 code.
TABLE_PARAMS: dict[str, str] = {"table": "int8"}
#: The attrs of each op's nodes, exactly these (``act`` None/relu/relu6 is informational:
#: ``clamp`` applies it; ``"table"`` applies the ``table`` param after the clamp; ``onnx_ops``
#: and ``macs`` of a host node are for reports).
ATTRS_OF_OP: dict[str, frozenset[str]] = {
    "conv": frozenset({"kernel", "stride", "pads", "dilation", "group", "act"}),
    "gemm": frozenset({"act"}),
    "maxpool": frozenset({"kernel", "stride", "pads"}),
    "avgpool": frozenset({"kernel", "stride", "pads", "count_include_pad"}),
    "global_avgpool": frozenset(),
    "add": frozenset({"act"}),
    "scale": frozenset({"act"}),
    "flatten": frozenset(),
    "softmax": frozenset(),
    "host": frozenset({"onnx_ops", "feeds", "fetch", "macs"}),
    "concat": frozenset(),
    "channel_slice": frozenset({"start", "channels"}),
    "upsample": frozenset({"scale"}),
    "depth_to_space": frozenset({"block"}),
    "batch_matmul": frozenset({"act"}),
    "split_heads": frozenset({"heads"}),
    "split_heads_t": frozenset({"heads"}),
    "merge_heads": frozenset(),
}
#: Inputs of each op (lowest, highest); others take one.
ARITY_OF_OP: dict[str, tuple[int, int]] = {
    "conv": (1, 2),
    "gemm": (1, 2),
    "add": (2, 2),
    "batch_matmul": (2, 2),
    "scale": (1, 2),
    "host": (1, 1 << 16),
    "concat": (2, 1 << 10),
}
#: Values of the ``act`` attr.
ACTS: tuple[str | None, ...] = (None, "relu", "relu6", "table")
#: The most elements a tensor the reference evaluates may have, a padded input included
#: (ResNet-50 at 224x224: 3.2 M at most).
MAX_ELEMENTS = 1 << 26
#: The most multiply-accumulates of conv and gemm nodes in a graph the reference evaluates
#: (ResNet-50 at 224x224: 4.1 G): more would take the reference hours.
MAX_MACS = 1 << 36


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Node:
    """Checks of one node; every failure names the node."""

    def __init__(self, graph: RefGraph, node: RefNode) -> None:
        self.graph, self.node = graph, node

    def fail(self, message: str) -> NoReturn:
        raise ReferenceError(f"node {_short(self.node.name)} ({self.node.op}): {message}")

    def ints(self, key: str, count: int, minimum: int) -> tuple[int, ...]:
        value = self.node.attrs[key]
        if (
            not isinstance(value, tuple)
            or len(value) != count
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            or min(value) < minimum
        ):
            self.fail(f"attr {key!r} must be {count} integers >= {minimum}, not {_short(value)}")
        return value

    def shape(self, name: str, ndim: int, what: str) -> tuple[int, ...]:
        shape = tuple(self.graph.tensors[name].shape)
        if len(shape) != ndim:
            form = "(1, C, H, W)" if ndim == 4 else "(1, F)"
            self.fail(f"{what} {_short(name)} must be {form}, not {shape}")
        return shape

    def param_shapes(self, shapes: Mapping[str, tuple[int, ...]]) -> None:
        for key, shape in shapes.items():
            if self.node.params[key].shape != shape:
                self.fail(
                    f"param {key!r} has shape {self.node.params[key].shape}; expected {shape}"
                )

    def rescale(self, mult: str, shift: str) -> None:
        m, s = self.node.params[mult], self.node.params[shift]
        if m.size and (int(m.min()) < INT32_MIN or int(m.max()) > INT32_MAX):
            self.fail(f"param {mult!r} must be in the int32 range")
        if s.size and (int(s.min()) < 0 or int(s.max()) > MAX_SHIFT):
            self.fail(f"param {shift!r} must be in 0..{MAX_SHIFT}")

    def clamp(self) -> None:
        """The STORE post-processing params: clamp bounds, and the table of a table act."""
        lo, hi = (int(v) for v in self.node.params["clamp"])
        if not -128 <= lo <= hi <= 127:
            self.fail(f"clamp [{lo}, {hi}] must satisfy -128 <= lo <= hi <= 127")
        if self.node.attrs["act"] == "table":
            self.param_shapes({"table": (TABLE_ENTRIES,)})

    def window(
        self, x: tuple[int, ...], kernel: tuple[int, ...], dilation: tuple[int, ...]
    ) -> tuple[int, int]:
        """Output height and width of a window op over ``x`` (floor mode)."""
        stride, pads = self.ints("stride", 2, 1), self.ints("pads", 4, 0)
        eh, ew = (dilation[i] * (kernel[i] - 1) + 1 for i in (0, 1))
        oh = (x[2] + pads[0] + pads[2] - eh) // stride[0] + 1
        ow = (x[3] + pads[1] + pads[3] - ew) // stride[1] + 1
        padded = x[1] * (x[2] + pads[0] + pads[2]) * (x[3] + pads[1] + pads[3])
        if padded > MAX_ELEMENTS:
            self.fail(f"the padded input has {padded} elements, more than {MAX_ELEMENTS}")
        if oh < 1 or ow < 1:
            self.fail(f"kernel {kernel[0]}x{kernel[1]} does not fit the padded input")
        return oh, ow


def _weighted(c: _Node, xs: list[tuple[int, ...]]) -> tuple[int, ...]:
    node = c.node
    weight = node.params["weight"]
    if node.op == "conv":
        x = c.shape(node.inputs[0], 4, "input")
        kernel, dilation = c.ints("kernel", 2, 1), c.ints("dilation", 2, 1)
        group = node.attrs["group"]
        if not isinstance(group, int) or isinstance(group, bool) or group < 1:
            c.fail(f"attr 'group' must be an integer >= 1, not {_short(group)}")
        if weight.ndim != 4 or weight.shape[2:] != kernel:
            c.fail(
                f"param 'weight' has shape {weight.shape}; expected "
                f"(O, C/group, {kernel[0]}, {kernel[1]})"
            )
        o = weight.shape[0]
        if weight.shape[1] * group != x[1] or o % group:
            c.fail(f"param 'weight' {weight.shape} does not fit input {x} with group {group}")
        out: tuple[int, ...] = (1, o, *c.window(x, kernel, dilation))
    else:
        x = tuple(c.graph.tensors[node.inputs[0]].shape)
        if not (len(x) == 2 or (len(x) == 4 and x[2] == 1)):
            c.fail(f"input {_short(node.inputs[0])} must be (1, F) or tokens (1, T, 1, F), not {x}")
        if weight.ndim != 2 or weight.shape[1] != x[-1]:
            c.fail(f"param 'weight' has shape {weight.shape}; expected (N, {x[-1]})")
        o = weight.shape[0]
        out = (*x[:-1], o)
    per_channel = ["bias", "mult", "shift"]
    if len(node.inputs) == 2:
        per_channel += list(RESIDUAL_PARAMS)
        if xs[1] != out:
            c.fail(f"residual {_short(node.inputs[1])} has shape {xs[1]}; expected {out}")
        c.rescale("res_mult", "res_shift")
    c.param_shapes({key: (o,) for key in per_channel} | {"clamp": (2,)})
    c.rescale("mult", "shift")
    c.clamp()
    return out


def _pooled(c: _Node, xs: list[tuple[int, ...]]) -> tuple[int, ...]:
    x = c.shape(c.node.inputs[0], 4, "input")
    if c.node.op == "global_avgpool":
        out: tuple[int, ...] = (1, x[1], 1, 1)
    else:
        out = (1, x[1], *c.window(x, c.ints("kernel", 2, 1), (1, 1)))
    if c.node.op != "maxpool":
        c.param_shapes({"mult": (1,), "shift": (1,)})
        c.rescale("mult", "shift")
    elif not _same_quantization(c):
        c.fail("output scale and zero point must equal the input ones (max pooling keeps codes)")
    return out


def _added(c: _Node, xs: list[tuple[int, ...]]) -> tuple[int, ...]:
    if xs[1] != xs[0]:
        c.fail(f"inputs have shapes {xs[0]} and {xs[1]}; they must be equal")
    c.param_shapes({key: (1,) for key in PARAMS_OF_OP["add"] if key != "clamp"} | {"clamp": (2,)})
    for prefix in ("a_", "b_", ""):
        c.rescale(f"{prefix}mult", f"{prefix}shift")
    c.clamp()
    return xs[0]


def _scaled(c: _Node, xs: list[tuple[int, ...]]) -> tuple[int, ...]:
    x = c.shape(c.node.inputs[0], 4, "input")
    if len(xs) == 2 and xs[1] != (1, x[1], 1, 1):
        c.fail(f"gate {_short(c.node.inputs[1])} has shape {xs[1]}; expected {(1, x[1], 1, 1)}")
    c.param_shapes({"mult": (1,), "shift": (1,), "clamp": (2,)})
    c.rescale("mult", "shift")
    c.clamp()
    return x


def _multiplied(c: _Node, xs: list[tuple[int, ...]]) -> tuple[int, ...]:
    a, b = (c.shape(name, 4, "input") for name in c.node.inputs)
    if a[:2] != b[:2] or a[3] != b[2]:
        c.fail(f"inputs {a} and {b} are not (1, H, M, K) and (1, H, K, N)")
    c.param_shapes({"mult": (1,), "shift": (1,), "clamp": (2,)})
    c.rescale("mult", "shift")
    c.clamp()
    return (*a[:3], b[3])


def _split(c: _Node, xs: list[tuple[int, ...]]) -> tuple[int, ...]:
    x = c.shape(c.node.inputs[0], 4, "input")
    heads = c.node.attrs["heads"]
    if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1:
        c.fail(f"attr 'heads' must be an integer >= 1, not {_short(heads)}")
    if x[2] != 1 or x[3] % heads:
        c.fail(f"input {x} is not tokens (1, T, 1, F) of {_short(c.node.attrs['heads'])} heads")
    if not _same_quantization(c):
        c.fail("output scale must equal the input scale (heads are a view)")
    if c.node.op == "split_heads_t":
        return (1, heads, x[3] // heads, x[1])
    return (1, heads, x[1], x[3] // heads)


def _merged(c: _Node, xs: list[tuple[int, ...]]) -> tuple[int, ...]:
    x = c.shape(c.node.inputs[0], 4, "input")
    if not _same_quantization(c):
        c.fail("output scale must equal the input scale (heads are a view)")
    return (1, x[2], 1, x[1] * x[3])


def _flattened(c: _Node, xs: list[tuple[int, ...]]) -> tuple[int, ...]:
    x = c.shape(c.node.inputs[0], 4, "input")
    return (1, x[1] * x[2] * x[3])


def _softmaxed(c: _Node, xs: list[tuple[int, ...]]) -> tuple[int, ...]:
    return c.shape(c.node.inputs[0], 2, "input")


def _concatenated(c: _Node, xs: list[tuple[int, ...]]) -> tuple[int, ...]:
    shapes = [c.shape(name, 4, "input") for name in c.node.inputs]
    if len({s[2:] for s in shapes}) != 1:
        c.fail(f"inputs {shapes} differ in height or width")
    scales = {
        (c.graph.tensors[name].scale, zero_point(c.graph, name))
        for name in (*c.node.inputs, c.node.output)
    }
    if len(scales) != 1:
        c.fail(
            "inputs and output must share one scale and zero point (an int8 concat does not "
            "rescale)"
        )
    return (1, sum(s[1] for s in shapes), shapes[0][2], shapes[0][3])


def _sliced(c: _Node, xs: list[tuple[int, ...]]) -> tuple[int, ...]:
    x = c.shape(c.node.inputs[0], 4, "input")
    start, channels = c.node.attrs["start"], c.node.attrs["channels"]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, channels)) or not (
        0 <= start < start + channels <= x[1]
    ):
        c.fail(f"channels {_short(start)} + {_short(channels)} do not fit input {x}")
    if c.graph.tensors[c.node.output].scale != c.graph.tensors[c.node.inputs[0]].scale:
        c.fail("output and input must share one scale (a slice does not rescale)")
    return (1, channels, x[2], x[3])


def _upsampled(c: _Node, xs: list[tuple[int, ...]]) -> tuple[int, ...]:
    x = c.shape(c.node.inputs[0], 4, "input")
    scale = c.node.attrs["scale"]
    if not (
        isinstance(scale, tuple)
        and len(scale) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 64 for v in scale)
    ):
        c.fail(f"attr 'scale' must be 2 integers in 1..64, not {_short(scale)}")
    if not _same_quantization(c):
        c.fail("output scale must equal the input scale (nearest upsampling copies codes)")
    return (1, x[1], x[2] * scale[0], x[3] * scale[1])


def _unshuffled(c: _Node, xs: list[tuple[int, ...]]) -> tuple[int, ...]:
    x = c.shape(c.node.inputs[0], 4, "input")
    sh, sw = c.ints("block", 2, 1)
    if x[1] % (sh * sw):
        c.fail(f"input channels {x[1]} are not a multiple of the block {sh}x{sw}")
    if not _same_quantization(c):
        c.fail("output scale must equal the input scale (depth_to_space copies codes)")
    return (1, x[1] // (sh * sw), x[2] * sh, x[3] * sw)


def _same_quantization(c: _Node) -> bool:
    x, y = c.node.inputs[0], c.node.output
    t = c.graph.tensors
    return (t[x].scale, zero_point(c.graph, x)) == (t[y].scale, zero_point(c.graph, y))


def _hosted(c: _Node, xs: list[tuple[int, ...]]) -> tuple[int, ...]:
    a = c.node.attrs
    if not (
        isinstance(a["feeds"], tuple)
        and len(a["feeds"]) == len(c.node.inputs)
        and all(isinstance(f, str) for f in a["feeds"])
    ):
        c.fail("attr 'feeds' must name one model input per input")
    if not isinstance(a["fetch"], str):
        c.fail(f"attr 'fetch' must be a name, not {_short(a['fetch'])}")
    if not (isinstance(a["onnx_ops"], tuple) and all(isinstance(o, str) for o in a["onnx_ops"])):
        c.fail(f"attr 'onnx_ops' must be a list of names, not {_short(a['onnx_ops'])}")
    if not isinstance(a["macs"], int) or isinstance(a["macs"], bool) or a["macs"] < 0:
        c.fail(f"attr 'macs' must be an integer >= 0, not {_short(a['macs'])}")
    if c.node.params["model"].ndim != 1:
        c.fail("param 'model' must be 1-D (the bytes of an ONNX model)")
    return tuple(c.graph.tensors[c.node.output].shape)  # what the model gives is reshaped


_OUTPUT_SHAPE: dict[str, Any] = {
    "conv": _weighted,
    "gemm": _weighted,
    "maxpool": _pooled,
    "avgpool": _pooled,
    "global_avgpool": _pooled,
    "add": _added,
    "scale": _scaled,
    "flatten": _flattened,
    "softmax": _softmaxed,
    "host": _hosted,
    "concat": _concatenated,
    "channel_slice": _sliced,
    "upsample": _upsampled,
    "depth_to_space": _unshuffled,
    "batch_matmul": _multiplied,
    "split_heads": _split,
    "split_heads_t": _split,
    "merge_heads": _merged,
}


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
        _check_node(graph, node)
        if node.op in ("conv", "gemm"):  # output elements x weights per output
            weight = node.params["weight"]
            macs += math.prod(graph.tensors[node.output].shape) * (weight.size // weight.shape[0])
        elif node.op == "batch_matmul":  # output elements x K
            k = graph.tensors[node.inputs[0]].shape[-1]
            macs += math.prod(graph.tensors[node.output].shape) * k
    if macs > MAX_MACS:
        raise ReferenceError(
            f"the graph needs {macs} multiply-accumulates, more than the reference evaluates "
            f"({MAX_MACS})"
        )


def _check_node(graph: RefGraph, node: RefNode) -> None:
    c = _Node(graph, node)
    if node.op not in _OUTPUT_SHAPE:
        c.fail(f"op is not one of {', '.join(REFERENCE_OPS)}")
    lo, hi = ARITY_OF_OP.get(node.op, (1, 1))
    if not lo <= len(node.inputs) <= hi:
        c.fail(f"has {len(node.inputs)} inputs; expected {lo}..{hi}")
    if set(node.attrs) != ATTRS_OF_OP[node.op]:
        c.fail(f"attrs {_short(sorted(node.attrs))} must be exactly {sorted(ATTRS_OF_OP[node.op])}")
    if "act" in node.attrs and node.attrs["act"] not in ACTS:
        c.fail(f"attr 'act' {_short(node.attrs['act'])} is not one of {ACTS}")
    wanted = dict(PARAMS_OF_OP[node.op])
    if node.op in ("conv", "gemm") and len(node.inputs) == 2:
        wanted |= RESIDUAL_PARAMS
    if node.attrs.get("act") == "table":
        wanted |= TABLE_PARAMS
        if "table_zp" in node.params:  # optional: the table input's zero point
            wanted |= {"table_zp": "int64"}
    if set(node.params) != set(wanted):
        c.fail(f"params {_short(sorted(node.params))} must be exactly {sorted(wanted)}")
    for key, dtype in wanted.items():
        if node.params[key].dtype != np.dtype(dtype):
            c.fail(f"param {key!r} must be {dtype}, not {node.params[key].dtype}")
    xs = [tuple(graph.tensors[name].shape) for name in node.inputs]
    out = _OUTPUT_SHAPE[node.op](c, xs)
    if tuple(graph.tensors[node.output].shape) != out:
        c.fail(
            f"output {_short(node.output)} has shape {tuple(graph.tensors[node.output].shape)}; "
            f"the op gives {out}"
        )
    for name in node.inputs:
        if graph.tensors[name].scale is None:
            c.fail(f"input {_short(name)} has no scale (an int8 tensor needs one)")
    scale = graph.tensors[node.output].scale
    if (node.op == "softmax") != (scale is None):
        c.fail(
            "a softmax output is fp32 and has no scale"
            if node.op == "softmax"
            else f"output {_short(node.output)} has no scale (an int8 tensor needs one)"
        )

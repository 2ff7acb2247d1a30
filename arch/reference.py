"""Integer reference evaluation of a quantized graph, with :mod:`arch.reference_ops` only.

The graph is anything shaped like one (:class:`RefGraph`): the compiler's quantized IR, or the
reference graph an executable carries (:mod:`arch.executable`), so the compiler and the
simulators hold the accelerator to one definition.

This is what the accelerator must reproduce bit for bit, node by node:

* conv: ``acc = conv2d(x, weight) + bias``; with a residual ``r``:
  ``acc = add_wrap32(acc, requantize(r, res_mult, res_shift))``;
  ``y = to_int8(clamp(requantize(acc, mult, shift), lo, hi))`` (per channel, axis 1).
  gemm the same with ``matmul(x, weight.T)``.
* maxpool: ``max_pool2d``; avgpool: ``to_int8(requantize(sum_pool2d(x), mult, shift))``;
  global_avgpool likewise with ``global_sum_pool``.
* add: ``acc = add_wrap32(requantize(a, a_mult, a_shift), requantize(b, b_mult, b_shift))``,
  ``y = to_int8(clamp(requantize(acc, mult, shift), lo, hi))``.
* flatten: a reshape (NCHW order); softmax: fp32 on the host, after :func:`dequantize`.
* host (nodes the accelerator does not run): their ONNX model (param ``model``) in fp32 on
  onnxruntime (:mod:`arch.host_runtime`), inputs dequantized and fed as ``feeds``, output
  ``fetch`` quantized back with :func:`quantize_input` and the output scale.

The host quantizes the graph input with :func:`quantize_input`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from arch import host_runtime
from arch import reference_ops as ro

__all__ = [
    "REFERENCE_OPS",
    "ReferenceError",
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


def quantize_input(x: npt.ArrayLike, scale: float) -> npt.NDArray[np.int8]:
    """Host input quantization: ``clip(round_half_away_from_zero(x / scale), -128, 127)``."""
    v = np.asarray(x, np.float64) / float(scale)
    rounded = np.sign(v) * np.floor(np.abs(v) + 0.5)
    return np.clip(rounded, -128, 127).astype(np.int8)


def dequantize(q: npt.ArrayLike, scale: float) -> npt.NDArray[np.float32]:
    """``scale * q`` as float32."""
    return (np.asarray(q, np.float64) * float(scale)).astype(np.float32)


def evaluate(graph: RefGraph, input_q: npt.ArrayLike) -> dict[str, np.ndarray]:
    """Run a quantized graph on the int8 input; int8 output of every node (softmax: float32).

    The result also holds the input under its tensor name.
    """
    if not graph.quantized:
        raise ReferenceError("the reference evaluates quantized graphs only")
    name = graph.inputs[0]
    x = np.asarray(input_q)
    if x.dtype != np.int8 or x.shape != graph.tensors[name].shape:
        raise ReferenceError(
            f"graph input {name!r} is {x.dtype} {x.shape}; "
            f"expected int8 {graph.tensors[name].shape} (see quantize_input)"
        )
    values: dict[str, np.ndarray] = {name: x}
    for node in graph.nodes:
        values[node.output] = evaluate_node(graph, node, [values[i] for i in node.inputs])
    return values


def evaluate_node(graph: RefGraph, node: RefNode, inputs: list[np.ndarray]) -> np.ndarray:
    """One node of ``graph`` on its input values (int8, or fp32 after a softmax)."""
    return _EVAL[node.op](graph, node, inputs)


def _clamp_int8(node: RefNode, acc: np.ndarray, axis: int) -> np.ndarray:
    p = node.params
    lo, hi = (int(v) for v in p["clamp"])
    return ro.to_int8(ro.clamp(ro.requantize(acc, p["mult"], p["shift"], axis=axis), lo, hi))


def _conv(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    p, a = node.params, node.attrs
    acc = ro.conv2d(
        xs[0],
        p["weight"],
        stride=a["stride"],
        padding=a["pads"],
        dilation=a["dilation"],
        groups=a["group"],
    )
    acc = ro.add_wrap32(acc, p["bias"][None, :, None, None])
    if len(xs) == 2:
        acc = ro.add_wrap32(acc, ro.requantize(xs[1], p["res_mult"], p["res_shift"], axis=1))
    return _clamp_int8(node, acc, axis=1)


def _gemm(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    p = node.params
    acc = ro.add_wrap32(ro.matmul(xs[0], p["weight"].T), p["bias"][None, :])
    if len(xs) == 2:
        acc = ro.add_wrap32(acc, ro.requantize(xs[1], p["res_mult"], p["res_shift"], axis=1))
    return _clamp_int8(node, acc, axis=1)


def _maxpool(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    a = node.attrs
    return ro.max_pool2d(xs[0], a["kernel"], stride=a["stride"], padding=a["pads"])


def _avgpool(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    a, p = node.attrs, node.params
    acc = ro.sum_pool2d(xs[0], a["kernel"], stride=a["stride"], padding=a["pads"])
    return ro.to_int8(ro.requantize(acc, p["mult"], p["shift"]))


def _global_avgpool(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    p = node.params
    return ro.to_int8(ro.requantize(ro.global_sum_pool(xs[0]), p["mult"], p["shift"]))


def _add(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    p = node.params
    acc = ro.add_wrap32(
        ro.requantize(xs[0], p["a_mult"], p["a_shift"]),
        ro.requantize(xs[1], p["b_mult"], p["b_shift"]),
    )
    return _clamp_int8(node, acc, axis=1)


def _flatten(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    return xs[0].reshape(graph.tensors[node.output].shape)


def _softmax(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    scale = graph.tensors[node.inputs[0]].scale
    assert scale is not None  # verified
    x = dequantize(xs[0], scale)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def _host(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    """Nodes the accelerator does not run: their ONNX model in fp32 (onnxruntime) on the
    dequantized inputs, the output quantized back with its scale like the network input."""
    feeds = {
        feed: dequantize(x, graph.tensors[name].scale or 1.0)
        for feed, name, x in zip(node.attrs["feeds"], node.inputs, xs, strict=True)
    }
    model = node.params["model"].tobytes()
    y = host_runtime.run(model, feeds, node.attrs["fetch"])
    out = graph.tensors[node.output]
    return quantize_input(y.reshape(out.shape), out.scale or 1.0)


_EVAL: dict[str, Any] = {
    "conv": _conv,
    "gemm": _gemm,
    "maxpool": _maxpool,
    "avgpool": _avgpool,
    "global_avgpool": _global_avgpool,
    "add": _add,
    "flatten": _flatten,
    "softmax": _softmax,
    "host": _host,
}

#: The ops the integer reference defines.
REFERENCE_OPS: tuple[str, ...] = tuple(_EVAL)

"""host: nodes the accelerator does not run (partitioning, ``compiler.host_regions``).

Their ONNX model (param ``model``) runs in fp32 on onnxruntime (:mod:`arch.host_runtime`), the
inputs dequantized and fed as ``feeds``, output ``fetch`` quantized back with
:func:`~arch.ops.quant.quantize_input` and the output scale. ``onnx_ops`` and ``macs`` are for
reports; the output shape is ONNX shape inference's (what the model gives is reshaped).
"""

from __future__ import annotations

import numpy as np

from arch import host_runtime
from arch.norm_ops import MASKED_BELOW
from arch.ops.check import NodeCheck, short
from arch.ops.quant import dequantize, quantize_input, zero_point
from arch.ops.spec import OpSpec, RefGraph, RefNode, Shape

__all__ = ["HOST", "SPECS"]


def _host(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    """Their ONNX model in fp32 (onnxruntime) on the dequantized inputs, the output quantized
    back with its scale like the network input."""
    feeds = {
        feed: dequantize(x, graph.tensors[name].scale or 1.0, zero_point(graph, name))
        for feed, name, x in zip(node.attrs["feeds"], node.inputs, xs, strict=True)
    }
    model = node.params["model"].tobytes()
    try:
        y = host_runtime.run(model, feeds, node.attrs["fetch"])
    except host_runtime.HostTimeout as exc:
        raise host_runtime.HostTimeout(f"host step {node.name!r} {exc}") from None
    mask = _softmax_mask(graph, node.output)
    bad = ~np.isfinite(y) & ~(mask & (y == -np.inf))
    if bad.any():
        ops = ", ".join(dict.fromkeys(node.attrs["onnx_ops"]))
        raise host_runtime.HostOutputNotFinite(
            f"host step {node.name} ({ops}) gives {int(bad.sum())} of {y.size} values that are "
            "not finite (NaN or infinite) for this input: a Log or Sqrt of a negative, a "
            "Reciprocal of 0? The reference is not a number there; give an input in the "
            "ops' domain"
        )
    if mask:
        _check_mask(node, y)
    out = graph.tensors[node.output]
    return quantize_input(y.reshape(out.shape), out.scale or 1.0, zero_point(graph, node.output))


def _softmax_mask(graph: RefGraph, name: str) -> bool:
    """Whether ``name`` is a row_softmax's additive mask input (the device reads its codes as
    keep (0) or mask (-128) only)."""
    return any(n.op == "row_softmax" and list(n.inputs[1:]) == [name] for n in graph.nodes)


def _check_mask(node: RefNode, y: np.ndarray) -> None:
    """An additive mask must be 0 where kept and <= MASKED_BELOW (or -inf) where masked: a
    value in between would be rounded to a multiple of the mask scale, not applied."""
    between = (y != 0) & (y > MASKED_BELOW)
    if between.any():
        value = float(y[between].flat[0])
        raise host_runtime.HostMaskNotBinary(
            f"host step {node.name} computes the attention mask of a Softmax on the device, "
            f"and {int(between.sum())} of its {y.size} values are neither 0 nor <= "
            f"{MASKED_BELOW:g} (e.g. {value:g}); supported: 0 to keep a position, <= "
            f"{MASKED_BELOW:g} or -inf to mask it"
        )


def _hosted(c: NodeCheck, xs: list[Shape]) -> Shape:
    a = c.node.attrs
    if not (
        isinstance(a["feeds"], tuple)
        and len(a["feeds"]) == len(c.node.inputs)
        and all(isinstance(f, str) for f in a["feeds"])
    ):
        c.fail("attr 'feeds' must name one model input per input")
    if not isinstance(a["fetch"], str):
        c.fail(f"attr 'fetch' must be a name, not {short(a['fetch'])}")
    if not (isinstance(a["onnx_ops"], tuple) and all(isinstance(o, str) for o in a["onnx_ops"])):
        c.fail(f"attr 'onnx_ops' must be a list of names, not {short(a['onnx_ops'])}")
    if not isinstance(a["macs"], int) or isinstance(a["macs"], bool) or a["macs"] < 0:
        c.fail(f"attr 'macs' must be an integer >= 0, not {short(a['macs'])}")
    if c.node.params["model"].ndim != 1:
        c.fail("param 'model' must be 1-D (the bytes of an ONNX model)")
    return tuple(c.graph.tensors[c.node.output].shape)  # what the model gives is reshaped


HOST = OpSpec(
    name="host",
    attrs=frozenset({"onnx_ops", "feeds", "fetch", "macs"}),
    params={"model": "uint8"},
    arity=(1, 1 << 16),
    keeps_scale=False,
    output_shape=_hosted,
    evaluate=_host,
)
SPECS = (HOST,)

"""The int8 params of each op, one quantizer per op (:mod:`compiler.op_rules` says which): run
by the quantize pass (:mod:`compiler.passes.quantize`) once every tensor has its scale.

Fixed-point rescales come from :func:`arch.reference_ops.quantize_multipliers`;
:mod:`arch.reference` defines the integer semantics they feed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from arch.isa import INT32_MAX, INT32_MIN
from arch.norm_ops import MASKED_BELOW, norm_params, softmax_params
from arch.ops.quant import quantize_input
from arch.reference_ops import quantize_multipliers

from .errors import Unplaceable

if TYPE_CHECKING:
    from .ir import Graph, Node

__all__ = ["ADD_EXTRA_BITS", "scale_of", "store_clamp"]

#: add: the accumulator scale is ``s_out / 2**ADD_EXTRA_BITS`` (extra fraction bits).
ADD_EXTRA_BITS = 8


def rescale(node: Node, scales: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """int64 ``(mult, shift)`` for real rescales ``scales``; Unplaceable naming the node."""
    try:
        mult, shift = quantize_multipliers(np.asarray(scales, np.float64).reshape(-1))
    except ValueError:
        arr = np.asarray(scales, np.float64).reshape(-1)
        raise Unplaceable(
            node.name,
            node.op,
            f"{what} rescale {arr.min():.3g}..{arr.max():.3g} is out of "
            "range for a fixed-point multiplier",
            "rescales of about 2**-32 .. 2**31",
        ) from None
    return mult.astype(np.int64), shift.astype(np.int64)


def store_clamp(act: str | None, s_out: float, z_out: int = 0) -> np.ndarray:
    """Saturation bounds of a STORE whose output has scale ``s_out`` and zero point ``z_out``
    (real 0 is the code ``z_out``)."""
    if act is None or act == "table":
        return np.array([-128, 127], np.int64)
    if act == "relu":
        return np.array([z_out, 127], np.int64)
    return np.array([z_out, min(127, z_out + int(np.floor(6.0 / s_out + 0.5)))], np.int64)


def scale_of(g: Graph, name: str) -> float:
    s = g.tensors[name].scale
    assert s is not None, name  # _calibrate scaled every tensor
    return s


# --------------------------------------------------------------------------- per op


def weighted(g: Graph, node: Node) -> None:
    """conv / gemm: int8 per-channel weights, int32 bias, rescale, clamp, residual rescale."""
    p = node.params
    s_in, s_out = scale_of(g, node.inputs[0]), scale_of(g, node.output)
    w = p["weight"].astype(np.float64)  # pragma: no mutate - astype(None) is float64 too
    if "weight_q" in p:
        wq, sw = p["weight_q"], p["weight_scale"].astype(np.float64)
    else:
        m = np.abs(w).max(axis=tuple(range(1, w.ndim)))
        sw = np.where(m > 0, m / 127.0, 1.0)
        sw_b = np.expand_dims(sw, tuple(range(1, w.ndim)))
        # |w| <= m per channel, so |w / (m / 127)| <= 127: the clip never binds (not mutated)
        wq = np.clip(np.rint(w / sw_b), -127, 127).astype(np.int8)  # pragma: no mutate
    acc = s_in * sw  # the accumulator scale per output channel
    b = p["bias"].astype(np.float64)  # pragma: no mutate - astype(None) is float64 too
    given = p.get("bias_q")
    if given is not None and np.allclose(given * acc, b, rtol=1e-5, atol=1e-3 * acc.max()):
        bias = given.astype(np.int64)
    else:
        bias = np.rint(b / acc)
    if bias.size and (bias.min() < INT32_MIN or bias.max() > INT32_MAX):
        raise Unplaceable(
            node.name,
            node.op,
            f"bias {b[np.argmax(np.abs(bias))]:.4g} does not fit int32 at "
            f"accumulator scale {acc.min():.3g}",
            "|bias / (s_in * s_w)| < 2**31",
        )
    mult, shift = rescale(node, acc / s_out, "output")
    params: dict[str, np.ndarray] = {
        "weight": wq.astype(np.int8),
        "bias": bias.astype(np.int32),
        "mult": mult,
        "shift": shift,
        "clamp": store_clamp(node.attrs["act"], s_out, g.tensors[node.output].zero_point),
    }
    if len(node.inputs) == 2:
        res_mult, res_shift = rescale(node, scale_of(g, node.inputs[1]) / acc, "residual")
        params |= {"res_mult": res_mult, "res_shift": res_shift}
    node.params = params


def avgpool(g: Graph, node: Node) -> None:
    kh, kw = node.attrs["kernel"]
    ratio = scale_of(g, node.inputs[0]) / (scale_of(g, node.output) * kh * kw)
    mult, shift = rescale(node, np.array([ratio]), "output")
    node.params = {"mult": mult, "shift": shift}


def global_avgpool(g: Graph, node: Node) -> None:
    _, _, h, w = g.tensors[node.inputs[0]].shape
    ratio = scale_of(g, node.inputs[0]) / (scale_of(g, node.output) * h * w)
    mult, shift = rescale(node, np.array([ratio]), "output")
    node.params = {"mult": mult, "shift": shift}


def add(g: Graph, node: Node) -> None:
    """a + b (times the folded scalar ``alpha``): each input rescaled by ``s * alpha`` to the
    accumulator's scale, then to the output's."""
    alpha = float(node.params["alpha"][0]) if "alpha" in node.params else 1.0
    s_out = scale_of(g, node.output)
    s_acc = s_out / 2.0**ADD_EXTRA_BITS
    params: dict[str, np.ndarray] = {}
    for prefix, name in (("a_", node.inputs[0]), ("b_", node.inputs[1])):
        m, s = rescale(node, np.array([scale_of(g, name) * alpha / s_acc]), f"input '{name}'")
        params |= {f"{prefix}mult": m, f"{prefix}shift": s}
    # 2**-ADD_EXTRA_BITS: always in the fixed-point range (so no error to name)
    m, s = quantize_multipliers(np.array([s_acc / s_out]))
    clamp = store_clamp(node.attrs["act"], s_out, g.tensors[node.output].zero_point)
    node.params = params | {"mult": m, "shift": s, "clamp": clamp}


def scale(g: Graph, node: Node) -> None:
    """scale: ``x [* gate]`` requantized from ``s_x [* s_gate]`` to the output scale."""
    ratio = np.prod([scale_of(g, name) for name in node.inputs]) / scale_of(g, node.output)
    mult, shift = rescale(node, np.array([ratio]), "output")
    clamp = store_clamp(
        node.attrs["act"], scale_of(g, node.output), g.tensors[node.output].zero_point
    )
    node.params = {"mult": mult, "shift": shift, "clamp": clamp}


def batch_matmul(g: Graph, node: Node) -> None:
    """a @ b of two activations (times the folded scalar ``alpha``), requantized from
    ``s_a * s_b * alpha`` to the output scale."""
    alpha = float(node.params["alpha"][0]) if "alpha" in node.params else 1.0
    ratio = (
        scale_of(g, node.inputs[0]) * scale_of(g, node.inputs[1]) * alpha / scale_of(g, node.output)
    )
    mult, shift = rescale(node, np.array([ratio]), "output")
    clamp = store_clamp(
        node.attrs["act"], scale_of(g, node.output), g.tensors[node.output].zero_point
    )
    node.params = {"mult": mult, "shift": shift, "clamp": clamp}


def constant(g: Graph, node: Node) -> None:
    """constant: its value as int8 codes at its output's scale and zero point (rounded as the
    host rounds the network input)."""
    out = g.tensors[node.output]
    node.params = {
        "value": quantize_input(node.params["value"], scale_of(g, out.name), out.zero_point)
    }


def no_params(g: Graph, node: Node) -> None:
    node.params = {}


def keep_params(g: Graph, node: Node) -> None:
    """Host nodes keep their ONNX model; their inputs and output are simply scaled."""


def norm(g: Graph, node: Node) -> None:
    """layer_norm / rms_norm: fp32 gamma, beta and epsilon folded with the input and output
    scales into the norm unit's params (:func:`arch.norm_ops.norm_params`)."""
    x, out = node.inputs[0], node.output
    try:
        folded = norm_params(
            node.params["gamma"],
            node.params.get("beta"),
            eps=float(node.attrs["epsilon"]),
            s_in=scale_of(g, x),
            s_out=scale_of(g, out),
            zp_out=int(g.tensors[out].zero_point or 0),
        )  # its op (rms or not) and its input's zero point are the graph's, not params
    except ValueError as exc:
        raise Unplaceable(
            node.name, node.op, str(exc), "gamma / s_out and eps in the norm unit's range"
        ) from None
    node.params = {
        "mult": folded.mult,
        "shift": folded.shift,
        "bias": folded.bias,
        "eps_codes": np.array([folded.eps_codes], np.int64),
    }


def row_softmax(g: Graph, node: Node) -> None:
    """row_softmax: ``k``, the input scale in Q16 powers of two (its output scale is fixed),
    and its ``bias_mask`` as int8 ``mask`` codes (:func:`mask_codes`)."""
    s_in = scale_of(g, node.inputs[0])
    try:
        k = softmax_params(s_in)
    except ValueError as exc:
        raise Unplaceable(node.name, node.op, str(exc)) from None
    bias = node.params.get("bias_mask")
    node.params = {"k": np.array([k], np.int64)}
    if bias is not None:
        node.params["mask"] = mask_codes(node, bias, s_in)


def mask_codes(node: Node, bias: np.ndarray, s_in: float) -> np.ndarray:
    """A softmax's constant additive mask as NORM's int8 mask codes: a value <= -1e4 (or -inf)
    masks its position (-128); any other is rounded to the nearest score code
    (``rint(bias / s_in)``, half to even: at most half a code, the scores' own rounding) and
    must land in -127..127, else the Softmax stays on the host (Unplaceable)."""
    masked = bias <= MASKED_BELOW
    codes = np.rint(np.where(masked, 0.0, bias.astype(np.float64)) / s_in)
    if np.abs(codes).max(initial=0) > 127:
        worst = float(bias[~masked][np.argmax(np.abs(codes[~masked]))])
        raise Unplaceable(
            node.name,
            node.op,
            f"mask value {worst:g} is {worst / s_in:.0f} codes at the scores' scale {s_in:g}",
            "mask values within +-127 codes of the scores, or <= -1e4 / -inf (masked)",
        )
    return np.where(masked, -128, codes).astype(np.int8)

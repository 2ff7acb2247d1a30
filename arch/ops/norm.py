"""The norm unit's row ops: layer_norm and rms_norm over the last axis of tokens, and
row_softmax over the last axis of attention scores.

* layer_norm / rms_norm: per token (a row of ``F`` channels of a (1, T, 1, F) tensor), the
  integer algorithm of :func:`arch.norm_ops.norm_rows` - the one definition the ISA simulator
  (NORM) and the compiler's reference share. Params: ``eps_codes`` (the row scalar) and per
  channel ``mult``, ``shift`` (gamma over the output scale, Q12 in, Q8 out) and ``bias`` (beta
  and the output zero point, Q8); an rms_norm subtracts its input's zero point first.
* row_softmax: per row of a (1, H, M, N) tensor (each head's scores of one query; with
  ``causal``, position j of row i masked when j > i), the
  integer softmax of :func:`arch.norm_ops.softmax_rows_q8` (param ``k``: the input scale in
  Q16 powers of two), then the STORE's rounding of its Q8 probabilities to the FIXED output
  scale 1/128, zero point 0: ``clamp((q8 + 256) >> 9, -128, 127)`` (probability 1.0 saturates
  to 127/128). Not norm_ops' 1/256 with zero point -128: the batch_matmul that reads the
  probabilities takes symmetric inputs only (the DMA cannot subtract a zero point).
  An optional param ``mask`` (int8 (M, N), or (1, N) shared by every query row; the same for
  every head) adds a constant bias in input codes, -128 masking the position (NORM's mask
  lines). A second input (1, 1, M or 1, N) - a mask the host computed at the graph input,
  at the fixed scale :data:`MASK_INPUT_SCALE` (0 or -128) - is such a mask too.
"""

from __future__ import annotations

import numpy as np

from arch import norm_ops
from arch import reference_ops as ro
from arch.ops.check import NodeCheck
from arch.ops.quant import zero_point
from arch.ops.spec import OpSpec, RefGraph, RefNode, Shape

__all__ = [
    "LAYER_NORM",
    "NORM_OPS",
    "RMS_NORM",
    "ROW_SOFTMAX",
    "MASK_INPUT_SCALE",
    "MASK_PARAMS",
    "SOFTMAX_OUT_SCALE",
    "SOFTMAX_STORE_SHIFT",
    "SPECS",
    "norm_params_of",
]

#: The int8 params of a norm node.
_PARAMS = {"mult": "int64", "shift": "int64", "bias": "int64", "eps_codes": "int64"}
#: ``shift`` of a norm's per-channel requant: Q12 x_hat to Q8 (norm_ops step 4).
SHIFT_RANGE = (8, 62)
#: row_softmax's output: probability p is the int8 code round(128 p) (zero point 0), which the
#: STORE makes of NORM's Q8 probabilities in 1/256 (``q8 = 256 * 256 p``) by a shift of 9.
SOFTMAX_OUT_SCALE = 1.0 / 128.0
SOFTMAX_STORE_SHIFT = 9
#: row_softmax's optional param: its constant mask codes (NORM's mask lines).
MASK_PARAMS = {"mask": "int8"}
MASKED_CODE = -128  # a mask code that masks its position
#: The scale of a row_softmax's mask input (a 0 / masked additive mask computed on the host):
#: 0 is code 0, and every value <= -1e4 (MASKED_BELOW) is code -128, masked.
MASK_INPUT_SCALE = -norm_ops.MASKED_BELOW / 128


def norm_params_of(graph: RefGraph, node: RefNode) -> norm_ops.NormParams:
    """The :class:`~arch.norm_ops.NormParams` of a quantized layer_norm / rms_norm node."""
    p = node.params
    return norm_ops.NormParams(
        node.op == "rms_norm",
        int(p["eps_codes"][0]),
        p["mult"],
        p["shift"],
        p["bias"],
        zero_point(graph, node.inputs[0]),
    )


def _norm(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    x = xs[0]
    rows = x.reshape(-1, x.shape[-1])
    return norm_ops.norm_rows(rows, norm_params_of(graph, node)).reshape(x.shape)


def _rows(c: NodeCheck, xs: list[Shape]) -> Shape:
    """Tokens (1, T, 1, F) in, the same out; ``epsilon`` a float >= 0."""
    x = c.shape(c.node.inputs[0], 4, "input")
    if x[2] != 1 or not 1 <= x[3] <= norm_ops.MAX_ROW:
        c.fail(f"input must be tokens (1, T, 1, F) with F <= {norm_ops.MAX_ROW}, not {x}")
    eps = c.node.attrs["epsilon"]
    if not isinstance(eps, float) or not eps >= 0:
        c.fail(f"attr 'epsilon' must be a float >= 0, not {eps!r}")
    return x


def _quantized(c: NodeCheck, xs: list[Shape]) -> None:
    """Per-channel ``mult``/``shift``/``bias``, one ``eps_codes`` in 1..2**31-1."""
    channels = xs[0][-1]
    c.param_shapes({"mult": (channels,), "shift": (channels,), "bias": (channels,)})
    c.param_shapes({"eps_codes": (1,)})
    c.rescale("mult", "shift")
    p = c.node.params
    lo, hi = SHIFT_RANGE
    if int(p["shift"].min()) < lo or int(p["shift"].max()) > hi:
        c.fail(f"param 'shift' must be in {lo}..{hi} (Q12 in, Q8 out)")
    if not 1 <= int(p["eps_codes"][0]) < 2**31:
        c.fail(f"param 'eps_codes' must be in 1..2**31-1, not {int(p['eps_codes'][0])}")
    if int(np.abs(p["bias"]).max()) > 2**24:
        c.fail("param 'bias' must be within +-2**24 (Q8 output codes)")


def _spec(name: str) -> OpSpec:
    return OpSpec(
        name=name,
        attrs=frozenset({"epsilon"}),
        params=_PARAMS,
        arity=(1, 1),
        keeps_scale=False,
        output_shape=_rows,
        evaluate=_norm,
        check_quantized=_quantized,
    )


def _softmax(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    x = xs[0]
    masked = np.zeros(x.shape, bool)
    mask = None
    if node.attrs.get("causal"):  # position j of query row i is masked when j > i
        masked = masked | np.triu(np.ones(x.shape[-2:], bool), 1)
    if "mask" in node.params or len(xs) == 2:  # mask codes, -128 masking the position
        source = node.params["mask"] if "mask" in node.params else xs[1][0, 0]
        codes = source.astype(np.int64)
        masked = masked | (codes == MASKED_CODE)
        mask = np.broadcast_to(np.where(codes == MASKED_CODE, 0, codes), x.shape)
        mask = mask.reshape(-1, x.shape[-1])
    rows = x.reshape(-1, x.shape[-1])
    q8 = norm_ops.softmax_rows_q8(
        rows, int(node.params["k"][0]), mask, masked.reshape(-1, x.shape[-1])
    )
    out = ro.to_int8(ro.clamp(ro.requantize(q8, 1, SOFTMAX_STORE_SHIFT), -128, 127))
    return out.reshape(x.shape)


def _scores(c: NodeCheck, xs: list[Shape]) -> Shape:
    """Attention scores (1, H, M, N) in, probabilities of the same shape out (over N);
    ``causal`` a bool (then M == N)."""
    x = c.shape(c.node.inputs[0], 4, "input")
    if not x[3] <= norm_ops.MAX_ROW:
        c.fail(f"rows of {x[3]} values: at most {norm_ops.MAX_ROW}")
    if len(xs) == 2 and (
        len(xs[1]) != 4 or xs[1][:2] != (1, 1) or xs[1][2] not in (1, x[2]) or xs[1][3] != x[3]
    ):
        c.fail(f"mask input must be (1, 1, M or 1, N) of the scores {x}, not {xs[1]}")
    causal = c.node.attrs["causal"]
    if not isinstance(causal, bool) or (causal and x[2] != x[3]):
        c.fail(f"attr 'causal' must be a bool (True: square scores), not {causal!r} on {x}")
    return x


def _softmax_quantized(c: NodeCheck, xs: list[Shape]) -> None:
    """``k`` in 1..2**24-1; ``mask`` (M or 1, N); a mask input at :data:`MASK_INPUT_SCALE`;
    the output at the fixed scale 1/128, zero point 0."""
    c.param_shapes({"k": (1,)})
    mask, (_, _, m, n) = c.node.params.get("mask"), xs[0]
    if mask is not None and mask.shape not in {(1, n), (m, n)}:
        c.fail(f"param 'mask' must be (M or 1, N) of the scores {xs[0]}, not {mask.shape}")
    k = int(c.node.params["k"][0])
    if not 1 <= k < 2**24:
        c.fail(f"param 'k' must be in 1..2**24-1, not {k}")
    if len(c.node.inputs) == 2:
        source = c.node.inputs[1]
        if c.graph.tensors[source].scale != MASK_INPUT_SCALE or zero_point(c.graph, source):
            c.fail(f"the mask input must have scale {MASK_INPUT_SCALE} and zero point 0")
    scale, zp = c.graph.tensors[c.node.output].scale, zero_point(c.graph, c.node.output)
    if scale != SOFTMAX_OUT_SCALE or zp:
        c.fail(f"the output must have scale 1/128 and zero point 0, not {scale}, {zp}")


LAYER_NORM = _spec("layer_norm")
RMS_NORM = _spec("rms_norm")
ROW_SOFTMAX = OpSpec(
    name="row_softmax",
    attrs=frozenset({"causal"}),
    params={"k": "int64"},
    arity=(1, 2),
    keeps_scale=False,
    output_shape=_scores,
    evaluate=_softmax,
    check_quantized=_softmax_quantized,
)
SPECS = (LAYER_NORM, RMS_NORM, ROW_SOFTMAX)
#: The ops the norm unit runs (configs with ``norm_unit``).
NORM_OPS = frozenset(spec.name for spec in SPECS)

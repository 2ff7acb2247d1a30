"""The front end's graph IR: the contract between import/quantize and the back end.

A :class:`Graph` is a list of :class:`Node` in topological order over named :class:`Tensor`. Two
stages share it. *fp32* (``quantized=False``, after import and canonicalize): float32 params.
*Quantized* (``quantized=True``, after quantize): int8 weights, int32 biases, fixed-point
``mult``/``shift`` rescales and int8 ``clamp`` bounds, every tensor with a scale
(``real = scale * (q - zero_point)``), computed as :mod:`arch.reference` defines.

Ops (:data:`OPS`: each defined once in :mod:`arch.ops`, with the compiler's side in
:mod:`compiler.op_rules`) and their attrs; ``act`` is None, ``"relu"``, ``"relu6"`` or ``"table"``:

==============  ===========================================  =====================================
op              attrs                                        params (quantized stage)
==============  ===========================================  =====================================
conv            kernel, stride, pads, dilation, group, act   weight i8, bias i32, mult, shift,
                                                             clamp [+ res_mult, res_shift]
gemm            act                                          as conv, weight (N, K)
maxpool         kernel, stride, pads                         none (output scale = input scale)
avgpool         kernel, stride, pads, count_include_pad      mult, shift (1,)
global_avgpool  -                                            mult, shift (1,)
add             act                                          a_mult, a_shift, b_mult, b_shift,
                                                             mult, shift (1,), clamp
scale           act; inputs x [, gate (1, C, 1, 1)]              mult, shift (1,), clamp
flatten         -                                            none (output scale = input scale)
softmax         -                                            none (host, fp32 output)
concat          - (along channels)                           none (every input at the output scale)
channel_slice   start, channels (a view of the input's lines)   none (output scale = input scale)
upsample        scale (nearest, integer (sh, sw))            none (output scale = input scale)
depth_to_space  block (sh, sw): channel groups to pixels     none (output scale = input scale)
batch_matmul    act; a (1, H, M, K) @ b (1, H, K, N)          mult, shift (1,), clamp (fp32:
                [groups G: row block g @ block g of b's       optional alpha (1,), a scalar Mul)
                columns (K, G x N) or rows (G x K, N)]
split_heads     heads: tokens (1, T, 1, F) -> (1, H, T, F/H)  none (output scale = input scale)
split_heads_t   heads: tokens (1, T, 1, F) -> (1, H, F/H, T)  none (output scale = input scale)
merge_heads     - : (1, H, T, d) -> tokens (1, T, 1, H*d)     none (output scale = input scale)
map_to_tokens   - : (1, C, H, W) -> tokens (1, H*W, 1, C)     none (output scale = input scale)
tokens_to_map   size (H, W): tokens (1, H*W, 1, C) -> (1, C, H, W)  none (output = input scale)
select_token    index: tokens (1, T, 1, C) -> (1, C)         none (output scale = input scale)
layer_norm      epsilon; rows of tokens (1, T, 1, F)         mult, shift, bias (F,), eps_codes (1,)
                                                             (fp32: gamma, optional beta (F,))
rms_norm        epsilon; as layer_norm, no mean              as layer_norm
row_softmax     causal; rows of (1, H, M, N) scores, over N     k (1,); output scale 1/128, zp 0
constant        - (no input: codes in the DRAM image)       value (int8, the output's shape; fp32:
                                                             float32)
host            onnx_ops, feeds, fetch, macs                 model (uint8: a serialized ONNX model)
==============  ===========================================  =====================================

``host`` is what the accelerator does not run (partitioning,
:mod:`compiler.onnx.host_regions`): a run of ONNX nodes kept as their own ONNX model, executed in
fp32 by onnxruntime on the dequantized inputs (fed as ``feeds``, one per input) with output
``fetch`` quantized back; ``onnx_ops`` names its ONNX ops and ``macs`` counts the
multiply-accumulates it does on the host. Its output shape is ONNX shape inference's.

Between import and canonicalize the fp32 graph may also hold the ONNX-level :data:`IMPORT_OPS`
(``batchnorm``, ``relu``, ...), which canonicalize folds away - except ``table`` (attrs
``function``, ``args``: an elementwise activation of :mod:`compiler.activations`), which lives
until quantize turns it into the int8 table of the conv, gemm, add or scale before it (``act``
= ``"table"``, param ``table``: int8 (256,)), or, where none can take it, into a one-input
``scale`` of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from arch.ops import OP_SPECS
from arch.ops.check import NodeCheck
from arch.ops.spec import ACTS, RefNode, attrs_error
from arch.reference import check_node

from .errors import VerifyError
from .ir_checks import is_depthwise, is_tokens
from .op_rules import ARITY, ATTRS, IMPORT_OPS, OPS, OPTIONAL_ATTRS, RULES

if TYPE_CHECKING:
    import onnx

__all__ = [
    "ACTS",
    "IMPORT_OPS",
    "OPS",
    "Graph",
    "Node",
    "Tensor",
    "is_depthwise",
    "is_tokens",
]

Shape = tuple[int, ...]


@dataclass
class Tensor:
    """A named activation: NCHW with N=1 such as ``(1, 64, 56, 56)``, or a vector ``(1, F)``
    (other shapes only where host nodes alone read and write them)."""

    name: str
    shape: tuple[int, ...]
    scale: float | None = None  #: int8 scale (real = scale * (q - zero_point)); None while fp32
    #: int8 zero point (0: symmetric). An imported uint8 tensor with zero point z is the int8
    #: tensor ``u - 128`` with zero point ``z - 128``.
    zero_point: int = 0


@dataclass
class Node:
    """One op; see the module docstring for ``attrs`` and ``params`` per op and stage."""

    name: str  #: the ONNX node name (reports use it), unique
    op: str  #: one of OPS (or IMPORT_OPS before canonicalize)
    inputs: list[str]  #: tensor names; conv/gemm may have a 2nd input, the fused residual
    output: str
    attrs: dict[str, Any] = field(default_factory=dict)
    params: dict[str, np.ndarray] = field(default_factory=dict)
    onnx_nodes: list[str] = field(default_factory=list)  #: ONNX nodes folded into this one


@dataclass
class Graph:
    """Nodes in topological order over named tensors; see :meth:`verify` for the invariants."""

    nodes: list[Node]
    tensors: dict[str, Tensor]
    inputs: list[str]  #: graph input tensor names (fp32 from the user)
    outputs: list[str]
    quantized: bool = False
    #: The ONNX model the graph was imported from (batch fixed, shapes inferred); calibration
    #: runs it. Not part of the comparison or the repr.
    source: onnx.ModelProto | None = field(default=None, repr=False, compare=False)
    #: IR node name -> index of the ONNX node it came from (the importer's; for partitioning).
    origins: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    #: host node name -> why its ONNX nodes are not on the accelerator.
    host_reasons: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    # -- queries ---------------------------------------------------------------------------

    def producer(self, name: str) -> Node | None:
        """The node whose output is tensor ``name``; None for a graph input or unknown name."""
        for node in self.nodes:
            if node.output == name:
                return node
        return None

    def consumers(self, name: str) -> list[Node]:
        """The nodes reading tensor ``name``, in graph order (a node reading it twice once)."""
        return [node for node in self.nodes if name in node.inputs]

    def node(self, name: str) -> Node:
        """The node called ``name``; KeyError if there is none."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def copy(self) -> Graph:
        """A copy whose nodes, tensors and lists can be changed freely; param arrays are shared
        (passes replace arrays, never write into them)."""
        nodes = [
            replace(
                n,
                inputs=list(n.inputs),
                attrs=dict(n.attrs),
                params=dict(n.params),
                onnx_nodes=list(n.onnx_nodes),
            )
            for n in self.nodes
        ]
        tensors = {k: replace(t) for k, t in self.tensors.items()}
        return Graph(
            nodes,
            tensors,
            list(self.inputs),
            list(self.outputs),
            self.quantized,
            self.source,
            dict(self.origins),
            dict(self.host_reasons),
        )

    def summary(self) -> str:
        """One line per node: op, name, inputs -> output, output shape (and scale), attrs."""
        lines = []
        for n in self.nodes:
            t = self.tensors.get(n.output)
            shape = "x".join(map(str, t.shape)) if t else "?"
            scale = f" s={t.scale:.4g}" if t is not None and t.scale is not None else ""
            scale += f" z={t.zero_point}" if t is not None and t.zero_point else ""
            attrs = " ".join(f"{k}={_fmt(v)}" for k, v in n.attrs.items() if v is not None)
            lines.append(
                f"{n.op:<14} {n.name:<24} {', '.join(n.inputs)} -> {n.output} "
                f"[{shape}]{scale} {attrs}".rstrip()
            )
        return "\n".join(lines)

    # -- invariants ------------------------------------------------------------------------

    def verify(self) -> None:
        """Check every invariant of the stage; raise :class:`VerifyError` naming the node.

        Unique node names and tensor producers; each input produced before use or a graph
        input; known ops with exactly their attrs; output shapes recomputed by the op's shape
        rule (its :class:`~arch.ops.spec.OpSpec`'s); fp32 graphs: float params with their
        shapes, no others; quantized graphs: canonical ops only, each node exactly as the
        integer reference can run it (:func:`arch.reference.check_node`: int8 params, scales,
        clamps within int8, shifts 0..62, mults in int32 range).
        """
        if not self.inputs:
            raise VerifyError(None, "graph", "has no inputs")
        if not self.nodes:
            raise VerifyError(None, "graph", "has no nodes")
        for key, t in self.tensors.items():
            _check_tensor(key, t)
        available: set[str] = set()
        for name in self.inputs:
            if name not in self.tensors:
                raise VerifyError(None, "graph", f"input '{name}' has no tensor entry")
            if name in available:
                raise VerifyError(None, "graph", f"input '{name}' is listed twice")
            available.add(name)
        names: set[str] = set()
        softmax_outputs: set[str] = set()
        for node in self.nodes:
            if node.name in names:
                raise VerifyError(node.name, node.op, "node name is not unique")
            names.add(node.name)
            for name in node.inputs:
                if name in softmax_outputs:
                    raise VerifyError(
                        node.name, node.op, f"reads '{name}', the fp32 output of a host softmax"
                    )
                if name not in available:
                    raise VerifyError(
                        node.name,
                        node.op,
                        f"input '{name}' is neither a graph input nor produced by an earlier node",
                    )
            if node.output in available:
                raise VerifyError(node.name, node.op, f"output '{node.output}' is produced twice")
            if node.output not in self.tensors:
                raise VerifyError(node.name, node.op, f"output '{node.output}' has no tensor entry")
            _check_node(self, node)
            available.add(node.output)
            if node.op == "softmax":
                softmax_outputs.add(node.output)
        if not self.outputs:
            raise VerifyError(None, "graph", "has no outputs")
        for name in self.outputs:
            if name not in available:
                raise VerifyError(None, "graph", f"output '{name}' is never produced")
        stale = sorted(set(self.tensors) - available)
        if stale:
            raise VerifyError(None, "graph", f"tensors {stale} are neither inputs nor produced")
        if self.quantized:
            for name in self.inputs:
                if self.tensors[name].scale is None:
                    raise VerifyError(None, "graph", f"input '{name}' has no scale")


def _fmt(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def _check_tensor(key: str, t: Tensor) -> None:
    if not isinstance(t, Tensor) or t.name != key:
        raise VerifyError(None, "graph", f"tensor entry '{key}' is not a Tensor named '{key}'")
    if (
        not isinstance(t.shape, tuple)
        or not t.shape
        or not all(isinstance(d, int) and d >= 1 for d in t.shape)
    ):
        raise VerifyError(None, "graph", f"tensor '{key}' has a bad shape {t.shape!r}")
    if t.scale is not None and not (
        isinstance(t.scale, float | int) and math.isfinite(t.scale) and t.scale > 0
    ):
        raise VerifyError(None, "graph", f"tensor '{key}' has a bad scale {t.scale!r}")
    zp = t.zero_point
    if not isinstance(zp, int) or isinstance(zp, bool) or not -128 <= zp <= 127:
        raise VerifyError(None, "graph", f"tensor '{key}' has a bad zero point {zp!r}")


def _verify_error(node: RefNode, message: str) -> VerifyError:
    return VerifyError(node.name, node.op, message)


def _check_node(g: Graph, node: Node) -> None:
    """A quantized node is checked by the integer reference's own definition; an fp32 node by
    its OpSpec's shape rule and its float params (an import-only op: its rule's check)."""
    op = node.op
    allowed = OPS if g.quantized else OPS + IMPORT_OPS
    if op not in allowed:
        stage = "quantized" if g.quantized else "fp32"
        raise VerifyError(node.name, op, f"unknown op in a {stage} graph", ", ".join(allowed))
    c = NodeCheck(g, node, _verify_error)
    if g.quantized:
        check_node(g, node, c)
        return
    wrong = attrs_error(node.attrs, ATTRS[op], OPTIONAL_ATTRS.get(op, frozenset()))
    if wrong:
        c.fail(wrong)
    lo, hi = ARITY[op]
    if not lo <= len(node.inputs) <= hi:
        c.fail(f"has {len(node.inputs)} inputs, expected {lo}..{hi}")
    if "act" in node.attrs and node.attrs["act"] not in ACTS:
        c.fail(f"act {node.attrs['act']!r} is not one of {ACTS}")
    xs = [g.tensors[name].shape for name in node.inputs]
    rule = RULES[op]
    if rule.check is not None:  # an import-only op
        out = rule.check(c, xs)
    else:
        out = OP_SPECS[op].output_shape(c, xs)
        assert rule.fp32_params is not None  # op_rules checks every canonical op has one
        rule.fp32_params(c, xs)
    if g.tensors[node.output].shape != out:
        c.fail(f"output '{node.output}' has shape {g.tensors[node.output].shape}, expected {out}")

"""The front end's graph IR: the contract between import/quantize and the back end.

A :class:`Graph` is a list of :class:`Node` in topological order over named :class:`Tensor`. Two
stages share it. *fp32* (``quantized=False``, after import and canonicalize): float32 params.
*Quantized* (``quantized=True``, after quantize): int8 weights, int32 biases, fixed-point
``mult``/``shift`` rescales and int8 ``clamp`` bounds, every tensor with a scale
(``real = scale * (q - zero_point)``), computed as :mod:`arch.reference` defines.

Ops (:data:`OPS`) and their attrs; ``act`` is None, ``"relu"``, ``"relu6"`` or ``"table"``:

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
                                                             optional alpha (1,), a scalar Mul)
split_heads     heads: tokens (1, T, 1, F) -> (1, H, T, F/H)  none (output scale = input scale)
split_heads_t   heads: tokens (1, T, 1, F) -> (1, H, F/H, T)  none (output scale = input scale)
merge_heads     - : (1, H, T, d) -> tokens (1, T, 1, H*d)     none (output scale = input scale)
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
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from arch.isa import INT32_MAX, INT32_MIN, MAX_SHIFT, TABLE_ENTRIES
from arch.reference import ACTS, ARITY_OF_OP, ATTRS_OF_OP

from .activations import FUNCTIONS
from .errors import VerifyError

if TYPE_CHECKING:
    import onnx

__all__ = [
    "ACTS",
    "FUSED_BY_QUANTIZE",
    "IMPORT_OPS",
    "OPS",
    "Graph",
    "Node",
    "Tensor",
    "conv_output_shape",
    "pool_output_shape",
]

#: The ops of a canonical graph (what the back end sees).
OPS: tuple[str, ...] = (
    "conv",
    "gemm",
    "maxpool",
    "avgpool",
    "global_avgpool",
    "add",
    "scale",
    "flatten",
    "softmax",
    "host",
    "concat",
    "channel_slice",
    "upsample",
    "depth_to_space",
    "batch_matmul",
    "split_heads",
    "split_heads_t",
    "merge_heads",
)
#: Views between tokens (1, T, 1, F) and attention heads (1, H, T, F/H), or transposed heads
#: (1, H, F/H, T): the k^T of ``q @ k^T``, which its producer stores transposed.
HEAD_VIEWS: tuple[str, ...] = ("split_heads", "split_heads_t", "merge_heads")
#: ONNX-level ops that only live between import and canonicalize (fp32 stage).
IMPORT_OPS: tuple[str, ...] = (
    "batchnorm",
    "relu",
    "relu6",
    "matmul",
    "bias_add",
    "sum",
    "identity",
    "reshape",
    "table",
)
#: Import ops that canonicalize keeps and quantize fuses into their producer.
FUSED_BY_QUANTIZE: tuple[str, ...] = ("table",)
# The canonical ops' attrs, arity and ``act`` values are the integer reference's (one table,
# arch.reference); the import-only ops add theirs.
_ATTRS: dict[str, frozenset[str]] = {
    **ATTRS_OF_OP,
    "batchnorm": frozenset({"epsilon"}),
    "relu": frozenset(),
    "relu6": frozenset(),
    "matmul": frozenset(),
    "bias_add": frozenset(),
    "sum": frozenset(),
    "identity": frozenset(),
    "reshape": frozenset({"shape"}),
    "table": frozenset({"function", "args"}),
}
_ARITY: dict[str, tuple[int, int]] = {**ARITY_OF_OP, "sum": (2, 2)}


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
        input; known ops with exactly their attrs; output shapes recomputed from input shapes,
        attrs and weights; params present with the stage's dtype and shape, no others;
        quantized graphs: canonical ops only, every tensor scaled (> 0, softmax outputs None),
        clamps within int8, shifts 0..62, mults in int32 range.
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


# --------------------------------------------------------------------------- verify helpers


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


def _expect_shape(g: Graph, node: Node, name: str, expected: Shape, what: str) -> None:
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


def is_depthwise(weight: np.ndarray, group: int) -> bool:
    """A conv whose every output channel reads its own input channel only (DWCONV's)."""
    return group > 1 and group == weight.shape[0] and weight.shape[1] == 1


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


def _check_node(g: Graph, node: Node) -> None:
    op = node.op
    allowed = OPS if g.quantized else OPS + IMPORT_OPS
    if op not in allowed:
        stage = "quantized" if g.quantized else "fp32"
        raise VerifyError(node.name, op, f"unknown op in a {stage} graph", ", ".join(allowed))
    if set(node.attrs) != _ATTRS[op]:
        raise VerifyError(
            node.name, op, f"attrs {sorted(node.attrs)} must be exactly {sorted(_ATTRS[op])}"
        )
    lo, hi = _ARITY.get(op, (1, 1))
    if not lo <= len(node.inputs) <= hi:
        raise VerifyError(node.name, op, f"has {len(node.inputs)} inputs, expected {lo}..{hi}")
    if "act" in node.attrs and node.attrs["act"] not in ACTS:
        raise VerifyError(node.name, op, f"act {node.attrs['act']!r} is not one of {ACTS}")
    x = g.tensors[node.inputs[0]].shape
    out = _CHECKS[op](g, node, x)
    _expect_shape(g, node, node.output, out, "output")
    if g.quantized:
        t = g.tensors[node.output]
        if op == "softmax":
            if t.scale is not None:
                raise VerifyError(node.name, op, "softmax output is fp32; its scale must be None")
        elif t.scale is None:
            raise VerifyError(node.name, op, f"output '{node.output}' has no scale")
        for name in node.inputs:
            if g.tensors[name].scale is None:
                raise VerifyError(node.name, op, f"input '{name}' has no scale")
        if op in (
            "maxpool",
            "flatten",
            "concat",
            "upsample",
            "depth_to_space",
            *HEAD_VIEWS,
        ) and any(
            (g.tensors[name].scale, g.tensors[name].zero_point) != (t.scale, t.zero_point)
            for name in node.inputs
        ):
            raise VerifyError(
                node.name, op, "output scale must equal the input scales (zero points too)"
            )


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


def _conv(g: Graph, node: Node, x: Shape) -> Shape:
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
        _expect_shape(g, node, node.inputs[1], out, "residual")
    _weighted_params(g, node, wshape, o)
    return out


def is_tokens(shape: Shape) -> bool:
    """Whether a gemm input of this shape is tokens (1, T, 1, F): a transformer's (1, T, F),
    held like a Conv1d's (1, C, L), that a gemm multiplies over its last axis per token."""
    return len(shape) == 4 and shape[0] == 1 and shape[2] == 1


def _gemm(g: Graph, node: Node, x: Shape) -> Shape:
    if not is_tokens(x):
        _need_2d(node, x)
    wshape = _weight(node, 2)
    if wshape[1] != x[-1]:
        raise VerifyError(node.name, node.op, f"weight {wshape} (N, K) does not fit input {x}")
    out = (*x[:-1], wshape[0])
    if len(node.inputs) == 2:
        _expect_shape(g, node, node.inputs[1], out, "residual")
    _weighted_params(g, node, wshape, wshape[0])
    return out


def _pool(g: Graph, node: Node, x: Shape) -> Shape:
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


def _global_avgpool(g: Graph, node: Node, x: Shape) -> Shape:
    _need_4d(node, x)
    _check_params(
        node, {"mult": (np.int64, (1,)), "shift": (np.int64, (1,))} if g.quantized else {}
    )
    if g.quantized:
        _check_rescale(node, "mult", "shift")
    return (1, x[1], 1, 1)


def _add(g: Graph, node: Node, x: Shape) -> Shape:
    _expect_shape(g, node, node.inputs[1], x, "second input")
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


def _scale(g: Graph, node: Node, x: Shape) -> Shape:
    """x [* gate]: a channel-wise product, or (one input) a rescale of its own."""
    _need_4d(node, x)
    if len(node.inputs) == 2:
        _expect_shape(g, node, node.inputs[1], (1, x[1], 1, 1), "gate")
    if g.quantized:
        _check_rescaled(node)
    else:
        _check_params(node, {})
    return x


def _batch_matmul(g: Graph, node: Node, x: Shape) -> Shape:
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


def _split_heads(g: Graph, node: Node, x: Shape) -> Shape:
    heads = node.attrs["heads"]
    if not is_tokens(x) or not isinstance(heads, int) or heads < 1 or x[3] % heads:
        raise VerifyError(node.name, node.op, f"input {x} is not tokens of {heads!r} heads")
    _check_params(node, {})
    if node.op == "split_heads_t":
        return (1, heads, x[3] // heads, x[1])
    return (1, heads, x[1], x[3] // heads)


def _merge_heads(g: Graph, node: Node, x: Shape) -> Shape:
    _need_4d(node, x)
    _check_params(node, {})
    return (1, x[2], 1, x[1] * x[3])


def _flatten(g: Graph, node: Node, x: Shape) -> Shape:
    _need_4d(node, x)
    _check_params(node, {})
    out = (1, x[1] * x[2] * x[3])
    if node.op == "reshape" and node.attrs["shape"] != out:
        raise VerifyError(node.name, node.op, f"attr shape {node.attrs['shape']} != {out}")
    return out


def _softmax(g: Graph, node: Node, x: Shape) -> Shape:
    _need_2d(node, x)
    _check_params(node, {})
    return x


def _host(g: Graph, node: Node, x: Shape) -> Shape:
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


def _concat(g: Graph, node: Node, x: Shape) -> Shape:
    shapes = [g.tensors[name].shape for name in node.inputs]
    for shape in shapes:
        _need_4d(node, shape)
        if shape[2:] != x[2:]:
            raise VerifyError(node.name, node.op, f"inputs {shapes} differ in height or width")
    _check_params(node, {})
    return (1, sum(s[1] for s in shapes), x[2], x[3])


def _channel_slice(g: Graph, node: Node, x: Shape) -> Shape:
    _need_4d(node, x)
    start, channels = node.attrs["start"], node.attrs["channels"]
    if not (isinstance(start, int) and isinstance(channels, int)) or not (
        0 <= start < start + channels <= x[1]
    ):
        raise VerifyError(node.name, node.op, f"channels {start}+{channels} do not fit {x}")
    _check_params(node, {})
    return (1, channels, x[2], x[3])


def _upsample(g: Graph, node: Node, x: Shape) -> Shape:
    _need_4d(node, x)
    sh, sw = _ints(node, "scale", 2, 1)
    _check_params(node, {})
    return (1, x[1], x[2] * sh, x[3] * sw)


def _depth_to_space(g: Graph, node: Node, x: Shape) -> Shape:
    _need_4d(node, x)
    sh, sw = _ints(node, "block", 2, 1)
    if x[1] % (sh * sw):
        raise VerifyError(
            node.name, node.op, f"input channels {x[1]} are not a multiple of {sh}x{sw}"
        )
    _check_params(node, {})
    return (1, x[1] // (sh * sw), x[2] * sh, x[3] * sw)


def _elementwise(g: Graph, node: Node, x: Shape) -> Shape:
    _check_params(node, {})
    return x


def _table(g: Graph, node: Node, x: Shape) -> Shape:
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


def _per_channel(g: Graph, node: Node, x: Shape) -> Shape:
    producer = g.producer(node.inputs[0])
    last = is_tokens(x) and producer is not None and producer.op in ("matmul", "gemm")
    c = (np.float32, (x[-1] if last else x[1],))  # a token gemm's channels are last
    if node.op == "batchnorm":
        eps = node.attrs["epsilon"]
        if not isinstance(eps, float) or not eps >= 0:
            raise VerifyError(node.name, node.op, f"epsilon must be a float >= 0, got {eps!r}")
        _check_params(node, {"gamma": c, "beta": c, "mean": c, "var": c})
    else:
        _check_params(node, {"bias": c})
    return x


def _matmul(g: Graph, node: Node, x: Shape) -> Shape:
    return _gemm(g, node, x)


_CHECKS = {
    "conv": _conv,
    "gemm": _gemm,
    "maxpool": _pool,
    "avgpool": _pool,
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
    "split_heads_t": _split_heads,
    "merge_heads": _merge_heads,
    "batchnorm": _per_channel,
    "relu": _elementwise,
    "relu6": _elementwise,
    "matmul": _matmul,
    "bias_add": _per_channel,
    "sum": _add,
    "identity": _elementwise,
    "reshape": _flatten,
    "table": _table,
}

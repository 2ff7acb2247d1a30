"""ONNX -> fp32-stage IR: one handler per ONNX op, shapes fixed to batch 1 and checked.

Partitioning starts here: a node without a handler, or one its handler refuses, goes to the host
(the reason is kept in ``Graph.host_reasons``); consecutive host nodes become one ``host`` IR
node per value read outside them, holding their ONNX model (:mod:`compiler.host_regions`).
Nodes whose inputs are all constants, and ``Shape`` of an activation, are folded at compile time.
Only what onnxruntime cannot run either is refused - every such node named in one error.

The imported graph keeps ONNX-level ops that canonicalize folds (``batchnorm``, ``relu``,
``relu6``, ``matmul``, ``bias_add``, ``sum``, ``identity``, ``reshape``; see
:data:`compiler.ir.IMPORT_OPS`). Every IR tensor is named after the ONNX tensor that holds its
real (fp32) value in the original model, so calibration can read it from onnxruntime.

Already-quantized models: QuantizeLinear/DequantizeLinear on activations are not nodes but
record ``Tensor.scale`` and ``Tensor.zero_point`` (an int8 zero point as it is; uint8 codes u are
the int8 codes u - 128, so a uint8 zero point z is z - 128); a DequantizeLinear of an int8/int32
initializer gives the float value plus ``weight_q``/``weight_scale`` (``bias_q``) params (a
weight with a zero point as the int8 ``q - z`` when that fits); QLinearConv/QLinearMatMul become
conv/matmul with those params and a scaled output; ConvInteger/MatMulInteger must be followed by
``Cast(to=FLOAT)`` and ``Mul`` by the (input x weight) scale, which sets the weight scale.
onnxruntime's ``com.microsoft`` QLinear ops are rewritten to QDQ first (:mod:`compiler.qoperator`).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from arch.host_runtime import HostModelError

from . import host_regions, qoperator
from .attention_import import AttentionImport
from .errors import CompileError
from .finite import check_finite_constants
from .gelu_pattern import FUSED_OPS, MS_DOMAIN, fuse_gelu
from .ir import Graph, Node, Tensor, conv_output_shape
from .shape_inference import infer_shapes
from .token_canon import canonicalize_tokens

__all__ = ["MAX_OPSET", "MIN_OPSET", "SUPPORTED_OPS", "load_onnx"]

#: The ONNX ops the front end accepts (default domain).
SUPPORTED_OPS: tuple[str, ...] = (
    "Add",
    "AveragePool",
    "BatchNormalization",
    "Cast",
    "Clip",
    "Concat",
    "Constant",
    "ConstantOfShape",
    "Conv",
    "ConvInteger",
    "ConvTranspose",
    "DequantizeLinear",
    "Div",
    "Dropout",
    "Celu",
    "Elu",
    "Flatten",
    "Gemm",
    "Gelu",
    "GlobalAveragePool",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "LeakyRelu",
    "MatMul",
    "MatMulInteger",
    "MaxPool",
    "Mish",
    "Mul",
    "QLinearConv",
    "QLinearMatMul",
    "QuantizeLinear",
    "ReduceMean",
    "Relu",
    "Reshape",
    "Resize",
    "Selu",
    "Sigmoid",
    "Softmax",
    "Softplus",
    "Softsign",
    "Sum",
    "Tanh",
    "Transpose",
    "Upsample",
)
#: Opsets of the default domain the handlers are written for; older models are converted.
MIN_OPSET, MAX_OPSET = 9, 21

_SUPPORTED = ", ".join(SUPPORTED_OPS)
#: Largest nearest-upsampling factor per axis on the accelerator (one store per output
#: position of an input pixel; the executable format bounds it too).
MAX_UPSAMPLE = 64
#: IR ops that exist only to be folded into the node before them (canonicalize): after a host
#: node there is nothing to fold them into, so they join it on the host.
_FOLDED_INTO_PRODUCER = ("batchnorm", "relu", "relu6", "bias_add", "table")
#: Elementwise ONNX ops that become a lookup table: op -> (function, its attrs with defaults).
_TABLE_OPS: dict[str, tuple[str, tuple[tuple[str, float], ...]]] = {
    "Sigmoid": ("sigmoid", ()),
    "Tanh": ("tanh", ()),
    "HardSigmoid": ("hardsigmoid", (("alpha", 0.2), ("beta", 0.5))),
    "HardSwish": ("hardswish", ()),
    "LeakyRelu": ("leakyrelu", (("alpha", 0.01),)),
    "Elu": ("elu", (("alpha", 1.0),)),
    "Selu": ("selu", (("alpha", 1.67326319217681884765625), ("gamma", 1.05070102214813232421875))),
    "Celu": ("celu", (("alpha", 1.0),)),
    "Softplus": ("softplus", ()),
    "Softsign": ("softsign", ()),
    "Mish": ("mish", ()),
}
#: ``x * f(x)`` patterns that are one table: f's (function, args) -> the product's function.
_PRODUCT_TABLES: dict[tuple[str, tuple[float, ...]], str] = {
    ("sigmoid", ()): "silu",
    ("hardsigmoid", (1.0 / 6.0, 0.5)): "hardswish",
}
_FLOAT_MAX = float(np.finfo(np.float32).max)


class _Retry(Exception):
    """Import again with these ONNX node indices forced to the host."""

    def __init__(self, indices: set[int]) -> None:
        super().__init__(sorted(indices))
        self.indices = indices


def load_onnx(model: str | Path | onnx.ModelProto, host: Mapping[int, str] | None = None) -> Graph:
    """Import an ONNX model (file path or proto, not modified) as an fp32-stage graph; the ONNX
    nodes with indices in ``host`` go to the host whatever their op (for the reason given).

    Raises
    ------
    CompileError
        For a missing or unreadable file, a graph input that is not a static fp32 tensor, or
        nodes that neither the accelerator nor onnxruntime can run (all named at once).
    """
    proto = _read(model)
    check_finite_constants(proto)
    proto, inference_error = _prepare(proto)
    forced = dict(host or {})
    while True:
        try:
            graph = _Importer(proto, forced).run()
            break
        except _Retry as retry:
            for index in retry.indices:
                forced.setdefault(index, "reads a host value of a shape the accelerator lacks")
    if inference_error is not None:  # the handlers found nothing more specific to complain about
        raise inference_error
    graph.verify()
    return graph


# --------------------------------------------------------------------------- model preparation


def _read(model: str | Path | onnx.ModelProto) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
        return proto
    if not isinstance(model, str | Path):
        raise CompileError(
            None, None, f"expected an ONNX file path or onnx.ModelProto, got {type(model).__name__}"
        )
    path = Path(model)
    if not path.is_file():
        raise CompileError(None, None, f"cannot read ONNX model '{path}': no such file")
    try:
        proto = onnx.load(str(path))
    except Exception as exc:  # protobuf DecodeError, external data errors, ...
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CompileError(None, None, f"'{path}' is not an ONNX model ({first})") from None
    if not proto.graph.node:
        raise CompileError(None, None, f"'{path}' is not an ONNX model with a graph (no nodes)")
    return proto


def _opset(proto: onnx.ModelProto) -> int:
    for entry in proto.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    raise CompileError(None, "model", "imports no ai.onnx opset")


def _prepare(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, CompileError | None]:
    """Check ops and opset, fix the batch to 1, infer shapes.

    A strict shape-inference failure is returned rather than raised, so that the op handlers
    (which name the node and say what is supported) get the first word.
    """
    graph = proto.graph
    if not graph.node:
        raise CompileError(None, "graph", "has no nodes")
    # onnxruntime reads IR versions up to what it was built with; the pinned onnx writes newer.
    proto.ir_version = min(proto.ir_version, host_regions.HOST_IR_VERSION)
    opset = _opset(proto)
    if opset < MIN_OPSET:
        try:
            proto = onnx.version_converter.convert_version(proto, 11)
        except Exception:
            raise CompileError(
                None,
                "model",
                f"opset {opset} is not supported and cannot be converted",
                f"opsets {MIN_OPSET}..{MAX_OPSET}",
            ) from None
        graph = proto.graph
    proto = qoperator.rewrite(proto)  # com.microsoft QLinear ops as DQ -> float op -> Q
    graph = proto.graph
    inits = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in inits]
    if len(inputs) != 1:
        raise CompileError(None, "graph", f"has {len(inputs)} inputs", "exactly 1 input")
    _fix_batch(inputs[0], is_input=True)
    for out in graph.output:
        _fix_batch(out, is_input=False)
    proto = canonicalize_tokens(proto)  # torch's attention in the batch-first pattern
    graph = proto.graph
    del graph.value_info[:]
    try:
        inferred = infer_shapes(proto, strict_mode=True)
        return fuse_gelu(inferred), None  # after inference: the fused output keeps its shape
    except Exception as exc:
        first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        error = CompileError(None, "model", f"ONNX shape inference failed: {first}")
    try:
        return fuse_gelu(infer_shapes(proto)), error
    except Exception:
        raise error from None


def _fix_batch(value: onnx.ValueInfoProto, *, is_input: bool) -> None:
    """Set a symbolic batch dimension to 1; reject other dynamic dims and batch != 1."""
    kind = "graph input" if is_input else "graph output"
    ttype = value.type.tensor_type
    if is_input and ttype.elem_type != TensorProto.FLOAT:
        dtype = TensorProto.DataType.Name(ttype.elem_type)
        raise CompileError(value.name, kind, f"dtype {dtype} is not supported", "FLOAT (fp32)")
    if not ttype.HasField("shape"):
        if is_input:
            raise CompileError(value.name, kind, "has no shape", "static shapes, batch 1")
        return
    for axis, dim in enumerate(ttype.shape.dim):
        if dim.HasField("dim_value") and dim.dim_value > 0:
            if axis == 0 and dim.dim_value != 1:
                raise CompileError(
                    value.name, kind, f"batch {dim.dim_value} is not supported", "batch 1"
                )
            continue
        if axis == 0:
            dim.Clear()
            dim.dim_value = 1
        elif is_input:
            what = f"'{dim.dim_param}'" if dim.dim_param else "unknown"
            raise CompileError(
                value.name,
                kind,
                f"dimension {axis} is dynamic ({what}) and cannot be fixed",
                "static shapes; only the batch may be symbolic (it is set to 1)",
            )
        else:
            dim.Clear()  # let shape inference fill it in


# --------------------------------------------------------------------------- the importer


@dataclass
class _QConst:
    """An integer initializer behind a DequantizeLinear: ``real = q * scale`` (along axis)."""

    q: np.ndarray
    scale: np.ndarray  # float32, size 1 or the length of ``axis``
    axis: int | None  # None: per tensor


@dataclass
class _Pending:
    """A ConvInteger/MatMulInteger accumulator waiting for its Cast and scale Mul."""

    node: Node
    x_scale: float
    cast: bool = False


@dataclass
class _HostMark:
    """An ONNX node placed on the host, until the regions are formed."""

    index: int
    name: str
    node: onnx.NodeProto
    reason: str


class _Importer(AttentionImport):
    def __init__(self, proto: onnx.ModelProto, forced: Mapping[int, str]) -> None:
        self.proto = proto
        self.forced = forced
        self.origins: dict[str, int] = {}  # IR node name -> ONNX node index
        self.host_reasons: dict[str, str] = {}
        self.marks: list[_HostMark] = []
        self.blockers: list[str] = []  # nodes onnxruntime cannot run either
        self.opset = _opset(proto)
        self.consts: dict[str, np.ndarray] = {
            t.name: numpy_helper.to_array(t) for t in proto.graph.initializer
        }
        self.qconst: dict[str, _QConst] = {}
        self.alias: dict[str, str] = {}  # ONNX value -> IR tensor holding its real value
        self.qview: set[str] = set()  # ONNX values that hold int8 codes of an IR tensor
        self.qdtype: dict[str, str] = {}  # qview values holding uint8 codes: "uint8"
        self.pending: dict[str, _Pending] = {}
        self.pending_views: dict[str, tuple[str, int]] = {}
        self.nodes: list[Node] = []
        self.tensors: dict[str, Tensor] = {}
        self.inferred: dict[str, tuple[int, ...]] = {}
        self.elem_types: dict[str, int] = {}
        for vi in [*proto.graph.value_info, *proto.graph.output, *proto.graph.input]:
            dims = vi.type.tensor_type.shape.dim
            self.elem_types[vi.name] = vi.type.tensor_type.elem_type
            if vi.type.tensor_type.HasField("shape") and all(d.dim_value > 0 for d in dims):
                self.inferred[vi.name] = tuple(int(d.dim_value) for d in dims)
        self.uses = Counter(v for n in proto.graph.node for v in n.input if v)
        self.uses.update(o.name for o in proto.graph.output)
        self.names: set[str] = set()
        self.handlers: dict[str, Callable[[onnx.NodeProto, str], None]] = {
            op: self._op_table if op in _TABLE_OPS else getattr(self, f"_op_{op}")
            for op in SUPPORTED_OPS
        }
        self.handlers["FastGelu"] = self._op_FastGelu  # com.microsoft only (FUSED_OPS)

    # -- driver ----------------------------------------------------------------------------

    def run(self) -> Graph:
        graph = self.proto.graph
        (x,) = [i for i in graph.input if i.name not in self.consts]
        shape = tuple(int(d.dim_value) for d in x.type.tensor_type.shape.dim)
        # Ranks other than 2, 3 and 4 are left to the op handlers (which name the node) and to
        # Graph.verify.
        self.tensors[x.name] = Tensor(x.name, ir_shape(shape))
        self.alias[x.name] = x.name
        for index, node in enumerate(graph.node):
            name = self._unique(node.name or f"{node.op_type}_{index}")
            if self._fold(node, name):
                continue
            start = len(self.nodes)
            reason = self._try_handler(index, node, name)
            if reason is not None and not self._fold_refused(node):
                self._mark_host(index, node, name, reason)
            for ir in self.nodes[start:]:
                self.origins.setdefault(ir.name, index)
        self._form_regions()
        if self.blockers:
            raise CompileError(
                None,
                "model",
                f"{len(self.blockers)} node(s) can run neither on the accelerator nor on the host: "
                + "; ".join(self.blockers),
            )
        for p in self.pending.values():
            raise CompileError(
                p.node.name,
                "ConvInteger" if p.node.op == "conv" else "MatMulInteger",
                "the int32 output is never scaled",
                "ConvInteger/MatMulInteger -> Cast(to=FLOAT) -> Mul(scale)",
            )
        outputs = []
        for out in graph.output:
            if out.name not in self.alias:
                raise CompileError(
                    out.name, "graph output", "is not computed from the input (a constant?)"
                )
            outputs.append(self.alias[out.name])
        return Graph(
            self.nodes,
            self.tensors,
            [x.name],
            outputs,
            quantized=False,
            source=self.proto,
            origins=self.origins,
            host_reasons=self.host_reasons,
        )

    # -- partitioning ------------------------------------------------------------------------

    def _try_handler(self, index: int, node: onnx.NodeProto, name: str) -> str | None:
        """Import ``node`` with its handler; the reason it goes to the host if it does not."""
        if node.domain == MS_DOMAIN and node.op_type in FUSED_OPS:  # a fused GELU chain
            op = None
        else:
            op = f"{node.domain}.{node.op_type}" if node.domain not in ("", "ai.onnx") else None
        if op is not None or node.op_type not in self.handlers:
            return f"op {op or node.op_type} has no accelerator mapping"
        if index in self.forced:
            return self.forced[index]
        saved = (
            len(self.nodes),
            {k: dataclasses.replace(t) for k, t in self.tensors.items()},
            dict(self.alias),
            set(self.qview),
            dict(self.qconst),
            dict(self.pending),
            dict(self.consts),
            dict(self.pending_views),
        )
        try:
            self.handlers[node.op_type](node, name)
            host_outputs = {ir.output for ir in self.nodes if ir.op == "host"}
            for ir in self.nodes[saved[0] :]:
                if ir.op in _FOLDED_INTO_PRODUCER and ir.inputs[0] in host_outputs:
                    raise CompileError(name, node.op_type, "follows a host node")
        except CompileError as exc:
            (
                count,
                self.tensors,
                self.alias,
                self.qview,
                self.qconst,
                self.pending,
                self.consts,
                self.pending_views,
            ) = saved
            del self.nodes[count:]
            return exc.reason + (f" (supported: {exc.supported})" if exc.supported else "")
        return None

    def _fold(self, node: onnx.NodeProto, name: str) -> bool:
        """Compute now what needs no input at run time: ``Shape`` of an activation (shapes are
        static), and a node without a handler whose inputs are all constants."""
        if node.domain not in ("", "ai.onnx"):
            return False
        if node.op_type == "Shape" and node.input[0] in self.alias:
            # the ONNX shape: a (1, C, L) tensor is held as (1, C, 1, L) in the IR
            onnx_shape = self.inferred.get(node.input[0], self._shape(self.alias[node.input[0]]))
            shape = np.array(onnx_shape, np.int64)
            attrs = self._attrs(node)
            self.consts[node.output[0]] = shape[attrs.get("start", 0) : attrs.get("end", None)]
            return True
        inputs = [i for i in node.input if i]
        if node.op_type in self.handlers or not all(i in self.consts for i in inputs):
            return False
        try:
            self.consts.update(host_regions.fold_constants(self.proto, node, self.consts))
        except HostModelError:
            return False  # left to the host region, whose check names it
        return True

    def _fold_refused(self, node: onnx.NodeProto) -> bool:
        """A node its handler refused whose inputs are all constants (a Concat of shapes, an
        Add of two initializers) is computed now rather than sent to the host."""
        inputs = [i for i in node.input if i]
        if not inputs or not all(i in self.consts for i in inputs):
            return False
        try:
            self.consts.update(host_regions.fold_constants(self.proto, node, self.consts))
        except HostModelError:
            return False
        return True

    def _mark_host(self, index: int, node: onnx.NodeProto, name: str, reason: str) -> None:
        """Place ``node`` on the host: its outputs become fp32 tensors of the inferred shapes
        (its region is formed after the last node)."""
        self.marks.append(_HostMark(index, name, node, reason))
        placeholder = Node(name, "host", [], node.output[0], {"mark": len(self.marks) - 1})
        self.nodes.append(placeholder)
        for out in node.output:
            if out and out in self.inferred:
                self.tensors[out] = Tensor(out, ir_shape(self.inferred[out]))
                self.alias[out] = out

    def _form_regions(self) -> None:
        """Replace runs of host placeholders by ``host`` nodes, one per value read outside."""
        result: list[Node] = []
        run: list[_HostMark] = []
        for ir in [*self.nodes, None]:
            if ir is not None and ir.op == "host" and "mark" in ir.attrs:
                mark = self.marks[ir.attrs["mark"]]
                produced = {o for m in run for o in m.node.output}
                fed_inside = any(
                    i in self.alias and self.alias[i] in produced and i not in produced
                    for i in mark.node.input
                )
                if run and fed_inside:  # reads a region value through an outside node
                    result += self._region(run)
                    run = []
                run.append(mark)
                continue
            if run:
                result += self._region(run)
                run = []
            if ir is not None:
                result.append(ir)
        self.nodes = result

    def _region(self, marks: list[_HostMark]) -> list[Node]:
        nodes = [m.node for m in marks]
        produced = {o for n in nodes for o in n.output if o}
        feeds: list[str] = []
        for value in (v for n in nodes for v in n.input):
            if value and value not in produced and value not in self.consts and value not in feeds:
                feeds.append(value)
        read_later = {
            i
            for ir in self.nodes
            if not (ir.op == "host" and "mark" in ir.attrs)
            for i in ir.inputs
        }
        # ONNX values read outside the region (graph outputs included), through aliases: a
        # Cast or Identity between the region's nodes reads its values too.
        inside = {m.index for m in marks}
        outside = {
            i
            for k, n in enumerate(self.proto.graph.node)
            if k > marks[0].index and k not in inside
            for i in n.input
        } | {o.name for o in self.proto.graph.output}
        resolved = {self.alias.get(v, v) for v in outside}
        fetches = [o for n in nodes for o in n.output if o and (o in read_later or o in resolved)]
        first = marks[0]
        ops = tuple(dict.fromkeys(n.op_type for n in nodes))
        for value in feeds:
            if value not in self.alias:
                self.blockers += self._blockers(marks)
                return []
            if value in self.qview:
                raise CompileError(
                    first.name,
                    first.node.op_type,
                    f"runs on the host but reads int8 codes '{value}'",
                    "float inputs for host nodes",
                )
        bad_rank = [o for o in fetches if len(self.inferred.get(o, ())) not in (2, 3, 4)]
        consumers = {
            self.origins[ir.name]
            for ir in self.nodes
            if ir.name in self.origins
            and not (ir.op == "host" and "mark" in ir.attrs)
            and any(o in ir.inputs for o in bad_rank)
        }
        if consumers - set(self.forced):
            raise _Retry(consumers)
        model_feeds, reshapes, consts = self._region_feeds(feeds)
        model = host_regions.make_model(
            self.proto,
            reshapes + nodes,
            model_feeds,
            [(o, self._elem(o), self.inferred.get(o)) for o in fetches],
            consts,
        )
        model_ok = True
        try:
            host_regions.check(model)
        except HostModelError:
            model_ok = False
            self.blockers += self._blockers(marks)
        macs = host_regions.count_macs(nodes, self.inferred, self.consts)
        out_nodes = []
        not_float = [f for f in fetches if self._elem(f) != TensorProto.FLOAT]
        if not_float:  # int8 tensors between steps carry real (float) values only
            kind = TensorProto.DataType.Name(self._elem(not_float[0]))
            self.blockers.append(
                f"'{first.name}' ({first.node.op_type}): its {kind} output '{not_float[0]}' is "
                "read by nodes after an accelerator node (host regions pass float values only)"
            )
            return []
        unshaped = [f for f in fetches if f not in self.inferred]
        if unshaped:
            if model_ok:  # else the region's blockers are named already
                self.blockers.append(
                    f"'{first.name}' ({first.node.op_type}): output '{unshaped[0]}' has no "
                    "static shape"
                )
            return []
        for k, fetch in enumerate(fetches):
            name = first.name if k == 0 else self._unique(f"{first.name}:{fetch}")
            attrs = {
                "onnx_ops": ops,
                "feeds": tuple(f for f, _ in model_feeds),
                "fetch": fetch,
                "macs": macs if k == 0 else 0,
            }
            params = {"model": np.frombuffer(model, np.uint8).copy()}
            ir = Node(
                name,
                "host",
                [self.alias[v] for v in feeds],
                fetch,
                attrs,
                params,
                [m.name for m in marks],
            )
            out_nodes.append(ir)
            self.origins[name] = first.index
            self.host_reasons[name] = "; ".join(
                f"{m.name} ({m.node.op_type}): {m.reason}" for m in marks
            )
        for n in nodes:  # values only the region reads stay out of the IR
            for o in n.output:
                if o and o not in fetches:
                    self.tensors.pop(o, None)
        return out_nodes

    def _region_feeds(
        self, feeds: list[str]
    ) -> tuple[list[tuple[str, tuple[int, ...]]], list[onnx.NodeProto], dict[str, np.ndarray]]:
        """A host model's inputs in the IR's shapes: a (1, C, L) value the IR holds as
        (1, C, 1, L) enters as ``<name>#ir`` and is reshaped back inside the model."""
        model_feeds, reshapes, consts = [], [], self.consts
        for v in feeds:
            shape, onnx_shape = self._shape(self.alias[v]), self.inferred.get(v)
            if onnx_shape is None or len(onnx_shape) == len(shape):
                model_feeds.append((v, shape))
                continue
            if consts is self.consts:
                consts = dict(self.consts)
            consts[f"{v}#shape"] = np.array(onnx_shape, np.int64)
            reshapes.append(helper.make_node("Reshape", [f"{v}#ir", f"{v}#shape"], [v]))
            model_feeds.append((f"{v}#ir", shape))
        return model_feeds, reshapes, consts

    def _elem(self, value: str) -> int:
        """The element type shape inference gave ``value`` (fp32 if it could not tell)."""
        return self.elem_types.get(value) or TensorProto.FLOAT

    def _blockers(self, marks: list[_HostMark]) -> list[str]:
        """The nodes of a region onnxruntime refuses, each tried alone, with its reason."""
        found = []
        for mark in marks:
            node = mark.node
            feeds = [(v, self.inferred.get(v)) for v in node.input if v and v not in self.consts]
            fetches = [(o, self._elem(o), self.inferred.get(o)) for o in node.output if o]
            model = host_regions.make_model(self.proto, [node], feeds, fetches, self.consts)
            try:
                host_regions.check(model)
            except HostModelError as exc:
                op = f"{node.domain}.{node.op_type}" if node.domain else node.op_type
                found.append(f"'{mark.name}' ({op}): {mark.reason}, and {exc}")
        return found or [f"'{marks[0].name}' ({marks[0].node.op_type}) and the nodes after it"]

    def _unique(self, name: str) -> str:
        base, k = name, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        self.names.add(name)
        return name

    # -- helpers ---------------------------------------------------------------------------

    @staticmethod
    def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
        out = {}
        for a in node.attribute:
            value = helper.get_attribute_value(a)
            out[a.name] = value.decode() if isinstance(value, bytes) else value
        return out

    @staticmethod
    def _has(node: onnx.NodeProto, i: int) -> bool:
        return len(node.input) > i and node.input[i] != ""

    def _act(self, node: onnx.NodeProto, name: str, i: int, *, int8: bool | None = False) -> str:
        """IR tensor of activation input ``i``; ``int8``: it must (True), must not (False) or
        may (None) hold int8 codes."""
        op = node.op_type
        if not self._has(node, i):
            raise CompileError(name, op, f"input {i} is missing")
        value = node.input[i]
        if value in self.pending:
            raise CompileError(
                name,
                op,
                f"input '{value}' is an unscaled ConvInteger/MatMulInteger accumulator",
                "ConvInteger/MatMulInteger -> Cast(to=FLOAT) -> Mul(scale)",
            )
        if value in self.consts:
            raise CompileError(
                name, op, f"input {i} ('{value}') must be an activation, not a constant"
            )
        if value not in self.alias:
            raise CompileError(name, op, f"input '{value}' is not produced by an earlier node")
        if int8 and value not in self.qview:
            raise CompileError(
                name, op, f"input '{value}' must be int8 (from QuantizeLinear or a QLinear op)"
            )
        if int8 is False and value in self.qview:
            raise CompileError(
                name, op, f"input '{value}' holds int8 codes; it needs a DequantizeLinear first"
            )
        return self.alias[value]

    def _const(self, node: onnx.NodeProto, name: str, i: int, what: str) -> np.ndarray:
        if not self._has(node, i):
            raise CompileError(name, node.op_type, f"{what} (input {i}) is missing")
        value = node.input[i]
        if value not in self.consts:
            raise CompileError(
                name, node.op_type, f"{what} '{value}' must be a constant (initializer or Constant)"
            )
        return self.consts[value]

    def _opt_const(self, node: onnx.NodeProto, name: str, i: int, what: str) -> np.ndarray | None:
        return self._const(node, name, i, what) if self._has(node, i) else None

    def _shape(self, ir_name: str) -> tuple[int, ...]:
        return self.tensors[ir_name].shape

    def _emit(
        self,
        node: onnx.NodeProto,
        name: str,
        op: str,
        inputs: list[str],
        shape: tuple[int, ...],
        attrs: dict[str, Any] | None = None,
        params: dict[str, np.ndarray] | None = None,
    ) -> Node:
        out = node.output[0]
        inferred = self.inferred.get(out)
        if inferred is not None and ir_shape(inferred) != shape:
            raise CompileError(
                name,
                node.op_type,
                f"output shape {shape} disagrees with ONNX shape inference {inferred}",
            )
        ir = Node(name, op, inputs, out, attrs or {}, params or {}, [name])
        self.nodes.append(ir)
        self.tensors[out] = Tensor(out, shape)
        self.alias[out] = out
        if (
            op in ("maxpool", "flatten", "reshape", "identity", "upsample")
            and node.input[0] in self.qview
        ):
            self.qview.add(out)  # int8 codes in, int8 codes out, same scale
            self.tensors[out].scale = self.tensors[inputs[0]].scale
            self.tensors[out].zero_point = self.tensors[inputs[0]].zero_point
            if node.input[0] in self.qdtype:
                self.qdtype[out] = self.qdtype[node.input[0]]
        return ir

    def _set_scale(
        self, node: onnx.NodeProto, name: str, ir_name: str, scale: np.ndarray, zp: int = 0
    ) -> None:
        """Record a per-tensor activation scale and (int8) zero point on an IR tensor (must
        agree if already set)."""
        if scale.size != 1:
            raise CompileError(
                name,
                node.op_type,
                f"per-axis activation scale (shape {scale.shape}) is not supported",
                "per-tensor activation scales",
            )
        s = float(scale.reshape(()))
        if not (math.isfinite(s) and s > 0):
            raise CompileError(name, node.op_type, f"scale {s} is not supported", "scales > 0")
        t = self.tensors[ir_name]
        if t.scale is not None and not math.isclose(t.scale, s, rel_tol=1e-6):
            raise CompileError(
                name,
                node.op_type,
                f"tensor '{ir_name}' already has scale {t.scale:.6g}, this gives {s:.6g}",
                "one scale per tensor",
            )
        if t.scale is not None and t.zero_point != zp:
            raise CompileError(
                name,
                node.op_type,
                f"tensor '{ir_name}' already has zero point {t.zero_point} (as int8), "
                f"this gives {zp}",
                "one zero point per tensor",
            )
        t.scale, t.zero_point = s, zp

    def _act_zero_point(
        self, node: onnx.NodeProto, name: str, i: int, what: str, codes: str | None = None
    ) -> int:
        """The zero point of an activation's codes as the accelerator's int8: an int8 zero
        point as it is, a uint8 one minus 128 (a uint8 code u is the int8 code u - 128). An
        absent zero point is 0 of the codes' type: ``codes`` is the ONNX value holding them
        (a QuantizeLinear's output type comes from its ``output_dtype``, default uint8)."""
        op = node.op_type
        if not self._has(node, i):
            if op == "QuantizeLinear":
                dtype = self._attrs(node).get("output_dtype", 0)
                if dtype not in (0, TensorProto.UINT8, TensorProto.INT8):
                    raise CompileError(
                        name,
                        op,
                        f"output_dtype {TensorProto.DataType.Name(dtype)} is not supported",
                        "int8, uint8",
                    )
                return 0 if dtype == TensorProto.INT8 else -128
            return -128 if codes is not None and self.qdtype.get(codes) == "uint8" else 0
        zp = self._const(node, name, i, what)
        if zp.dtype not in (np.int8, np.uint8):
            raise CompileError(
                name, op, f"{what} of type {zp.dtype} is not supported", "int8, uint8"
            )
        if zp.size != 1:
            raise CompileError(
                name,
                op,
                f"per-axis {what} (shape {zp.shape}) is not supported",
                "one zero point per activation tensor",
            )
        value = int(zp.reshape(-1)[0])
        return value - 128 if zp.dtype == np.uint8 else value

    def _codes_type(self, node: onnx.NodeProto, i: int) -> str:
        """'uint8' or 'int8': the type of the codes a QuantizeLinear or QLinear op writes,
        from its zero-point input ``i`` (or, absent, its output_dtype; default uint8)."""
        if self._has(node, i) and node.input[i] in self.consts:
            return "uint8" if self.consts[node.input[i]].dtype == np.uint8 else "int8"
        if node.op_type == "QuantizeLinear":
            dtype = self._attrs(node).get("output_dtype", 0)
            return "int8" if dtype == TensorProto.INT8 else "uint8"
        return "int8"

    def _zero_point(
        self, node: onnx.NodeProto, name: str, i: int, what: str, allow_int32: bool = False
    ) -> None:
        """A zero-point input must be absent-with-int8-output or an int8 (int32) array of 0s."""
        if not self._has(node, i):
            if node.op_type == "QuantizeLinear":
                dtype = self._attrs(node).get("output_dtype", 0)
                if dtype != TensorProto.INT8:
                    raise CompileError(
                        name,
                        node.op_type,
                        f"{what} is absent, so the output is uint8; uint8 is not supported",
                        "int8 symmetric (zero point 0 of type int8)",
                    )
            return
        zp = self._const(node, name, i, what)
        allowed = (np.int8, np.int32) if allow_int32 else (np.int8,)
        if zp.dtype not in allowed:
            raise CompileError(
                name,
                node.op_type,
                f"{what} of type {zp.dtype} is not supported",
                "int8 symmetric (zero point 0 of type int8)",
            )
        if np.any(zp != 0):
            raise CompileError(
                name,
                node.op_type,
                f"{what} {int(zp.flat[np.flatnonzero(zp)[0]])} is not "
                "supported (asymmetric quantization)",
                "zero point 0",
            )

    def _centred_weight(
        self, node: onnx.NodeProto, name: str, q: np.ndarray, scales: int
    ) -> np.ndarray:
        """A quantized weight with a zero point (uint8, or int8 with z != 0) as the int8
        weight ``q - z`` of zero point 0 - exact when every ``q - z`` fits int8 (a uint8 weight
        of zero point 128 does); else it is refused (and the node goes to the host)."""
        zp = self._const(node, name, 2, "x_zero_point")
        if zp.dtype != q.dtype:
            raise CompileError(
                name, node.op_type, f"x_zero_point of type {zp.dtype} for a {q.dtype} constant"
            )
        if not np.any(zp) and q.dtype == np.int8:
            return q
        zb = zp.astype(np.int64).reshape(-1)
        if zb.size > 1:
            axis = int(self._attrs(node).get("axis", 1)) % q.ndim
            shape = [1] * q.ndim
            shape[axis] = zb.size
            zb = zb.reshape(shape)
        centred = q.astype(np.int64) - zb
        if centred.min() < -128 or centred.max() > 127:
            raise CompileError(
                name,
                node.op_type,
                f"weight codes minus the zero point span {centred.min()}..{centred.max()}, "
                "beyond int8",
                "int8 weights, or weights with a zero point whose codes stay in -128..127",
            )
        return centred.astype(np.int8)

    def _scale_const(self, node: onnx.NodeProto, name: str, i: int, what: str) -> np.ndarray:
        s = self._const(node, name, i, what).astype(np.float32)
        if s.size == 0 or not np.all(np.isfinite(s)) or np.any(s <= 0):
            raise CompileError(name, node.op_type, f"{what} must be finite and > 0")
        return s

    def _weight(
        self, node: onnx.NodeProto, name: str, i: int, ndim: int
    ) -> tuple[np.ndarray, _QConst | None]:
        w = self._const(node, name, i, "weight")
        if w.ndim != ndim:
            raise CompileError(
                name, node.op_type, f"weight has shape {w.shape}", f"a {ndim}-D constant weight"
            )
        if w.dtype.kind != "f":
            raise CompileError(
                name,
                node.op_type,
                f"weight of type {w.dtype} is not supported here",
                "float weights or DequantizeLinear of int8 weights",
            )
        q = self.qconst.get(node.input[i])
        if q is not None and q.q.dtype != np.int8:
            raise CompileError(
                name, node.op_type, f"quantized weight of type {q.q.dtype} is not supported", "int8"
            )
        return w.astype(np.float32), q

    @staticmethod
    def _channel_scale(name: str, op: str, q: _QConst, axis: int, channels: int) -> np.ndarray:
        """The scale of a quantized weight as one value per output channel (axis ``axis``)."""
        if q.scale.size == 1:
            return np.full(channels, float(q.scale.reshape(-1)[0]), np.float32)
        if q.axis != axis or q.scale.size != channels:
            raise CompileError(
                name,
                op,
                f"weight scale along axis {q.axis} is not supported",
                "per-tensor or per-output-channel weight scales",
            )
        return q.scale.reshape(channels).astype(np.float32)

    def _bias(
        self, node: onnx.NodeProto, name: str, i: int, channels: int
    ) -> dict[str, np.ndarray]:
        b = self._opt_const(node, name, i, "bias")
        if b is None:
            return {"bias": np.zeros(channels, np.float32)}
        try:
            bias = np.broadcast_to(b.astype(np.float32).reshape(-1), (channels,))
        except ValueError:
            raise CompileError(
                name, node.op_type, f"bias of shape {b.shape} does not fit {channels} channels"
            ) from None
        params = {"bias": np.array(bias, np.float32)}
        q = self.qconst.get(node.input[i])
        if q is not None and q.q.dtype == np.int32 and q.q.size == channels:
            params["bias_q"] = q.q.reshape(channels).astype(np.int32)
        return params

    def _window(
        self, node: onnx.NodeProto, name: str, x: tuple[int, ...], kernel: tuple[int, ...]
    ) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int, int, int]]:
        """Kernel, stride and explicit (top, left, bottom, right) pads of a 2-D window op
        (a pool's; :meth:`_conv_window` also gives a convolution's dilation)."""
        k, s, pads, d = self._conv_window(node, name, x, kernel)
        if d != (1, 1):
            raise CompileError(name, node.op_type, f"dilation {d} is not supported", "1")
        return k, s, pads

    def _conv_window(
        self, node: onnx.NodeProto, name: str, x: tuple[int, ...], kernel: tuple[int, ...]
    ) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int, int, int], tuple[int, int]]:
        """Kernel, stride, explicit pads and dilation of a 2-D window op."""
        op, attrs = node.op_type, self._attrs(node)
        if len(kernel) != 2:
            raise CompileError(name, op, f"{len(kernel)}-D kernel is not supported", "2-D")
        if "kernel_shape" in attrs and tuple(attrs["kernel_shape"]) != tuple(kernel):
            raise CompileError(
                name,
                op,
                f"kernel_shape {attrs['kernel_shape']} does not match the weight {tuple(kernel)}",
            )
        k = (int(kernel[0]), int(kernel[1]))
        strides = tuple(attrs.get("strides", (1, 1)))
        dilations = tuple(attrs.get("dilations", (1, 1)))
        if len(strides) != 2 or min(strides) < 1:
            raise CompileError(name, op, f"strides {strides} are not supported", "2 positive ints")
        if len(dilations) != 2 or min(dilations) < 1:
            raise CompileError(name, op, f"dilations {dilations} are not supported", "2 ints >= 1")
        d = (int(dilations[0]), int(dilations[1]))
        s = (int(strides[0]), int(strides[1]))
        span = (d[0] * (k[0] - 1) + 1, d[1] * (k[1] - 1) + 1)  # the kernel's reach
        auto_pad = attrs.get("auto_pad", "NOTSET")
        if auto_pad == "NOTSET":
            pads = tuple(int(p) for p in attrs.get("pads", (0, 0, 0, 0)))
            if len(pads) != 4 or min(pads) < 0:
                raise CompileError(name, op, f"pads {pads} are not supported", "4 ints >= 0")
        elif auto_pad == "VALID":
            pads = (0, 0, 0, 0)
        elif auto_pad == "SAME_UPPER":
            total = [
                max(0, (-(-x[2 + a] // s[a]) - 1) * s[a] + span[a] - x[2 + a]) for a in range(2)
            ]
            pads = (
                total[0] // 2,
                total[1] // 2,
                total[0] - total[0] // 2,
                total[1] - total[1] // 2,
            )
        else:
            raise CompileError(
                name, op, f"auto_pad {auto_pad} is not supported", "NOTSET, VALID, SAME_UPPER"
            )
        if attrs.get("ceil_mode", 0):
            pads = self._ceil_pads(node, name, x, k, s, pads)
        return k, s, (pads[0], pads[1], pads[2], pads[3]), d

    def _ceil_pads(
        self,
        node: onnx.NodeProto,
        name: str,
        x: tuple[int, ...],
        k: tuple[int, int],
        s: tuple[int, int],
        pads: tuple[int, ...],
    ) -> tuple[int, ...]:
        """ceil_mode=1 as extra bottom/right padding, where that is exact: a MaxPool's padding
        never wins (it pads with -infinity; the array with the smallest int8, which no window
        of at least one real value can lose to). onnxruntime divides an AveragePool's edge
        windows by their size clipped to the padded input, not by the kernel size as the
        array's one rescale does, so those go to the host."""
        size = [x[2 + a] + pads[a] + pads[a + 2] for a in range(2)]
        floor = [(size[a] - k[a]) // s[a] + 1 for a in range(2)]
        ceil = [-(-(size[a] - k[a]) // s[a]) + 1 for a in range(2)]
        if floor == ceil:  # both give the same windows: ceil_mode changes nothing
            return pads
        if node.op_type != "MaxPool":
            raise CompileError(
                name,
                node.op_type,
                f"ceil_mode=1 gives {ceil[0]}x{ceil[1]} outputs, not {floor[0]}x{floor[1]}, and "
                "its edge windows are averaged over fewer values than the kernel's",
                "ceil_mode=0, or ceil_mode=1 where it gives the same shape",
            )
        for a in range(2):  # the last window must start inside the input or its top/left pad
            if (ceil[a] - 1) * s[a] >= x[2 + a] + pads[a]:
                raise CompileError(
                    name, node.op_type, f"ceil_mode=1 gives a window of padding only (axis {a})"
                )
        extra = [(ceil[a] - 1) * s[a] + k[a] - size[a] for a in range(2)]
        return (pads[0], pads[1], pads[2] + extra[0], pads[3] + extra[1])

    def _rank(self, value: str) -> int:
        """The ONNX rank of ``value`` (0 if shape inference did not tell)."""
        return len(self.inferred.get(value, ()))

    def _lift_1d(self, node: onnx.NodeProto, weight: int | None = None) -> onnx.NodeProto:
        """A 1-D window op (on (1, C, L) tensors) as the 2-D op of height 1 on the IR's
        (1, C, 1, L): kernel (1, k), stride (1, s), pads (0, begin, 0, end), dilation (1, d);
        a (O, C, k) weight (input ``weight``) becomes the constant (O, C, 1, k)."""
        lifted = onnx.NodeProto()
        lifted.CopyFrom(node)
        del lifted.attribute[:]
        for a in node.attribute:
            value = helper.get_attribute_value(a)
            if a.name in ("kernel_shape", "strides", "dilations", "output_padding"):
                value = [1, *value]
            elif a.name == "pads" and len(value) == 2:
                value = [0, value[0], 0, value[1]]
            lifted.attribute.append(helper.make_attribute(a.name, value))
        if weight is not None and self._has(node, weight) and node.input[weight] in self.consts:
            w = node.input[weight]
            if self.consts[w].ndim == 3:
                lifted.input[weight] = f"{w}#2d"
                self.consts[lifted.input[weight]] = self.consts[w][:, :, None, :]
                q = self.qconst.get(w)
                if q is not None:
                    self.qconst[lifted.input[weight]] = _QConst(q.q[:, :, None, :], q.scale, q.axis)
        return lifted

    def _need_4d(self, node: onnx.NodeProto, name: str, x: str) -> tuple[int, ...]:
        shape = self._shape(x)
        if len(shape) != 4:
            raise CompileError(
                name, node.op_type, f"input '{x}' has shape {shape}", "4-D input (1, C, H, W)"
            )
        return shape

    def _need_2d(self, node: onnx.NodeProto, name: str, x: str) -> tuple[int, ...]:
        shape = self._shape(x)
        if len(shape) != 2:
            raise CompileError(
                name, node.op_type, f"input '{x}' has shape {shape}", "2-D input (1, K)"
            )
        return shape

    def _channel_axis(self, x: str) -> int:
        """3 for a token tensor (made by a MatMul over the last axis: channels last), else 1."""
        producer = next((n for n in self.nodes if n.output == x), None)
        tokens = producer is not None and producer.op == "matmul" and len(self._shape(x)) == 4
        return 3 if tokens else 1

    def _no_extra_outputs(self, node: onnx.NodeProto, name: str, what: str) -> None:
        if any(o for o in node.output[1:]):
            raise CompileError(name, node.op_type, f"{what} output is not supported", "1 output")

    # -- convolution and fully connected ---------------------------------------------------

    def _conv_node(
        self,
        node: onnx.NodeProto,
        name: str,
        x: str,
        w: np.ndarray,
        params: dict[str, np.ndarray],
    ) -> Node:
        xs = self._need_4d(node, name, x)
        group = int(self._attrs(node).get("group", 1))
        if group < 1 or w.shape[0] % group:
            raise CompileError(
                name,
                node.op_type,
                f"group {group} does not divide the {w.shape[0]} output channels",
                "a group count dividing the input and output channels",
            )
        if w.shape[1] * group != xs[1]:
            raise CompileError(
                name, node.op_type, f"weight {w.shape} does not fit input channels {xs[1]}"
            )
        k, s, pads, dilation = self._conv_window(node, name, xs, w.shape[2:])
        try:
            out = conv_output_shape(xs, int(w.shape[0]), k, s, pads, dilation)
        except ValueError as exc:
            raise CompileError(name, node.op_type, str(exc)) from None
        attrs = {
            "kernel": k,
            "stride": s,
            "pads": pads,
            "dilation": dilation,
            "group": group,
            "act": None,
        }
        return self._emit(node, name, "conv", [x], out, attrs, params)

    def _op_Conv(self, node: onnx.NodeProto, name: str) -> None:
        if self._rank(node.input[0]) == 3:  # Conv1d: a 2-D conv of height 1
            node = self._lift_1d(node, weight=1)
        x = self._act(node, name, 0)
        self._need_4d(node, name, x)
        w, q = self._weight(node, name, 1, 4)
        o = int(w.shape[0])
        params = {"weight": w, **self._bias(node, name, 2, o)}
        if q is not None:
            params["weight_q"] = q.q.astype(np.int8)
            params["weight_scale"] = self._channel_scale(name, node.op_type, q, 0, o)
        self._conv_node(node, name, x, w, params)

    def _op_ConvTranspose(self, node: onnx.NodeProto, name: str) -> None:
        """Kernel = stride, no padding (U-Net's up-convolution): every input pixel writes its
        own s*s output block, so it is a 1x1 conv into s*s groups of O channels and a
        depth_to_space that stores each group at its position. Overlapping windows (kernel !=
        stride) and groups go to the host."""
        op = node.op_type
        if self._rank(node.input[0]) == 3:  # ConvTranspose1d: height 1
            node = self._lift_1d(node, weight=1)
        x = self._act(node, name, 0)
        xs = self._need_4d(node, name, x)
        w, q = self._weight(node, name, 1, 4)
        attrs = self._attrs(node)
        c, o, kh, kw = (int(v) for v in w.shape)
        k = (kh, kw)
        s = tuple(int(v) for v in attrs.get("strides", (1, 1)))
        group = int(attrs.get("group", 1))
        if group != 1:
            raise CompileError(name, op, f"group {group} is not supported", "group 1")
        if c != xs[1]:
            raise CompileError(name, op, f"weight {w.shape} does not fit input channels {xs[1]}")
        rest = {
            "pads": tuple(attrs.get("pads", (0, 0, 0, 0))),
            "dilations": tuple(attrs.get("dilations", (1, 1))),
            "output_padding": tuple(attrs.get("output_padding", (0, 0))),
            "auto_pad": attrs.get("auto_pad", "NOTSET"),
        }
        plain = {"pads": (0,) * 4, "dilations": (1, 1), "output_padding": (0, 0)}
        odd = {key: v for key, v in rest.items() if v != plain.get(key, v)}
        if rest["auto_pad"] not in ("NOTSET", "VALID"):
            odd["auto_pad"] = rest["auto_pad"]
        if s != k or odd:
            what = f"kernel {k}, strides {s}" + "".join(f", {a} {v}" for a, v in odd.items())
            raise CompileError(
                name,
                op,
                f"{what}: overlapping or padded windows have no array mapping",
                "kernel = strides, no pads, dilation 1, no output_padding",
            )
        sh, sw = s
        # out[o, y*sh + a, x*sw + b] = sum_c W[c, o, a, b] x[c, y, x]: group g = a*sw + b of a
        # 1x1 conv with weight W[:, :, a, b].T, then depth_to_space (DCR order).
        weight = np.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(sh * sw * o, c, 1, 1))
        bias = self._bias(node, name, 2, o)
        params: dict[str, np.ndarray] = {"weight": weight}
        params |= {key: np.tile(v, sh * sw) for key, v in bias.items()}
        if q is not None:
            wq = q.q.transpose(2, 3, 1, 0).reshape(sh * sw * o, c, 1, 1)
            params["weight_q"] = np.ascontiguousarray(wq).astype(np.int8)
            params["weight_scale"] = np.tile(self._channel_scale(name, op, q, 1, o), sh * sw)
        out = node.output[0]
        grouped = self._unique(f"{out}#groups")
        conv_attrs = {
            "kernel": (1, 1),
            "stride": (1, 1),
            "pads": (0, 0, 0, 0),
            "dilation": (1, 1),
            "group": 1,
            "act": None,
        }
        self.nodes.append(Node(name, "conv", [x], grouped, conv_attrs, params, [name]))
        self.tensors[grouped] = Tensor(grouped, (1, sh * sw * o, xs[2], xs[3]))
        shuffle = self._unique(f"{name}#interleave")
        ir = self._emit(
            node, shuffle, "depth_to_space", [grouped], (1, o, xs[2] * sh, xs[3] * sw),
            {"block": (sh, sw)},
        )  # fmt: skip
        ir.onnx_nodes = [name]

    def _op_QLinearConv(self, node: onnx.NodeProto, name: str) -> None:
        x = self._act(node, name, 0, int8=True)
        x_zp = self._act_zero_point(node, name, 2, "x_zero_point", node.input[0])
        self._set_scale(node, name, x, self._scale_const(node, name, 1, "x_scale"), x_zp)
        wq = self._const(node, name, 3, "weight")
        if wq.dtype != np.int8 or wq.ndim != 4:
            raise CompileError(
                name,
                node.op_type,
                f"weight of type {wq.dtype}, shape {wq.shape} is not supported",
                "int8 4-D weight",
            )
        o = int(wq.shape[0])
        ws = self._scale_const(node, name, 4, "w_scale")
        self._zero_point(node, name, 5, "w_zero_point")
        ys = self._scale_const(node, name, 6, "y_scale")
        y_zp = self._act_zero_point(node, name, 7, "y_zero_point")
        wscale = self._channel_scale(name, node.op_type, _QConst(wq, ws, 0), 0, o)
        w = (wq.astype(np.float32) * wscale[:, None, None, None]).astype(np.float32)
        params = {"weight": w, "weight_q": wq, "weight_scale": wscale}
        params |= self._int_bias(node, name, 8, o, wscale * np.float32(self.tensors[x].scale or 1))
        ir = self._conv_node(node, name, x, w, params)
        self._set_scale(node, name, ir.output, ys, y_zp)
        self.qview.add(ir.output)
        self.qdtype[node.output[0]] = self._codes_type(node, 7)

    def _int_bias(
        self, node: onnx.NodeProto, name: str, i: int, channels: int, scale: np.ndarray
    ) -> dict[str, np.ndarray]:
        """An int32 bias input of a QLinear op (scale x_scale * w_scale) as bias and bias_q."""
        b = self._opt_const(node, name, i, "bias")
        if b is None:
            return {"bias": np.zeros(channels, np.float32)}
        if b.dtype != np.int32 or b.shape != (channels,):
            raise CompileError(
                name,
                node.op_type,
                f"bias of type {b.dtype}, shape {b.shape} is not supported",
                f"int32 ({channels},)",
            )
        real = (b.astype(np.float64) * scale.astype(np.float64)).astype(np.float32)
        return {"bias": real, "bias_q": b.astype(np.int32)}

    def _op_ConvInteger(self, node: onnx.NodeProto, name: str) -> None:
        x = self._act(node, name, 0, int8=True)
        self._same_zero_point(node, name, x, 2, "x_zero_point")
        self._zero_point(node, name, 3, "w_zero_point")
        wq = self._const(node, name, 1, "weight")
        if wq.dtype != np.int8 or wq.ndim != 4:
            raise CompileError(
                name,
                node.op_type,
                f"weight of type {wq.dtype}, shape {wq.shape} is not supported",
                "int8 4-D weight",
            )
        o = int(wq.shape[0])
        params = {
            "weight": wq.astype(np.float32),
            "bias": np.zeros(o, np.float32),
            "weight_q": wq,
            "weight_scale": np.ones(o, np.float32),
        }
        ir = self._conv_node(node, name, x, wq.astype(np.float32), params)
        self._start_pending(node, name, ir, x)

    def _same_zero_point(self, node: onnx.NodeProto, name: str, x: str, i: int, what: str) -> None:
        """An integer op's input zero point must be the one its codes were quantized with."""
        zp = self._act_zero_point(node, name, i, what, node.input[0])
        if zp != self.tensors[x].zero_point:
            raise CompileError(
                name,
                node.op_type,
                f"{what} {zp} (as int8) differs from the input's {self.tensors[x].zero_point}",
                "the zero point of the QuantizeLinear that made the input",
            )

    def _start_pending(self, node: onnx.NodeProto, name: str, ir: Node, x: str) -> None:
        scale = self.tensors[x].scale
        if scale is None:
            raise CompileError(name, node.op_type, f"input '{x}' has no known scale")
        del self.alias[ir.output]
        self.pending[ir.output] = _Pending(ir, scale)

    def _op_Gemm(self, node: onnx.NodeProto, name: str) -> None:
        attrs = self._attrs(node)
        op = node.op_type
        if attrs.get("transA", 0):
            raise CompileError(name, op, "transA=1 is not supported", "transA=0")
        if attrs.get("alpha", 1.0) != 1.0:
            raise CompileError(name, op, f"alpha {attrs['alpha']} is not supported", "alpha 1")
        if self._has(node, 2) and attrs.get("beta", 1.0) != 1.0:
            raise CompileError(name, op, f"beta {attrs['beta']} is not supported", "beta 1")
        x = self._act(node, name, 0)
        k = self._need_2d(node, name, x)[1]
        b, q = self._weight(node, name, 1, 2)
        trans_b = int(attrs.get("transB", 0))
        w = b if trans_b else b.T
        if w.shape[1] != k:
            raise CompileError(name, op, f"weight {b.shape} (transB={trans_b}) does not fit K={k}")
        n = int(w.shape[0])
        params = {"weight": np.ascontiguousarray(w, np.float32), **self._bias(node, name, 2, n)}
        if q is not None:
            params["weight_q"] = np.ascontiguousarray(q.q if trans_b else q.q.T).astype(np.int8)
            params["weight_scale"] = self._channel_scale(name, op, q, 0 if trans_b else 1, n)
        self._emit(node, name, "gemm", [x], (1, n), {"act": None}, params)

    def _matmul_node(
        self, node: onnx.NodeProto, name: str, x: str, b: np.ndarray, params: dict[str, np.ndarray]
    ) -> Node:
        """(1, K) @ (K, N), or tokens: (1, T, K) (held as (1, T, 1, K)) @ (K, N) per token."""
        shape = self._shape(x)
        if not (len(shape) == 2 or (self._rank(node.input[0]) == 3 and shape[0] == 1)):
            raise CompileError(
                name,
                node.op_type,
                f"input '{x}' has shape {shape}",
                "2-D input (1, K) or tokens (1, T, K)",
            )
        k = shape[-1]
        if b.ndim != 2 or b.shape[0] != k:
            raise CompileError(
                name,
                node.op_type,
                f"weight of shape {b.shape} does not fit K={k}",
                "a 2-D constant weight (K, N)",
            )
        out = (*shape[:-1], int(b.shape[1]))
        return self._emit(node, name, "matmul", [x], out, {}, params)

    def _op_MatMul(self, node: onnx.NodeProto, name: str) -> None:
        if len(node.input) > 1 and node.input[1] in self.alias:  # two activations
            self._batch_matmul(node, name)
            return
        x = self._act(node, name, 0)
        b, q = self._weight(node, name, 1, 2)
        params = {"weight": np.ascontiguousarray(b.T, np.float32)}
        if q is not None:
            params["weight_q"] = np.ascontiguousarray(q.q.T).astype(np.int8)
            params["weight_scale"] = self._channel_scale(name, node.op_type, q, 1, b.shape[1])
        self._matmul_node(node, name, x, b, params)

    def _op_QLinearMatMul(self, node: onnx.NodeProto, name: str) -> None:
        x = self._act(node, name, 0, int8=True)
        a_zp = self._act_zero_point(node, name, 2, "a_zero_point", node.input[0])
        self._set_scale(node, name, x, self._scale_const(node, name, 1, "a_scale"), a_zp)
        bq = self._const(node, name, 3, "weight")
        if bq.dtype != np.int8 or bq.ndim != 2:
            raise CompileError(
                name,
                node.op_type,
                f"weight of type {bq.dtype}, shape {bq.shape} is not supported",
                "int8 2-D weight (K, N)",
            )
        bs = self._scale_const(node, name, 4, "b_scale")
        self._zero_point(node, name, 5, "b_zero_point")
        ys = self._scale_const(node, name, 6, "y_scale")
        y_zp = self._act_zero_point(node, name, 7, "y_zero_point")
        n = int(bq.shape[1])
        wscale = self._channel_scale(name, node.op_type, _QConst(bq, bs, 1), 1, n)
        params = {
            "weight": (bq.T.astype(np.float32) * wscale[:, None]).astype(np.float32),
            "weight_q": np.ascontiguousarray(bq.T),
            "weight_scale": wscale,
        }
        ir = self._matmul_node(node, name, x, bq, params)
        self._set_scale(node, name, ir.output, ys, y_zp)
        self.qview.add(ir.output)
        self.qdtype[node.output[0]] = self._codes_type(node, 7)

    def _op_MatMulInteger(self, node: onnx.NodeProto, name: str) -> None:
        x = self._act(node, name, 0, int8=True)
        self._same_zero_point(node, name, x, 2, "a_zero_point")
        self._zero_point(node, name, 3, "b_zero_point")
        bq = self._const(node, name, 1, "weight")
        if bq.dtype != np.int8 or bq.ndim != 2:
            raise CompileError(
                name,
                node.op_type,
                f"weight of type {bq.dtype}, shape {bq.shape} is not supported",
                "int8 2-D weight (K, N)",
            )
        n = int(bq.shape[1])
        params = {
            "weight": np.ascontiguousarray(bq.T).astype(np.float32),
            "weight_q": np.ascontiguousarray(bq.T),
            "weight_scale": np.ones(n, np.float32),
        }
        ir = self._matmul_node(node, name, x, bq, params)
        self._start_pending(node, name, ir, x)

    def _op_Cast(self, node: onnx.NodeProto, name: str) -> None:
        to = int(self._attrs(node).get("to", 0))
        src, out = node.input[0], node.output[0]
        if src in self.consts:
            dtype = helper.tensor_dtype_to_np_dtype(to)
            self.consts[out] = self.consts[src].astype(dtype)
            return
        if to != TensorProto.FLOAT:
            raise CompileError(
                name,
                node.op_type,
                f"cast to {TensorProto.DataType.Name(to)} is not supported",
                "Cast(to=FLOAT) after ConvInteger/MatMulInteger, or of a constant",
            )
        if src in self.pending:
            p = self.pending.pop(src)
            p.cast = True
            self.pending[out] = p
            return
        if self._elem(src) != TensorProto.FLOAT:
            kind = TensorProto.DataType.Name(self._elem(src))
            raise CompileError(name, node.op_type, f"cast of a {kind} value", "float -> float")
        x = self._act(node, name, 0)
        self.alias[out] = x  # a float -> float cast changes nothing

    def _op_Mul(self, node: onnx.NodeProto, name: str) -> None:
        ins = list(node.input)
        if self._product_table(node, name) or self._channel_gate(node, name):
            return
        if self._scaled_product(node, name):
            return
        idx = next((i for i, v in enumerate(ins[:2]) if v in self.pending), None)
        if idx is None or ins[1 - idx] not in self.consts:
            raise CompileError(
                name,
                node.op_type,
                "Mul is supported as a channel gate or the scale of an integer accumulator",
                "x (1, C, H, W) * gate (1, C, 1, 1), x * Sigmoid(x), x * HardSigmoid(x), or "
                "ConvInteger/MatMulInteger -> Cast(to=FLOAT) -> Mul(scale)",
            )
        p = self.pending.pop(ins[idx])
        if not p.cast:
            raise CompileError(name, node.op_type, "the int32 accumulator needs Cast(to=FLOAT)")
        ir = p.node
        out_shape = self.tensors[ir.output].shape
        o = out_shape[1]
        c = self.consts[ins[1 - idx]].astype(np.float64)
        vec = _per_channel_vector(c, out_shape)
        if vec is None or np.any(vec <= 0):
            raise CompileError(
                name,
                node.op_type,
                f"scale of shape {c.shape} is not a positive per-channel "
                f"scale for output {out_shape}",
                "scalar or per-output-channel scales > 0",
            )
        wscale = (vec / p.x_scale).astype(np.float32)
        wq = ir.params["weight_q"]
        bshape = (o,) + (1,) * (wq.ndim - 1)
        ir.params["weight_scale"] = wscale
        ir.params["weight"] = (wq.astype(np.float32) * wscale.reshape(bshape)).astype(np.float32)
        del self.tensors[ir.output]
        ir.output = node.output[0]
        ir.onnx_nodes.append(name)
        self.tensors[ir.output] = Tensor(ir.output, out_shape)
        self.alias[ir.output] = ir.output

    # -- normalization, activations, elementwise -------------------------------------------

    def _op_BatchNormalization(self, node: onnx.NodeProto, name: str) -> None:
        attrs = self._attrs(node)
        if attrs.get("training_mode", 0):
            raise CompileError(name, node.op_type, "training_mode=1 is not supported", "inference")
        self._no_extra_outputs(node, name, "a training (mean/var)")
        x = self._act(node, name, 0)
        shape = self._shape(x)
        c = shape[1]
        params = {}
        for i, key in enumerate(("gamma", "beta", "mean", "var"), start=1):
            v = self._const(node, name, i, key)
            if v.size != c:
                raise CompileError(
                    name, node.op_type, f"{key} has {v.size} values for {c} channels"
                )
            params[key] = v.reshape(c).astype(np.float32)
        eps = float(attrs.get("epsilon", 1e-5))
        self._emit(node, name, "batchnorm", [x], shape, {"epsilon": eps}, params)

    def _product_table(self, node: onnx.NodeProto, name: str) -> bool:
        """``x * f(x)`` with f a table of :data:`_PRODUCT_TABLES` (SiLU as Mul(x, Sigmoid(x)),
        HardSwish as Mul(x, HardSigmoid(x))) becomes one table node; False if not that form."""
        for i in (0, 1):
            gate, x = node.input[i], node.input[1 - i]
            ir = next((n for n in self.nodes if n.output == self.alias.get(gate)), None)
            if ir is None or ir.op != "table" or x not in self.alias or x in self.qview:
                continue
            function = _PRODUCT_TABLES.get((ir.attrs["function"], ir.attrs["args"]))
            if function is None or ir.inputs[0] != self.alias[x]:
                continue
            shape = self._shape(ir.inputs[0])
            out = node.output[0]
            if self.uses[gate] > 1:  # the gate is read elsewhere too: a table of its own
                attrs = {"function": function, "args": ()}
                self._emit(node, name, "table", [ir.inputs[0]], shape, attrs)
                return True
            # The gate is read only here: its node becomes the product (and keeps its name, so
            # that sending it to the host sends the gate's ONNX node).
            ir.attrs = {"function": function, "args": ()}
            del self.tensors[ir.output]
            ir.output = out
            ir.onnx_nodes.append(name)
            self.tensors[out] = Tensor(out, shape)
            self.alias[out] = out
            return True
        return False

    def _channel_gate(self, node: onnx.NodeProto, name: str) -> bool:
        """``x * g`` with x (1, C, H, W) and g (1, C, 1, 1) both activations (a
        squeeze-excitation gate) becomes a ``scale`` node; False if not that form."""
        ins = node.input[:2]
        if len(ins) != 2 or not all(v in self.alias and v not in self.qview for v in ins):
            return False
        shapes = [self._shape(self.alias[v]) for v in ins]
        for i in (0, 1):
            x, g = shapes[i], shapes[1 - i]
            if len(x) == 4 and g == (1, x[1], 1, 1):
                inputs = [self._act(node, name, i), self._act(node, name, 1 - i)]
                self._emit(node, name, "scale", inputs, x, {"act": None})
                return True
        return False

    def _table(self, node: onnx.NodeProto, name: str, function: str, args: tuple) -> None:
        x = self._act(node, name, 0)
        attrs = {"function": function, "args": tuple(float(a) for a in args)}
        self._emit(node, name, "table", [x], self._shape(x), attrs)

    def _op_table(self, node: onnx.NodeProto, name: str) -> None:
        """An op of :data:`_TABLE_OPS`: its function with the node's attrs (or their defaults)."""
        function, defaults = _TABLE_OPS[node.op_type]
        attrs = self._attrs(node)
        self._table(node, name, function, tuple(float(attrs.get(k, d)) for k, d in defaults))

    def _op_Gelu(self, node: onnx.NodeProto, name: str) -> None:
        approximate = self._attrs(node).get("approximate", "none")
        if approximate not in ("none", "tanh"):
            raise CompileError(
                name, node.op_type, f"approximate={approximate!r}", "'none' or 'tanh'"
            )
        self._table(node, name, "gelu" if approximate == "none" else "gelu_tanh", ())

    def _op_FastGelu(self, node: onnx.NodeProto, name: str) -> None:
        """The tanh-approximated GELU that :func:`fuse_gelu` writes (no bias input)."""
        self._table(node, name, "gelu_tanh", ())

    def _op_Relu(self, node: onnx.NodeProto, name: str) -> None:
        x = self._act(node, name, 0)
        self._emit(node, name, "relu", [x], self._shape(x))

    def _op_Clip(self, node: onnx.NodeProto, name: str) -> None:
        x = self._act(node, name, 0)
        if self.opset < 11:
            attrs = self._attrs(node)
            lo, hi = attrs.get("min"), attrs.get("max")
        else:
            lo_a = self._opt_const(node, name, 1, "min")
            hi_a = self._opt_const(node, name, 2, "max")
            lo = None if lo_a is None else float(lo_a.reshape(-1)[0])
            hi = None if hi_a is None else float(hi_a.reshape(-1)[0])
        lo = None if lo is None or lo <= -_FLOAT_MAX else float(lo)
        hi = None if hi is None or hi >= _FLOAT_MAX else float(hi)
        if lo == 0.0 and hi == 6.0:
            op = "relu6"
        elif lo == 0.0 and hi is None:
            op = "relu"
        else:  # any other bounds: a table
            bounds = (-_FLOAT_MAX if lo is None else lo, _FLOAT_MAX if hi is None else hi)
            self._table(node, name, "clip", bounds)
            return
        self._emit(node, name, op, [x], self._shape(x))

    def _op_Add(self, node: onnx.NodeProto, name: str) -> None:
        a, b = node.input[0], node.input[1]
        if a in self.consts and b in self.consts:
            raise CompileError(name, node.op_type, "Add of two constants is not supported")
        if a in self.consts or b in self.consts:
            i = 1 if a in self.consts else 0
            x = self._act(node, name, i)
            shape = self._shape(x)
            c = self.consts[node.input[1 - i]].astype(np.float32)
            vec = _per_channel_vector(c, shape, self._channel_axis(x))
            if vec is None:
                raise CompileError(
                    name,
                    node.op_type,
                    f"Add of a constant of shape {c.shape} to {shape} is not supported",
                    "a per-channel bias",
                )
            self._emit(node, name, "bias_add", [x], shape, {}, {"bias": vec.astype(np.float32)})
            return
        self._binary(node, name, "add", {"act": None})

    def _op_Sum(self, node: onnx.NodeProto, name: str) -> None:
        if len(node.input) != 2:
            raise CompileError(
                name, node.op_type, f"Sum of {len(node.input)} inputs is not supported", "2 inputs"
            )
        self._binary(node, name, "sum", {})

    def _binary(self, node: onnx.NodeProto, name: str, op: str, attrs: dict[str, Any]) -> None:
        x, y = self._act(node, name, 0), self._act(node, name, 1)
        if self._shape(x) != self._shape(y):
            raise CompileError(
                name,
                node.op_type,
                f"broadcasting {self._shape(x)} with {self._shape(y)} is not supported",
                "two inputs of the same shape",
            )
        self._emit(node, name, op, [x, y], self._shape(x), attrs)

    # -- pooling and reshaping -------------------------------------------------------------

    def _op_MaxPool(self, node: onnx.NodeProto, name: str) -> None:
        self._no_extra_outputs(node, name, "an Indices")
        self._pool(node, name, "maxpool")

    def _op_AveragePool(self, node: onnx.NodeProto, name: str) -> None:
        self._pool(node, name, "avgpool")

    def _pool(self, node: onnx.NodeProto, name: str, op: str) -> None:
        if self._rank(node.input[0]) == 3:  # MaxPool1d / AvgPool1d: height 1
            node = self._lift_1d(node)
        x = self._act(node, name, 0, int8=None if op == "maxpool" else False)
        xs = self._need_4d(node, name, x)
        attrs = self._attrs(node)
        if "kernel_shape" not in attrs:
            raise CompileError(name, node.op_type, "kernel_shape is missing")
        k, s, pads = self._window(node, name, xs, tuple(attrs["kernel_shape"]))
        ir_attrs: dict[str, Any] = {"kernel": k, "stride": s, "pads": pads}
        if op == "maxpool" and (max(pads[0], pads[2]) >= k[0] or max(pads[1], pads[3]) >= k[1]):
            raise CompileError(
                name, node.op_type, f"pads {pads} must be smaller than the kernel {k}"
            )
        if op == "avgpool":
            include = int(attrs.get("count_include_pad", 0))
            if any(pads) and not include:
                raise CompileError(
                    name,
                    node.op_type,
                    f"pads {pads} with count_include_pad=0 are not supported",
                    "pads 0, or count_include_pad=1",
                )
            ir_attrs["count_include_pad"] = include
        try:
            out = conv_output_shape(xs, xs[1], k, s, pads)
        except ValueError as exc:
            raise CompileError(name, node.op_type, str(exc)) from None
        self._emit(node, name, op, [x], out, ir_attrs)

    def _op_ReduceMean(self, node: onnx.NodeProto, name: str) -> None:
        """A mean over H and W is a global average pool (how torch exports one)."""
        x = self._act(node, name, 0)
        xs = self._need_4d(node, name, x)
        attrs = self._attrs(node)
        if self._has(node, 1):
            axes = [int(a) for a in self._const(node, name, 1, "axes").reshape(-1)]
        else:
            axes = [int(a) for a in attrs.get("axes", [])]
        if sorted(a % 4 for a in axes) != [2, 3]:
            raise CompileError(name, node.op_type, f"axes {axes} are not supported", "axes [2, 3]")
        if attrs.get("keepdims", 1):
            self._emit(node, name, "global_avgpool", [x], (1, xs[1], 1, 1))
            return
        # The pool's output keeps the ONNX name (calibration measures it there); a flatten
        # gives the (1, C) the model's consumers read.
        out = node.output[0]
        flat = self._unique(f"{out}#flat")
        self.nodes.append(Node(name, "global_avgpool", [x], out, {}, {}, [name]))
        self.tensors[out] = Tensor(out, (1, xs[1], 1, 1))
        self.nodes.append(
            Node(self._unique(f"{name}#flatten"), "flatten", [out], flat, {}, {}, [name])
        )
        self.tensors[flat] = Tensor(flat, (1, xs[1]))
        self.alias[out] = flat

    def _op_Concat(self, node: onnx.NodeProto, name: str) -> None:
        """Along channels, of activations of the same height and width."""
        if len(node.input) < 2:
            raise CompileError(name, node.op_type, "has fewer than 2 inputs", "2 or more")
        xs = [self._act(node, name, i) for i in range(len(node.input))]
        shapes = [self._need_4d(node, name, x) for x in xs]
        axis = int(self._attrs(node).get("axis", 1))
        if axis % (self._rank(node.input[0]) or 4) != 1:
            raise CompileError(name, node.op_type, f"axis {axis} is not supported", "axis 1")
        if len({s[2:] for s in shapes}) != 1:
            raise CompileError(name, node.op_type, f"inputs {shapes} differ in height or width")
        h, w = shapes[0][2:]
        self._emit(node, name, "concat", xs, (1, sum(s[1] for s in shapes), h, w))

    def _op_Resize(self, node: onnx.NodeProto, name: str) -> None:
        """Nearest upsampling by integer factors, in the coordinate modes where it is
        ``out[y, x] = in[y // sh, x // sw]`` (torch's nn.Upsample and the ONNX defaults)."""
        x = self._act(node, name, 0, int8=None)
        xs = self._need_4d(node, name, x)
        attrs = self._attrs(node)
        op = node.op_type
        if attrs.get("mode", "nearest") != "nearest":
            raise CompileError(name, op, f"mode {attrs.get('mode')!r} is not supported", "nearest")
        scales: np.ndarray | None
        sizes: np.ndarray | None = None
        if node.op_type == "Upsample" or self.opset < 11:
            scales = self._const(node, name, 1, "scales")
            coords, rounding = "asymmetric", "floor"
        else:
            scales = self._opt_const(node, name, 2, "scales")
            sizes = self._opt_const(node, name, 3, "sizes")
            coords = attrs.get("coordinate_transformation_mode", "half_pixel")
            rounding = attrs.get("nearest_mode", "round_prefer_floor")
            if attrs.get("antialias", 0) or "axes" in attrs:
                raise CompileError(name, op, "antialias or axes are not supported")
        if scales is not None and scales.size:
            factors = [float(v) for v in scales.reshape(-1)]
        elif sizes is not None and sizes.size:
            factors = [int(n) / d for n, d in zip(sizes.reshape(-1), xs, strict=False)]
        else:
            raise CompileError(name, op, "has neither scales nor sizes")
        if (
            len(factors) != 4
            or factors[:2] != [1.0, 1.0]
            or any(f < 1 or f > MAX_UPSAMPLE or f != int(f) for f in factors[2:])
        ):
            raise CompileError(
                name,
                op,
                f"scales {factors} are not supported",
                f"[1, 1, sh, sw], integers 1..{MAX_UPSAMPLE}",
            )
        halves = ("half_pixel", "pytorch_half_pixel")
        exact = (coords == "asymmetric" and rounding == "floor") or (
            coords in halves and rounding in ("round_prefer_floor", "round_prefer_ceil")
        )
        if not exact:
            raise CompileError(
                name,
                op,
                f"coordinate mode {coords} with nearest_mode {rounding} is not supported",
                "asymmetric with floor, or half_pixel with rounding",
            )
        sh, sw = int(factors[2]), int(factors[3])
        out = (1, xs[1], xs[2] * sh, xs[3] * sw)
        self._emit(node, name, "upsample", [x], out, {"scale": (sh, sw)})

    _op_Upsample = _op_Resize

    def _op_GlobalAveragePool(self, node: onnx.NodeProto, name: str) -> None:
        x = self._act(node, name, 0)
        xs = self._need_4d(node, name, x)
        self._emit(node, name, "global_avgpool", [x], (1, xs[1], 1, 1))

    def _op_Flatten(self, node: onnx.NodeProto, name: str) -> None:
        x = self._act(node, name, 0, int8=None)
        shape = self._shape(x)
        axis = int(self._attrs(node).get("axis", 1))
        if axis < 0:
            axis += len(shape)
        if axis != 1:
            raise CompileError(name, node.op_type, f"axis {axis} is not supported", "axis 1")
        if len(shape) == 2:
            self._emit(node, name, "identity", [x], shape)
        else:
            self._emit(node, name, "flatten", [x], (1, int(np.prod(shape[1:]))))

    def _op_Reshape(self, node: onnx.NodeProto, name: str) -> None:
        if self._heads_reshape(node, name):
            return
        x = self._act(node, name, 0, int8=None)
        shape = self._shape(x)
        target = [int(v) for v in self._const(node, name, 1, "shape").reshape(-1)]
        if not self._attrs(node).get("allowzero", 0):
            target = [shape[i] if v == 0 and i < len(shape) else v for i, v in enumerate(target)]
        size = int(np.prod(shape))
        if target.count(-1) == 1:
            rest = int(np.prod([v for v in target if v != -1]))
            target[target.index(-1)] = size // rest if rest and size % rest == 0 else -1
        flat = (1, size)
        if tuple(target) == shape:
            self._emit(node, name, "identity", [x], shape)
        elif len(shape) == 4 and tuple(target) == flat:
            self._emit(node, name, "reshape", [x], flat, {"shape": flat})
        else:
            raise CompileError(
                name,
                node.op_type,
                f"Reshape of {shape} to {tuple(target)} is not supported",
                "flatten of a (1, C, H, W) tensor to (1, C*H*W)",
            )

    def _op_Softmax(self, node: onnx.NodeProto, name: str) -> None:
        x = self._act(node, name, 0)
        shape = self._shape(x)
        if any(node.output[0] in n.input for n in self.proto.graph.node):
            raise CompileError(name, node.op_type, "its output is read by other nodes", "last")
        axis = int(self._attrs(node).get("axis", 1 if self.opset < 13 else -1))
        if len(shape) != 2 or axis not in (1, -1):
            raise CompileError(
                name,
                node.op_type,
                f"Softmax over axis {axis} of {shape} is not supported",
                "the last axis of a (1, N) tensor",
            )
        self._emit(node, name, "softmax", [x], shape)

    # -- constants and no-ops --------------------------------------------------------------

    def _op_Constant(self, node: onnx.NodeProto, name: str) -> None:
        attrs = self._attrs(node)
        out = node.output[0]
        if "value" in attrs:
            self.consts[out] = numpy_helper.to_array(attrs["value"])
        elif "value_float" in attrs:
            self.consts[out] = np.array(attrs["value_float"], np.float32)
        elif "value_floats" in attrs:
            self.consts[out] = np.array(attrs["value_floats"], np.float32)
        elif "value_int" in attrs:
            self.consts[out] = np.array(attrs["value_int"], np.int64)
        elif "value_ints" in attrs:
            self.consts[out] = np.array(attrs["value_ints"], np.int64)
        else:
            raise CompileError(
                name,
                node.op_type,
                f"attributes {sorted(attrs)} are not supported",
                "value, value_float(s), value_int(s)",
            )

    def _op_ConstantOfShape(self, node: onnx.NodeProto, name: str) -> None:
        shape = self._const(node, name, 0, "shape").astype(np.int64).reshape(-1)
        value = self._attrs(node).get("value")
        fill = (
            numpy_helper.to_array(value).reshape(-1)
            if value is not None
            else np.zeros(1, np.float32)
        )
        self.consts[node.output[0]] = np.full(tuple(shape), fill[0], dtype=fill.dtype)

    def _op_Identity(self, node: onnx.NodeProto, name: str) -> None:
        src, out = node.input[0], node.output[0]
        if src in self.consts:
            self.consts[out] = self.consts[src]
            if src in self.qconst:
                self.qconst[out] = self.qconst[src]
        elif src in self.qview:
            self.alias[out] = self.alias[src]
            self.qview.add(out)
        else:
            x = self._act(node, name, 0)
            self._emit(node, name, "identity", [x], self._shape(x))

    def _used(self, value: str) -> bool:
        """Whether any node or graph output reads ``value``."""
        graph = self.proto.graph
        return any(value in n.input for n in graph.node) or value in {o.name for o in graph.output}

    def _op_Dropout(self, node: onnx.NodeProto, name: str) -> None:
        if len(node.output) > 1 and node.output[1] and self._used(node.output[1]):
            raise CompileError(name, node.op_type, "its mask output is read", "an unused mask")
        if self._has(node, 2):
            training = self._const(node, name, 2, "training_mode")
            if bool(training.reshape(-1)[0]):
                raise CompileError(name, node.op_type, "training_mode=True is not supported")
        self._op_Identity(node, name)

    # -- quantization ----------------------------------------------------------------------

    def _op_QuantizeLinear(self, node: onnx.NodeProto, name: str) -> None:
        attrs = self._attrs(node)
        if attrs.get("block_size", 0):
            raise CompileError(name, node.op_type, "blocked quantization is not supported")
        s = self._scale_const(node, name, 1, "y_scale")
        src, out = node.input[0], node.output[0]
        if src in self.consts:  # a float weight quantized in the graph
            self._zero_point(node, name, 2, "y_zero_point")
            x = self.consts[src].astype(np.float64)
            axis = int(attrs.get("axis", 1))
            sb = s.astype(np.float64)
            if s.size > 1:
                if not -x.ndim <= axis < x.ndim:
                    raise CompileError(
                        name, node.op_type, f"axis {axis} is out of range for a {x.ndim}-D input"
                    )
                axis %= x.ndim
                shape = [1] * x.ndim
                shape[axis] = s.size
                sb = sb.reshape(shape)
            self.consts[out] = np.clip(np.rint(x / sb), -128, 127).astype(np.int8)
            return
        x_ir = self._act(node, name, 0)
        zp = self._act_zero_point(node, name, 2, "y_zero_point")
        self._set_scale(node, name, x_ir, s, zp)
        self.alias[out] = x_ir
        self.qview.add(out)
        self.qdtype[out] = self._codes_type(node, 2)

    def _op_DequantizeLinear(self, node: onnx.NodeProto, name: str) -> None:
        attrs = self._attrs(node)
        if attrs.get("block_size", 0):
            raise CompileError(name, node.op_type, "blocked quantization is not supported")
        src, out = node.input[0], node.output[0]
        s = self._scale_const(node, name, 1, "x_scale")
        if src in self.consts:
            q = self.consts[src]
            if q.dtype in (np.int8, np.uint8) and self._has(node, 2):
                q = self._centred_weight(node, name, q, s.size)
            if q.dtype not in (np.int8, np.int32):
                raise CompileError(
                    name,
                    node.op_type,
                    f"quantized constant of type {q.dtype} is not supported",
                    "int8 (weights), int32 (biases)",
                )
            if q is self.consts[src]:
                self._zero_point(node, name, 2, "x_zero_point", allow_int32=True)
            axis: int | None = None
            sb = s.astype(np.float64).reshape(-1)[:1].reshape(())
            if s.size > 1:
                axis = int(attrs.get("axis", 1))
                if not -q.ndim <= axis < q.ndim:
                    raise CompileError(
                        name, node.op_type, f"axis {axis} is out of range for a {q.ndim}-D input"
                    )
                axis %= q.ndim
                shape = [1] * q.ndim
                shape[axis] = s.size
                sb = s.astype(np.float64).reshape(shape)
            self.consts[out] = (q.astype(np.float64) * sb).astype(np.float32)
            self.qconst[out] = _QConst(q, s.reshape(-1), axis)
            return
        if src not in self.qview:
            self._act(node, name, 0, int8=True)  # raises with the reason
        zp = self._act_zero_point(node, name, 2, "x_zero_point", src)
        x = self.alias[src]
        self._set_scale(node, name, x, s, zp)
        self.alias[out] = x


def ir_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The IR's shape of an ONNX activation: (1, C, L) (Conv1d's) is held as (1, C, 1, L)."""
    return (shape[0], shape[1], 1, shape[2]) if len(shape) == 3 else tuple(shape)


def _per_channel_vector(c: np.ndarray, shape: tuple[int, ...], axis: int = 1) -> np.ndarray | None:
    """``c`` as one value per channel (``axis``: 1, or 3 for tokens) of a ``shape`` tensor, or
    None if it is not."""
    if c.ndim > len(shape):
        return None
    try:
        full = np.broadcast_to(c, shape)
    except ValueError:
        return None
    index = tuple(slice(None) if i == axis else 0 for i in range(len(shape)))
    vec = np.array(full[index])
    expect = vec.reshape(tuple(-1 if i == axis else 1 for i in range(len(shape))))
    if not np.array_equal(np.broadcast_to(expect, shape), full):
        return None
    return vec

"""The fake-quantized twin: an oracle for the integer reference that the compiler cannot fool.

It is built from the *original* ONNX model, not from the compiler's IR: every tensor the device
produces (an int8 tensor of the reference graph, matched to the ONNX tensor of the same name -
the IR names each node's output after the last ONNX node it folds in, a fused activation or a
scale) gets a QuantizeLinear with the compiler's scale and zero point, and the float ONNX ops
between them run on onnxruntime. Each tensor's DequantizeLinear reads the *device's* codes
(``isolated``, the default), so every layer is checked on the inputs it really got and one
layer's rounding does not spread to the next; ``isolated=False`` chains the twin's own codes
(an end-to-end view the rule below does not cover: differences grow with depth, ResNet-18 at
32x32 0.922 of codes equal and up to 6 apart).
Host steps (ONNX regions the accelerator does not run) are checked the same way: the original
model's nodes of the region, not the host model the executable carries.

**The one rule where the twin and the device differ by design** (:data:`TIE_BAND`,
:func:`check_rule`): a code may be 1 off the twin where the twin's unrounded code
``real / scale + zero_point`` lies within ``TIE_BAND`` of a rounding tie (x.5) - onnxruntime's
QuantizeLinear rounds half to even, the device's requantize half up (``arch/reference_ops.py``),
the host's input quantization half away from zero, and the integer multiplier, the float sum
order and a weight at a tie that a folded BatchNorm rounds the other way move a value that
close to a tie to either side. A layer whose device output goes
through a second rounding the ONNX graph does not have (a ``table`` activation, applied to
int8 codes of the pre-activation; a softmax's fp32 output rounded on the way into the next
product) may be off anywhere, by what one code of that rounding moves it (:func:`second_step`:
1, or a steep table's largest step); a table's codes are compared with the twin's clipped to
the table's range (its int8 pre-activation saturates where the float one goes on). Nothing else
may differ. The twin holds what the device holds: weights per channel in int8, and each
product's bias in int32 at the accumulator scale (its rounding moved codes up to 0.003 from a
tie to the other side).

The norm unit's ops (:data:`INTEGER_ALGORITHMS`: layer_norm, rms_norm, row_softmax) are integer
algorithms by design - the softmax's ``2**-f`` a quadratic in Q15 (``arch/norm_ops.py``,
``EXP_POLY``, about 0.1 % relative), the norms a Q12 normalization: they keep the same rule
(measured: at most 0.062 codes from a tie), but their share of equal codes is counted apart from
the layers the device computes exactly, for which the goal of 99.9 % holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from arch import host_runtime
from arch.reference import RefGraph, quantize_input, reuse_or_evaluate, zero_point
from compiler.calibrate import as_shape
from sim.quality.qdq_agreement import summary

__all__ = [
    "INTEGER_ALGORITHMS",
    "TIE_BAND",
    "Twin",
    "build_twin",
    "check_rule",
    "second_step",
    "twin_agreement",
    "twin_report",
]

#: How close to a rounding tie (in codes) the twin's unrounded code may be for the device to
#: round the other way. Measured: at most 0.065 - ResNet-18 at 64x64, where one of 73,728
#: weights of a conv with a folded BatchNorm lies at a tie and the compiler's float fold rounds
#: it the other way; else below 0.05.
TIE_BAND = 0.1
#: Ops the device computes with integer approximations (see the module docstring).
INTEGER_ALGORITHMS = frozenset({"layer_norm", "rms_norm", "row_softmax"})

_CODES = "#twin_codes"  # graph input: the device's codes of a tensor (isolated twin)
_TWIN = "#twin_q"  # graph output: the twin's codes of a tensor
_DQ = "#twin_dq"  # the dequantized codes the original consumers read


@dataclass(frozen=True)
class Twin:
    """The twin model and which reference-graph tensors it checks."""

    model: onnx.ModelProto
    tensors: list[str]  # reference-graph tensors the twin quantizes, in graph order
    onnx_of: dict[str, str]  # each one's ONNX tensor (itself, or the tensor it is a view of)
    isolated: bool
    input_name: str  # the original model's float input
    trims: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # see :func:`_compared`

    def codes(self, name: str, device: Mapping[str, np.ndarray]) -> np.ndarray:
        """The device's codes of tensor ``name`` where they hold the ONNX tensor."""
        codes = device[name]
        if name in self.trims:
            axis, length = self.trims[name]
            codes = np.take(codes, np.arange(length), axis=axis)
        return codes


def _compared(
    source: onnx.ModelProto, graph: RefGraph
) -> tuple[dict[str, str], dict[str, tuple[int, int]]]:
    """The int8 tensors of ``graph`` that the original model has (its input and the outputs of
    its nodes), each with its ONNX name: its own, or for a tensor the compiler named
    ``<onnx name>#<what>`` (a view it made, as ``mean#flat``) the ONNX tensor's when no other
    tensor of ``graph`` has that name. An ONNX tensor that is not float (a mask's Cast to
    bool, which the device holds as int8 codes) has no QuantizeLinear: it is not compared.
    A ``#<what>`` tensor of more elements is compared where it holds the ONNX tensor: when one
    axis alone is longer (heads padded to whole lines, ``compiler.passes.head_padding``), its
    first part along that axis - the second mapping gives (axis, length); else it is not."""
    not_float = _not_float(source)
    onnx_names = {o for n in source.graph.node for o in n.output} - not_float
    onnx_names.add(source.graph.input[0].name)
    names = [graph.inputs[0], *(n.output for n in graph.nodes)]
    taken = set(names)
    shapes = _static_shapes(source)
    out: dict[str, str] = {}
    trims: dict[str, tuple[int, int]] = {}
    for name in names:
        base = name if name in onnx_names else name.split("#")[0]
        if graph.tensors[name].scale is None or base not in onnx_names:
            continue
        if base != name and (base in taken or base in out.values()):
            continue
        ours, theirs = graph.tensors[name].shape, tuple(shapes.get(base, ()))
        if theirs and math.prod(ours) != math.prod(theirs):
            longer = [
                a for a in range(len(ours)) if len(ours) == len(theirs) and ours[a] != theirs[a]
            ]
            if len(longer) != 1 or ours[longer[0]] < theirs[longer[0]]:
                continue  # no view of the ONNX tensor
            trims[name] = (longer[0], theirs[longer[0]])
        out[name] = base
    return out, trims


def _not_float(source: onnx.ModelProto) -> set[str]:
    """The tensors of ``source`` whose inferred element type is known and not a float."""
    inferred = onnx.shape_inference.infer_shapes(source).graph
    floats = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16)
    return {
        info.name
        for info in [*inferred.value_info, *inferred.output]
        if info.type.tensor_type.elem_type not in (TensorProto.UNDEFINED, *floats)
    }


def build_twin(source: onnx.ModelProto, graph: RefGraph, *, isolated: bool = True) -> Twin:
    """The fake-quantized twin of ``source`` (the fp32 model the executable was compiled from)
    with the scales and zero points of ``graph`` (the executable's reference graph)."""
    model = onnx.ModelProto()
    model.CopyFrom(source)
    g = model.graph
    onnx_of, trims = _compared(source, graph)
    names = [onnx_of[n] for n in onnx_of]
    regions = _host_regions(graph)
    weight_scales = _fake_quantize_weights(g, set().union(*regions))
    scales = {name: float(graph.tensors[ir].scale or 1.0) for ir, name in onnx_of.items()}
    _fake_quantize_biases(g, scales, weight_scales)
    shapes = _static_shapes(source)
    x_name = g.input[0].name
    added: list[onnx.NodeProto] = []
    for ir_name, name in onnx_of.items():
        t = graph.tensors[ir_name]
        tag = name.replace("/", "_")
        scale, zp = f"{tag}#twin_scale", f"{tag}#twin_zp"
        g.initializer.append(
            helper.make_tensor(scale, TensorProto.FLOAT, [], [float(t.scale or 1.0)])
        )
        g.initializer.append(
            helper.make_tensor(zp, TensorProto.INT8, [], [zero_point(graph, ir_name)])
        )
        _read_codes(g, name, regions)
        added.append(helper.make_node("QuantizeLinear", [name, scale, zp], [name + _TWIN]))
        codes = name + _CODES if isolated else name + _TWIN
        added.append(helper.make_node("DequantizeLinear", [codes, scale, zp], [name + _DQ]))
        if isolated:
            g.input.append(helper.make_tensor_value_info(codes, TensorProto.INT8, shapes.get(name)))
        g.output.append(helper.make_tensor_value_info(name + _TWIN, TensorProto.INT8, None))
    # original outputs read what the device gives; keep each exactly once
    for out in list(g.output):
        if out.name in names and out.name != x_name:
            g.output.remove(out)
    for name in names:
        if name != x_name:
            g.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    g.node.extend(added)
    _topological(g)
    host_runtime.readable(model)
    return Twin(model, list(onnx_of), onnx_of, isolated, x_name, trims)


def _static_shapes(source: onnx.ModelProto) -> dict[str, list[int]]:
    """The static shapes ONNX shape inference gives ``source``'s tensors (the device holds
    tokens (1, T, C) as (1, T, 1, C): its codes are fed in the ONNX shape)."""
    inferred = onnx.shape_inference.infer_shapes(source).graph
    out = {}
    for info in [*inferred.input, *inferred.value_info, *inferred.output]:
        dims = [
            d.dim_value if d.HasField("dim_value") else -1 for d in info.type.tensor_type.shape.dim
        ]
        if dims and all(d > 0 for d in dims):
            out[info.name] = dims
    return out


def _host_regions(graph: RefGraph) -> list[set[str]]:
    """The ONNX tensors each host step computes (its model's node outputs): inside a region
    the host keeps them in fp32, whatever the device reads of them."""
    regions = []
    for node in graph.nodes:
        if node.op == "host":
            model = onnx.ModelProto.FromString(node.params["model"].tobytes())
            computed = {o for n in model.graph.node for o in n.output}
            regions.append(computed - set(node.inputs))  # not its inputs, reshaped in it
    return regions


def _read_codes(g: onnx.GraphProto, name: str, regions: list[set[str]]) -> None:
    """Every reader of ``name`` reads its dequantized codes, but a node of a host region that
    computes ``name`` itself (it reads the fp32 value, as the host step does)."""
    for node in g.node:
        inside = any(set(node.output) <= r and name in r for r in regions)
        for i, arg in enumerate(node.input):
            if arg == name and not inside:
                node.input[i] = name + _DQ


def _weight_axis(node: onnx.NodeProto, w: np.ndarray) -> int | None:
    """The output-channel axis of ``node``'s constant weight ``w`` (its input 1), -1 for every
    axis but the first (a ConvTranspose's), or None if the node has no int8 weight on the
    device."""
    if node.op_type == "Conv" and w.ndim >= 3:
        return 0
    if node.op_type == "Gemm" and w.ndim == 2:
        trans = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans else 1
    if node.op_type == "MatMul" and w.ndim == 2:
        return 1
    if node.op_type == "ConvTranspose" and w.ndim >= 3:  # a 1x1 conv of C_out x k x k channels
        return -1
    return None


def _fake_quantize_weights(g: onnx.GraphProto, on_host: set[str]) -> dict[str, np.ndarray]:
    """Each Conv, Gemm and MatMul weight of ``g`` as the device holds it: symmetric int8 per
    output channel, scale ``max|w| / 127``, rounded half to even (the compiler's rule; a
    folded BatchNorm or scale multiplies a channel, which leaves its codes as they are). Nodes
    that compute ``on_host`` tensors keep their fp32 weights, as the host step does. Returns
    each weight's scale per output channel (but a ConvTranspose's)."""
    inits = {t.name: i for i, t in enumerate(g.initializer)}
    done: dict[str, np.ndarray] = {}
    for node in g.node:
        if len(node.input) < 2 or node.input[1] not in inits or node.input[1] in done:
            continue
        if set(node.output) & on_host:
            continue
        init = g.initializer[inits[node.input[1]]]
        w = numpy_helper.to_array(init).astype(np.float64)
        axis = _weight_axis(node, w)
        if axis is None:
            continue
        others = (0,) if axis == -1 else tuple(d for d in range(w.ndim) if d != axis)
        m = np.abs(w).max(axis=others, keepdims=True)
        s = np.where(m > 0, m / 127.0, 1.0)
        fake = (np.clip(np.rint(w / s), -127, 127) * s).astype(np.float32)
        init.CopyFrom(numpy_helper.from_array(fake, init.name))
        done[node.input[1]] = s.reshape(-1) if axis != -1 else np.array([])
    return done


#: Ops after a product that the compiler folds into its weights and bias: the bias the device
#: rounds is then not the ONNX node's own.
_FOLDED_AFTER = {"BatchNormalization", "Mul", "Div", "Add", "Sub"}


def _fake_quantize_biases(
    g: onnx.GraphProto, scales: dict[str, float], weight_scales: dict[str, np.ndarray]
) -> None:
    """Each Conv, Gemm (input 2) and MatMul + Add bias as the device holds it: int32 codes at
    the accumulator scale ``s_in * s_w`` per output channel (``rint``, the compiler's rule).
    ``scales``: the device scale of each ONNX tensor the twin compares; a product whose input
    has none, or whose output a folded op reads, keeps its float bias."""
    inits = {t.name: i for i, t in enumerate(g.initializer)}
    producer = {o: n for n in g.node for o in n.output}
    readers: dict[str, set[str]] = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, set()).add(n.op_type)
    for node in list(g.node):
        product, bias, slot = node, node.input[2] if len(node.input) >= 3 else "", 2
        if node.op_type == "Add" and len(node.input) == 2:
            for k in (0, 1):
                found = producer.get(node.input[k])
                if found is not None and found.op_type == "MatMul":
                    product, bias, slot = found, node.input[1 - k], 1 - k
        if product.op_type not in ("Conv", "Gemm", "MatMul"):
            continue
        x, w = product.input[0], product.input[1]
        sw = weight_scales.get(w)
        if bias not in inits or x not in scales or sw is None or not sw.size:
            continue
        if readers.get(node.output[0], set()) & _FOLDED_AFTER:
            continue
        init = g.initializer[inits[bias]]
        b = numpy_helper.to_array(init).astype(np.float64)
        if b.ndim != 1 or b.size != sw.size:
            continue
        acc = scales[x] * sw
        fake = (np.rint(b / acc) * acc).astype(np.float32)
        name = f"{bias}#twin_bias_{node.output[0]}"
        g.initializer.append(numpy_helper.from_array(fake, name))
        node.input[slot] = name


def _topological(g: onnx.GraphProto) -> None:
    """Order ``g``'s nodes so each comes after the producers of its inputs."""
    ready = {i.name for i in g.input} | {t.name for t in g.initializer} | {""}
    nodes, ordered = list(g.node), []
    while nodes:
        rest = []
        for node in nodes:
            if all(i in ready for i in node.input):
                ordered.append(node)
                ready.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(nodes):
            raise ValueError(f"twin graph has a cycle at node {rest[0].name!r}")
        nodes = rest
    del g.node[:]
    g.node.extend(ordered)


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    """An onnxruntime session with no graph optimization: its QDQ fusions would run the twin's
    products as integer kernels (QLinearConv and the like), not the float ops."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def run_twin(
    twin: Twin,
    graph: RefGraph,
    x: np.ndarray,
    device: Mapping[str, np.ndarray],
    session: ort.InferenceSession | None = None,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Tensor -> (the twin's codes, the twin's unrounded codes) for fp32 input ``x`` and the
    ``device``'s codes of every tensor (``session``: of ``twin.model``, made if not given)."""
    session = session or _session(twin.model)
    ir_of = {name: ir_name for ir_name, name in twin.onnx_of.items()}
    feeds: dict[str, np.ndarray] = {}
    for arg in session.get_inputs():
        if arg.name == twin.input_name:
            feeds[arg.name] = np.asarray(x, np.float32).reshape(_static(arg.shape, x.shape))
        elif arg.name.endswith(_CODES):
            codes = twin.codes(ir_of[arg.name[: -len(_CODES)]], device)
            feeds[arg.name] = codes.reshape(_static(arg.shape, codes.shape)).astype(np.int8)
    names = [twin.onnx_of[n] for n in twin.tensors]
    fetch = [n + _TWIN for n in names] + [n for n in names if n != twin.input_name]
    values = dict(zip(fetch, session.run(fetch, feeds), strict=True))
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for ir_name, name in twin.onnx_of.items():
        real = x if name == twin.input_name else values[name]
        unrounded = np.asarray(real, np.float64) / float(graph.tensors[ir_name].scale or 1.0)
        out[ir_name] = (values[name + _TWIN], unrounded + zero_point(graph, ir_name))
    return out


def _static(dims: Sequence[Any], have: tuple[int, ...]) -> tuple[int, ...]:
    """The ONNX input's shape where it is static and holds as many elements, else ``have``."""
    wanted = tuple(d if isinstance(d, int) else -1 for d in dims)
    if not wanted or -1 in wanted or int(np.prod(wanted)) != int(np.prod(have)):
        return have
    return wanted


def second_step(graph: RefGraph, name: str) -> int:
    """How many codes a second rounding on the device, one the ONNX graph does not have, may
    move tensor ``name``: a ``table`` act's largest step between neighbouring entries (the
    pre-activation rounded one code the other way), at least 1; 1 for a product of a softmax's
    fp32 output (rounded to int8 for the array) and for what reads a constant's codes (rounded
    at its own scale before the op; ONNX adds the fp32 constant), also through a concat; 0
    where there is none."""
    node = next((n for n in graph.nodes if n.output == name), None)
    if node is None:
        return 0
    if node.attrs.get("act") == "table":
        table = np.asarray(node.params["table"], np.int64)
        return max(1, int(np.abs(np.diff(table)).max()))
    nodes = {n.output: n for n in graph.nodes}

    def rounded(tensor: str) -> bool:
        producer = nodes.get(tensor)
        return producer is not None and producer.op in ("softmax", "constant")

    inputs = list(node.inputs)
    if node.op == "concat":  # what its inputs' producers read
        inputs += [j for i in node.inputs if i in nodes for j in nodes[i].inputs]
    return int(any(rounded(i) for i in inputs))


def check_rule(
    device: np.ndarray, twin: np.ndarray, unrounded: np.ndarray, step: int = 0
) -> np.ndarray:
    """Mask of the codes that break the module's rule: 1 off away from a tie (farther than
    :data:`TIE_BAND` from x.5 in the twin's unrounded code), or more than 1 off - unless a
    second rounding (:func:`second_step`) ``step`` lets them be up to ``step`` off anywhere."""
    diff = np.abs(device.astype(np.int64).reshape(-1) - twin.astype(np.int64).reshape(-1))
    if step:
        return diff > step
    u = np.clip(unrounded.reshape(-1), -128.5, 127.5)
    near_tie = np.abs(np.abs(u - np.floor(u)) - 0.5) <= TIE_BAND
    return (diff > 1) | ((diff == 1) & ~near_tie)


def twin_agreement(
    source: onnx.ModelProto,
    graph: RefGraph,
    inputs: Sequence[np.ndarray],
    known: Mapping[str, np.ndarray] | None = None,
    *,
    isolated: bool = True,
) -> list[dict[str, Any]]:
    """Per compared tensor, over fp32 ``inputs``: ``{"layer", "op", "tensor", "equal" (share of
    codes equal to the twin's), "max_code_diff", "outside_rule" (codes breaking the rule of the
    module docstring), "second_step" (:func:`second_step`), "count"}``.
    ``known``: every tensor of ``graph`` already evaluated (a run's reference or the device's
    tensors) for the first input."""
    twin = build_twin(source, graph, isolated=isolated)
    session = _session(twin.model)
    x_name = graph.inputs[0]
    t_in = graph.tensors[x_name]
    totals = {name: [0, 0, 0, 0] for name in twin.tensors}
    steps = {name: second_step(graph, name) for name in twin.tensors}
    tables = {n.output: n.params["table"] for n in graph.nodes if n.attrs.get("act") == "table"}
    for k, x in enumerate(inputs):
        x = as_shape(np.asarray(x, np.float32), t_in.shape)
        q = quantize_input(x, t_in.scale or 1.0, zero_point(graph, x_name))
        device = reuse_or_evaluate(graph, q, known if k == 0 else None)
        for name, (codes, unrounded) in run_twin(twin, graph, x, device, session).items():
            if name in tables:  # a table gives only its own codes: its pre-activation saturates
                codes = np.clip(codes, tables[name].min(), tables[name].max())
            ours = twin.codes(name, device)
            diff = np.abs(ours.astype(np.int64).reshape(-1) - codes.astype(np.int64).reshape(-1))
            broken = check_rule(ours, codes, unrounded, steps[name])
            total = totals[name]
            total[0] += int(np.sum(diff == 0))
            total[1] += int(diff.size)
            total[2] = max(total[2], int(diff.max()) if diff.size else 0)
            total[3] += int(np.sum(broken))
    ops = {n.output: (n.name, n.op) for n in graph.nodes}
    return [
        {
            "layer": ops.get(name, (name, "input"))[0],
            "op": ops.get(name, (name, "input"))[1],
            "tensor": name,
            "equal": totals[name][0] / max(totals[name][1], 1),
            "max_code_diff": totals[name][2],
            "outside_rule": totals[name][3],
            "second_step": steps[name],
            "count": totals[name][1],
        }
        for name in twin.tensors
    ]


def twin_report(
    source: onnx.ModelProto,
    graph: RefGraph,
    inputs: Sequence[np.ndarray],
    known: Mapping[str, np.ndarray] | None = None,
) -> dict[str, Any] | None:
    """``report.json``'s ``accuracy.twin_agreement`` for a float model (None for a QDQ one,
    whose own QDQ graph is its oracle, or if no tensor matches): the share of equal codes
    over all compared tensors, the worst layer, the largest difference, the codes outside the
    rule, and every layer (:func:`twin_agreement`)."""
    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in source.graph.node):
        return None
    layers = twin_agreement(source, graph, inputs, known)
    if not layers:
        return None
    return summary(layers) | {"outside_rule": sum(e["outside_rule"] for e in layers)}

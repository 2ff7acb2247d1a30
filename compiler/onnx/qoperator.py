"""QOperator models as QDQ: onnxruntime's ``com.microsoft`` quantized ops rewritten at import.

``onnxruntime.quantization.quantize_static(..., quant_format=QuantFormat.QOperator)`` writes
integer ops (QLinearConv and QLinearMatMul of the default domain, which the importer reads
directly, and ``com.microsoft`` QLinearAdd, QLinearMul, QLinearConcat, QGemm,
QLinearGlobalAveragePool, QLinearAveragePool, QLinearSigmoid, QLinearLeakyRelu,
QLinearSoftmax). Each of the
latter becomes ``DequantizeLinear`` of its inputs -> the float op -> ``QuantizeLinear`` with
the op's output scale and zero point, so one QDQ path serves both formats: the quantized
tensors and rounding points are the model's, the float op runs on the accelerator when it can
(with the zero points folded exactly) and on the host otherwise (onnxruntime in fp32, as the
rewritten model is also the one calibration and the accuracy check run).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

from ..errors import CompileError
from .onnx_graph import RewriteGraph

__all__ = ["REWRITTEN", "rewrite"]

_MS = "com.microsoft"

# op -> (float op, [(x, scale, zero point) input indices], (y scale, y zero point) indices)
_UNARY = {
    "QLinearGlobalAveragePool": "GlobalAveragePool",
    "QLinearAveragePool": "AveragePool",
    "QLinearSigmoid": "Sigmoid",
    "QLinearLeakyRelu": "LeakyRelu",
    "QLinearSoftmax": "Softmax",
}
_BINARY = {"QLinearAdd": "Add", "QLinearMul": "Mul"}
#: The com.microsoft ops :func:`rewrite` turns into DequantizeLinear -> op -> QuantizeLinear.
REWRITTEN: tuple[str, ...] = (*_UNARY, *_BINARY, "QLinearConcat", "QGemm")


class _Rewriter:
    """Writes the DQ -> float op -> Q nodes of one quantized op into the graph being rewritten."""

    def __init__(self, g: RewriteGraph) -> None:
        self.g = g

    def fresh(self, base: str) -> str:
        return self.g.unique(base)

    def dq(self, node: onnx.NodeProto, x: str, s: str, z: str, out: list[onnx.NodeProto]) -> str:
        y = self.fresh(f"{x}_dequantized")
        inputs = [x, s] + ([z] if z else [])
        out.append(helper.make_node("DequantizeLinear", inputs, [y], name=self.fresh(f"{y}_dq")))
        return y

    def q(self, node: onnx.NodeProto, s: str, z: str, out: list[onnx.NodeProto]) -> str:
        """A QuantizeLinear onto the node's output; returns the float value it quantizes."""
        y = node.output[0]
        f = self.fresh(f"{y}_float")
        inputs = [f, s] + ([z] if z else [])
        out.append(helper.make_node("QuantizeLinear", inputs, [y], name=self.fresh(f"{y}_q")))
        return f

    def dq_const(self, w: str, s: str, z: str, axis: int | None, out: list[onnx.NodeProto]) -> str:
        y = self.fresh(f"{w}_dequantized")
        inputs = [w, s] + ([z] if z else [])
        extra: dict[str, Any] = {} if axis is None else {"axis": axis}
        out.append(
            helper.make_node("DequantizeLinear", inputs, [y], name=self.fresh(f"{y}_dq"), **extra)
        )
        return y

    def dq_bias(
        self,
        node: onnx.NodeProto,
        bias: str,
        x_scale: str,
        w_scale: np.ndarray,
        out: list[onnx.NodeProto],
    ) -> str:
        """An int32 bias of scale ``x_scale * w_scale`` (per output channel) dequantized."""
        xs = self.const(node, x_scale, "x_scale").astype(np.float64).reshape(-1)[0]
        scale = (xs * w_scale.astype(np.float64)).astype(np.float32).reshape(-1)
        per_channel = scale.size > 1
        scale_name = self.add_init(f"{bias}_scale", scale if per_channel else scale.reshape(()))
        zeros = np.zeros(scale.size if per_channel else (), np.int32)
        zero_name = self.add_init(f"{bias}_zero_point", zeros)
        return self.dq_const(bias, scale_name, zero_name, 0 if per_channel else None, out)

    def attrs(self, node: onnx.NodeProto, drop: tuple[str, ...] = ()) -> dict[str, Any]:
        return {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name not in drop}

    def const(self, node: onnx.NodeProto, value: str, what: str) -> np.ndarray:
        if value not in self.g.consts:
            raise CompileError(node.name, node.op_type, f"{what} '{value}' must be a constant")
        return self.g.consts[value]

    def add_init(self, base: str, array: np.ndarray) -> str:
        return self.g.const(array, base, numbered=False)

    def node(self, node: onnx.NodeProto) -> list[onnx.NodeProto]:
        op, ins = node.op_type, list(node.input) + [""] * 9
        out: list[onnx.NodeProto] = []
        if op in _UNARY:
            attrs = self.attrs(node, ("channels_last", "opset"))
            if self.attrs(node).get("channels_last", 0):
                raise CompileError(node.name, op, "channels_last=1 is not supported", "NCHW")
            x = self.dq(node, ins[0], ins[1], ins[2], out)
            float_node = helper.make_node(_UNARY[op], [x], ["?"], name=node.name, **attrs)
            scale, zp = ins[3], ins[4]
        elif op in _BINARY:
            a = self.dq(node, ins[0], ins[1], ins[2], out)
            b = self.dq(node, ins[3], ins[4], ins[5], out)
            float_node = helper.make_node(_BINARY[op], [a, b], ["?"], name=node.name)
            scale, zp = ins[6], ins[7]
        elif op == "QLinearConcat":
            xs = [
                self.dq(node, node.input[i], node.input[i + 1], node.input[i + 2], out)
                for i in range(2, len(node.input), 3)
            ]
            float_node = helper.make_node("Concat", xs, ["?"], name=node.name, **self.attrs(node))
            scale, zp = ins[0], ins[1]
        elif op in ("QLinearConv", "QLinearMatMul"):
            conv = op == "QLinearConv"
            x = self.dq(node, ins[0], ins[1], ins[2], out)
            w_scale = self.const(node, ins[4], "w_scale")
            w = self.dq_const(
                ins[3], ins[4], ins[5], (0 if conv else 1) if w_scale.size > 1 else None, out
            )
            inputs = [x, w]
            if conv and ins[8]:
                inputs.append(self.dq_bias(node, ins[8], ins[1], w_scale, out))
            float_node = helper.make_node(
                "Conv" if conv else "MatMul", inputs, ["?"], name=node.name, **self.attrs(node)
            )
            scale, zp = ins[6], ins[7]
        else:  # QGemm: A, a_scale, a_zp, B, b_scale, b_zp, C (int32), y_scale, y_zp
            attrs = self.attrs(node)
            if attrs.get("transA", 0):
                raise CompileError(node.name, op, "transA=1 is not supported", "transA=0")
            trans_b = int(attrs.get("transB", 0))
            a = self.dq(node, ins[0], ins[1], ins[2], out)
            b_scale = self.const(node, ins[4], "b_scale")
            axis = (0 if trans_b else 1) if b_scale.size > 1 else None
            inputs = [a, self.dq_const(ins[3], ins[4], ins[5], axis, out)]
            if ins[6]:
                inputs.append(self.dq_bias(node, ins[6], ins[1], b_scale, out))
            gemm = {k: v for k, v in attrs.items() if k in ("alpha", "transB")}
            float_node = helper.make_node("Gemm", inputs, ["?"], name=node.name, **gemm)
            scale, zp = ins[7], ins[8]
            if not scale:  # a float output: no QuantizeLinear
                float_node.output[0] = node.output[0]
                return [*out, float_node]
        float_node.output[0] = self.q(node, scale, zp, out)
        quantize = out.pop()
        return [*out, float_node, quantize]


def _native_weight(consts: dict[str, np.ndarray], node: onnx.NodeProto) -> bool:
    """A QLinearConv/QLinearMatMul the importer reads directly: an int8 weight constant of
    zero point 0 (others are rewritten, so their weights take the DequantizeLinear path)."""
    w = consts.get(node.input[3]) if len(node.input) > 3 else None
    zp = consts.get(node.input[5]) if len(node.input) > 5 and node.input[5] else None
    if w is None or w.dtype != np.int8:
        return False
    return zp is None or not np.any(zp)


def _rewritten(consts: dict[str, np.ndarray], node: onnx.NodeProto) -> bool:
    if node.domain == _MS:
        return node.op_type in REWRITTEN
    if node.domain in ("", "ai.onnx") and node.op_type in ("QLinearConv", "QLinearMatMul"):
        return not _native_weight(consts, node)
    return False


def rewrite(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` (modified in place and returned) with every ``com.microsoft`` op of
    :data:`REWRITTEN` - and every QLinearConv/QLinearMatMul whose weight is not int8 with zero
    point 0 - as DequantizeLinear -> float op -> QuantizeLinear; other nodes as they are. A
    model with none of them is returned unchanged."""
    g = RewriteGraph(proto)
    if not any(_rewritten(g.consts, n) for n in g.nodes):
        return proto
    r = _Rewriter(g)
    nodes: list[onnx.NodeProto] = []
    for node in g.nodes:
        nodes += r.node(node) if _rewritten(g.consts, node) else [node]
    g.nodes = nodes
    proto = g.commit()
    if not any(n.domain == _MS for n in proto.graph.node):
        kept = [o for o in proto.opset_import if o.domain != _MS]
        del proto.opset_import[:]
        proto.opset_import.extend(kept)
    return proto

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
from onnx import helper, numpy_helper

from .errors import CompileError

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
    def __init__(self, proto: onnx.ModelProto) -> None:
        self.proto = proto
        self.inits = {t.name: t for t in proto.graph.initializer}
        self.used = {v for n in proto.graph.node for v in (*n.input, *n.output)} | set(self.inits)
        self.new_inits: list[onnx.TensorProto] = []

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name

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

    def attrs(self, node: onnx.NodeProto, drop: tuple[str, ...] = ()) -> dict[str, Any]:
        return {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name not in drop}

    def const(self, node: onnx.NodeProto, value: str, what: str) -> np.ndarray:
        if value not in self.inits:
            raise CompileError(node.name, node.op_type, f"{what} '{value}' must be an initializer")
        return numpy_helper.to_array(self.inits[value])

    def add_init(self, base: str, array: np.ndarray) -> str:
        name = self.fresh(base)
        self.new_inits.append(numpy_helper.from_array(array, name))
        return name

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
        else:  # QGemm: A, a_scale, a_zp, B, b_scale, b_zp, C (int32), y_scale, y_zp
            attrs = self.attrs(node)
            if attrs.get("transA", 0):
                raise CompileError(node.name, op, "transA=1 is not supported", "transA=0")
            trans_b = int(attrs.get("transB", 0))
            a = self.dq(node, ins[0], ins[1], ins[2], out)
            b_scale = self.const(node, ins[4], "b_scale")
            b_inputs = [ins[3], ins[4]] + ([ins[5]] if ins[5] else [])
            b = self.fresh(f"{ins[3]}_dequantized")
            axis: dict[str, Any] = {"axis": 0 if trans_b else 1} if b_scale.size > 1 else {}
            out.append(
                helper.make_node(
                    "DequantizeLinear", b_inputs, [b], name=self.fresh(f"{b}_dq"), **axis
                )
            )
            inputs = [a, b]
            if ins[6]:
                a_scale = self.const(node, ins[1], "a_scale").astype(np.float64)
                c_scale = (a_scale.reshape(-1)[0] * b_scale.astype(np.float64)).astype(np.float32)
                c_scale_name = self.add_init(f"{ins[6]}_scale", c_scale.reshape(-1))
                c = self.fresh(f"{ins[6]}_dequantized")
                c_axis: dict[str, Any] = {"axis": 0} if c_scale.size > 1 else {}
                zeros = np.zeros(c_scale.size if c_scale.size > 1 else (), np.int32)
                c_zero = self.add_init(f"{ins[6]}_zero_point", zeros)
                out.append(
                    helper.make_node(
                        "DequantizeLinear",
                        [ins[6], c_scale_name, c_zero],
                        [c],
                        name=self.fresh(f"{c}_dq"),
                        **c_axis,
                    )
                )
                inputs.append(c)
            gemm = {k: v for k, v in attrs.items() if k in ("alpha", "transB")}
            float_node = helper.make_node("Gemm", inputs, ["?"], name=node.name, **gemm)
            scale, zp = ins[7], ins[8]
            if not scale:  # a float output: no QuantizeLinear
                float_node.output[0] = node.output[0]
                return [*out, float_node]
        float_node.output[0] = self.q(node, scale, zp, out)
        quantize = out.pop()
        return [*out, float_node, quantize]


def rewrite(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` (modified in place and returned) with every ``com.microsoft`` op of
    :data:`REWRITTEN` as DequantizeLinear -> float op -> QuantizeLinear; other nodes as they
    are. A model with none of them is returned unchanged."""
    if not any(n.domain == _MS and n.op_type in REWRITTEN for n in proto.graph.node):
        return proto
    r = _Rewriter(proto)
    nodes: list[onnx.NodeProto] = []
    for node in proto.graph.node:
        if node.domain == _MS and node.op_type in REWRITTEN:
            nodes += r.node(node)
        else:
            nodes.append(node)
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    proto.graph.initializer.extend(r.new_inits)
    if not any(n.domain == _MS for n in proto.graph.node):
        kept = [o for o in proto.opset_import if o.domain != _MS]
        del proto.opset_import[:]
        proto.opset_import.extend(kept)
    return proto

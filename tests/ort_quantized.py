"""Models quantized by onnxruntime's own tool, as users make them, for the quantized-import tests.

:func:`quantize` runs ``onnxruntime.quantization.quantize_static`` with a seeded calibration
reader on one of the project's small float models - the zoo CNN, or :func:`branchy_net` (conv,
residual add, concat, max/average/global pooling, Gemm, Sigmoid, LeakyRelu) - in QDQ or
QOperator format with uint8 (onnxruntime's default) or asymmetric int8 activations.
:func:`code_agreement` compares our integer reference with onnxruntime's run of the quantized
model code by code, at every tensor the model quantizes.
"""

from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_static,
)
from onnxruntime.quantization.shape_inference import quant_pre_process

from arch.reference import evaluate, quantize_input, zero_point

VARIANTS = {
    "qdq-uint8": (QuantFormat.QDQ, QuantType.QUInt8),
    "qdq-int8": (QuantFormat.QDQ, QuantType.QInt8),
    "qop-uint8": (QuantFormat.QOperator, QuantType.QUInt8),
    "qop-int8": (QuantFormat.QOperator, QuantType.QInt8),
}


def reference_session(model: str | bytes) -> ort.InferenceSession:
    """onnxruntime's run of a quantized model as its operators define it: basic graph
    optimizations only. The extended level fuses QDQ groups into int8 kernels whose u8s8 path
    saturates 16-bit sums on x86 CPUs without VNNI (seen on an AVX2-only AMD EPYC: codes 3 off),
    so their results would depend on the machine the test runs on."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def u8s8_kernels_exact() -> bool:
    """Whether onnxruntime's u8s8 integer kernels (QLinearConv, QLinearMatMul of uint8
    activations and int8 weights) compute exact int32 sums here: not on x86 CPUs without VNNI,
    whose 16-bit pair sums saturate."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return True
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    return "vnni" in flags


def reference_model(model: onnx.ModelProto, variant: str, directory: Path, **options) -> Path:
    """The quantized model whose onnxruntime run is the reference for ``quantize(model, variant,
    directory, **options)``: that model itself, but for QOperator with uint8 activations its QDQ
    sibling (the same calibration, so the same scales and zero points), whose operators
    onnxruntime runs as the ONNX spec defines them. Its QLinearConv / QLinearMatMul u8s8 kernels
    saturate 16-bit sums on x86 CPUs without VNNI (outputs 3 codes off on an AVX2-only AMD EPYC),
    so they are no reference on every machine."""
    return quantize(model, "qdq-uint8" if variant == "qop-uint8" else variant, directory, **options)


def _model(nodes, name: str, x_shape: list, y_shape: list, inits) -> onnx.ModelProto:
    """An opset-13, IR-8 model of ``nodes`` from input ``x`` to output ``y``, checked."""
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def branchy_net(seed: int = 0, channels: int = 8, size: int = 12) -> onnx.ModelProto:
    """conv+relu, conv, residual add+relu, 1x1 conv, concat, [leaky relu, padded 3x3 average
    pool]; max pool, global average pool, flatten, Gemm, Sigmoid."""
    rng = np.random.default_rng(seed)
    inits = []

    def w(name: str, *shape: int, scale: float | None = None) -> str:
        fan = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        a = rng.standard_normal(shape) * (scale or 1 / np.sqrt(fan))
        inits.append(numpy_helper.from_array(a.astype(np.float32), name))
        return name

    node = helper.make_node
    nodes = [
        node("Conv", ["x", w("w1", 16, channels, 3, 3), w("b1", 16, scale=0.1)], ["c1"],
             pads=[1, 1, 1, 1], name="conv1"),
        node("Relu", ["c1"], ["r1"], name="relu1"),
        node("Conv", ["r1", w("w2", 16, 16, 3, 3), w("b2", 16, scale=0.1)], ["c2"],
             pads=[1, 1, 1, 1], name="conv2"),
        node("Add", ["c2", "r1"], ["a"], name="add"),
        node("Relu", ["a"], ["r2"], name="relu2"),
        node("Conv", ["r2", w("w3", 16, 16, 1, 1), w("b3", 16, scale=0.1)], ["c3"], name="conv3"),
        node("LeakyRelu", ["c3"], ["l3"], alpha=0.1, name="leaky"),
        node("AveragePool", ["l3"], ["p3"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
             count_include_pad=1, name="avgpool"),
        node("Concat", ["r2", "p3"], ["cat"], axis=1, name="concat"),
        node("MaxPool", ["cat"], ["mp"], kernel_shape=[2, 2], strides=[2, 2], name="maxpool"),
        node("GlobalAveragePool", ["mp"], ["gap"], name="gap"),
        node("Flatten", ["gap"], ["f"], name="flatten"),
        node("Gemm", ["f", w("wf", 10, 32), w("bf", 10, scale=0.1)], ["g"], transB=1, name="fc"),
        node("Sigmoid", ["g"], ["y"], name="sigmoid"),
    ]  # fmt: skip
    return _model(nodes, "branchy", [1, channels, size, size], [1, 10], inits)


class SeededReader(CalibrationDataReader):
    """``count`` seeded standard-normal inputs of ``shape`` for ``name``."""

    def __init__(self, name: str, shape: tuple[int, ...], count: int = 8, seed: int = 1) -> None:
        rng = np.random.default_rng(seed)
        data = [{name: rng.standard_normal(shape).astype(np.float32)} for _ in range(count)]
        self.items = iter(data)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.items, None)


def quantize(
    model: onnx.ModelProto,
    variant: str,
    directory: Path,
    *,
    preprocess: bool = False,
    weights: QuantType = QuantType.QInt8,
    per_channel: bool = False,
    weight_symmetric: bool = True,
) -> Path:
    """``model`` quantized by onnxruntime (``variant``: a key of :data:`VARIANTS`; activations
    asymmetric; weights int8 symmetric per tensor unless told), as a file in ``directory``.
    ``preprocess``: first onnxruntime's recommended ``quant_pre_process`` (which folds
    BatchNormalization into the convolutions, so no rounding point sits between a conv and its
    BatchNormalization)."""
    fmt, activations = VARIANTS[variant]
    source, target = directory / "float.onnx", directory / f"{variant}.onnx"
    onnx.save(model, source)
    if preprocess:
        prepared = directory / "float-preprocessed.onnx"
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
        source = prepared
    (x,) = model.graph.input
    shape = tuple(d.dim_value for d in x.type.tensor_type.shape.dim)
    quantize_static(
        str(source),
        str(target),
        SeededReader(x.name, shape),
        quant_format=fmt,
        activation_type=activations,
        weight_type=weights,
        per_channel=per_channel,
        extra_options={"ActivationSymmetric": False, "WeightSymmetric": weight_symmetric},
    )
    return target


def code_agreement(
    path: Path, graph, source: onnx.ModelProto, x: np.ndarray
) -> dict[str, dict[str, float]]:
    """Per quantized tensor of the model that our reference graph also holds: the largest code
    difference and the fraction of equal codes between our integer reference and onnxruntime's
    run of the quantized model at ``path`` (uint8 codes shifted to int8). ``graph`` is the
    quantized reference graph (an executable's), ``source`` the model it was imported as
    (``Compiled.source``): our tensors are named after the float values it quantizes (the
    inputs of its QuantizeLinear nodes; a QOperator op ends in one writing the op's output)."""
    model = onnx.load(str(path))
    inits = {t.name: numpy_helper.to_array(t) for t in source.graph.initializer}
    quantized = {}
    for node in source.graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] in graph.tensors:
            zp = inits.get(node.input[2]) if len(node.input) > 2 else None
            elem = TensorProto.INT8 if zp is not None and zp.dtype == np.int8 else TensorProto.UINT8
            quantized[node.input[0]] = (node.output[0], elem)
    del model.graph.output[:]
    for value, elem in quantized.values():
        model.graph.output.append(helper.make_tensor_value_info(value, elem, None))
    session = reference_session(model.SerializeToString())
    (feed,) = [i.name for i in session.get_inputs()]
    fetched = session.run([v for v, _ in quantized.values()], {feed: x})
    theirs = dict(zip(quantized, fetched, strict=True))
    t = graph.tensors[graph.inputs[0]]
    ours = evaluate(graph, quantize_input(x, t.scale, zero_point(graph, graph.inputs[0])))
    result = {}
    for name, codes in theirs.items():
        if name not in ours:
            continue
        shift = 128 if codes.dtype == np.uint8 else 0
        diff = np.abs(
            ours[name].astype(np.int64).reshape(-1) - (codes.astype(np.int64) - shift).reshape(-1)
        )
        result[name] = {
            "max_code_diff": int(diff.max()),
            "equal": float(np.mean(diff == 0)),
            "count": int(diff.size),
        }
    return result


def host_sandwich_net(seed: int = 0, size: int = 10) -> onnx.ModelProto:
    """conv -> LRN (no accelerator mapping: the host) -> conv+relu -> its square (Mul: the
    host) -> Gemm -> Softmax (the host): device and host steps passing asymmetric tensors."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array((rng.standard_normal(s) / np.sqrt(np.prod(s[1:]))).astype(
            np.float32), n)
        for n, s in (("w1", (16, 4, 3, 3)), ("w2", (16, 16, 3, 3)), ("wf", (10, 16 * size * size)))
    ]  # fmt: skip
    node = helper.make_node
    nodes = [
        node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        node("LRN", ["c1"], ["n1"], size=3, name="lrn"),
        node("Conv", ["n1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        node("Relu", ["c2"], ["r2"], name="relu2"),
        node("Mul", ["r2", "r2"], ["sq"], name="square"),
        node("Flatten", ["sq"], ["f"], name="flatten"),
        node("Gemm", ["f", "wf"], ["g"], transB=1, name="fc"),
        node("Softmax", ["g"], ["y"], axis=1, name="softmax"),
    ]
    return _model(nodes, "sandwich", [1, 4, size, size], [1, 10], inits)


def pooled_activation_net(seed: int = 0, size: int = 8) -> onnx.ModelProto:
    """conv -> max pool -> Sigmoid (no conv before it: a one-input scale layer with its table)
    -> 1x1 conv -> Gemm: an activation of an asymmetric tensor outside a conv's store."""
    rng = np.random.default_rng(seed)
    inits = [
        numpy_helper.from_array((rng.standard_normal(s) / np.sqrt(np.prod(s[1:]))).astype(
            np.float32), n)
        for n, s in (("w1", (16, 4, 3, 3)), ("w2", (16, 16, 1, 1)), ("wf", (10, 16 * 4 * 4)))
    ]  # fmt: skip
    node = helper.make_node
    nodes = [
        node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        node("MaxPool", ["c1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="maxpool"),
        node("Sigmoid", ["p1"], ["s1"], name="sigmoid"),
        node("Conv", ["s1", "w2"], ["c2"], name="conv2"),
        node("Flatten", ["c2"], ["f"], name="flatten"),
        node("Gemm", ["f", "wf"], ["y"], transB=1, name="fc"),
    ]
    return _model(nodes, "pooled_activation", [1, 4, size, size], [1, 10], inits)

"""Elementwise activations as STORE lookup tables: each ONNX activation right after a Conv,
Gemm or Add fuses into that layer (``act == "table"``), runs bit-exact on the ISA simulator and
close to fp32 onnxruntime; the table the compiler builds agrees with onnxruntime's own fp32
evaluation of the op on the 256 dequantized codes; an activation with no store to sit in goes
to the host, named."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from arch.config import PRESETS
from arch.executable import HostStep
from arch.reference import dequantize, quantize_input
from compiler.activations import make_table
from compiler.compile import compile_model
from compiler.onnx import load_onnx
from sim.quality.accuracy import compare_fp32
from sim.runtime.run import run
from tests.unit.front.test_partition import _saved, conv, model_of

TINY = PRESETS["tiny"]

#: (ONNX op, attrs, opset): every op the importer turns into a table.
ACTIVATIONS = [
    ("Sigmoid", {}, 17),
    ("Tanh", {}, 17),
    ("HardSigmoid", {"alpha": 0.25, "beta": 0.4}, 17),
    ("HardSwish", {}, 17),
    ("LeakyRelu", {"alpha": 0.2}, 17),
    ("Elu", {"alpha": 0.7}, 17),
    ("Selu", {}, 17),
    ("Celu", {"alpha": 1.5}, 17),
    ("Softplus", {}, 17),
    ("Softsign", {}, 17),
    ("Mish", {}, 18),
    ("Gelu", {}, 20),
    ("Gelu", {"approximate": "tanh"}, 20),
]


def _activation_nodes(op: str, attrs: dict, x: str, y: str) -> tuple[list, dict]:
    if op == "SiLU":  # as exporters write it: x * Sigmoid(x)
        gate = helper.make_node("Sigmoid", [x], [f"{y}.gate"], name=f"{y}.sigmoid")
        return [gate, helper.make_node("Mul", [x, f"{y}.gate"], [y], name=f"{y}.mul")], {}
    if op == "ClipRange":
        node = helper.make_node("Clip", [x, f"{y}.lo", f"{y}.hi"], [y], name=f"{y}.clip")
        return [node], {f"{y}.lo": np.float32(-0.5), f"{y}.hi": np.float32(1.25)}
    return [helper.make_node(op, [x], [y], name=f"{y}.act", **attrs)], {}


def act_model(op: str, attrs: dict, opset: int, seed: int) -> onnx.ModelProto:
    """conv -> act -> conv -> act -> FC -> act (the FC's table: a gemm's)."""
    rng = np.random.default_rng(seed)
    c1, i1 = conv("c1", "x", "a", 3, 8, rng)
    c2, i2 = conv("c2", "a2", "b", 8, 8, rng)
    nodes, inits = [c1], {**i1, **i2}
    for x, y, extra in (("a", "a2", [c2]), ("b", "b2", [])):
        more, consts = _activation_nodes(op, attrs, x, y)
        nodes += more + extra
        inits |= consts
    nodes += [
        helper.make_node("Flatten", ["b2"], ["f"], name="flat"),
        helper.make_node("Gemm", ["f", "fc.w"], ["fc"], name="fc"),
    ]
    more, consts = _activation_nodes(op, attrs, "fc", "y")
    inits |= consts | {"fc.w": rng.normal(0, 0.1, (8 * 10 * 10, 4)).astype(np.float32)}
    return model_of(nodes + more, inits, [1, 3, 10, 10], opset=opset)


CASES = [*ACTIVATIONS, ("SiLU", {}, 17), ("ClipRange", {}, 17)]


@pytest.mark.parametrize(("op", "attrs", "opset"), CASES, ids=lambda v: str(v) if v else "")
def test_activation_is_a_table_on_the_array(op, attrs, opset, tmp_path) -> None:
    model = act_model(op, attrs, opset, seed=len(op))
    compiled = compile_model(_saved(model, tmp_path), TINY)
    exe = compiled.executable
    assert [s for s in exe.steps if isinstance(s, HostStep)] == []
    acts = {n.name: n.attrs.get("act") for n in exe.reference.nodes}
    assert acts["c1"] == acts["c2"] == acts["fc"] == "table", acts
    x = np.random.default_rng(1).standard_normal((1, 3, 10, 10)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert compare_fp32(compiled.source, exe.reference, x)["cosine_vs_fp32"] > 0.99


def _onnxruntime_table(op: str, attrs: dict, opset: int, s_in: float, s_out: float) -> np.ndarray:
    """The table as onnxruntime computes the op (fp32) on the dequantized codes."""
    nodes, consts = _activation_nodes(op, attrs, "x", "y")
    inits = {k: np.asarray(v) for k, v in consts.items()}
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256])],
        initializer=[onnx.numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    codes = np.arange(-128, 128).astype(np.int8)
    (y,) = session.run(["y"], {"x": dequantize(codes, s_in)})
    return quantize_input(y, s_out)


@pytest.mark.parametrize(("op", "attrs", "opset"), CASES, ids=lambda v: str(v) if v else "")
def test_table_agrees_with_onnxruntime(op, attrs, opset) -> None:
    """The table the compiler makes for the imported node is onnxruntime's fp32 result on the
    dequantized codes, quantized - up to one code where fp32 and float64 round a value near a
    half step differently - for input scales that saturate and that do not."""
    nodes, consts = _activation_nodes(op, attrs, "x", "y")
    model = model_of(nodes, consts, [1, 8], opset=opset)
    [node] = [n for n in load_onnx(model).nodes if n.op == "table"]
    rng = np.random.default_rng(len(op))
    for s_in in (0.01, 0.05, float(rng.uniform(0.02, 0.2))):
        s_out = float(rng.uniform(0.005, 0.05))
        got = make_table(node.attrs["function"], node.attrs["args"], s_in, s_out)
        want = _onnxruntime_table(op, attrs, opset, s_in, s_out)
        diff = np.abs(got.astype(int) - want.astype(int))
        assert diff.max() <= 1, (s_in, np.flatnonzero(diff > 1)[:5])
        assert (diff == 0).mean() > 0.97, (s_in, int((diff > 0).sum()))
        assert len(np.unique(got)) > 8  # the scales exercise the function, not one constant


def test_activation_without_a_store_is_a_table_layer(tmp_path) -> None:
    """A Sigmoid after a max pool (no requantizing store to hold the table) and a Tanh whose
    input another node also reads become table layers of their own (one-input ``scale``: an
    ACCUM copy, then a STORE through the table); nothing runs on the host."""
    rng = np.random.default_rng(5)
    c1, i1 = conv("c1", "x", "a", 3, 8, rng)
    c2, i2 = conv("c2", "p", "b", 8, 8, rng)
    nodes = [
        c1,
        helper.make_node(
            "MaxPool", ["a"], ["p0"], name="pool", kernel_shape=[2, 2], strides=[2, 2]
        ),
        helper.make_node("Sigmoid", ["p0"], ["p"], name="sig"),
        c2,
        helper.make_node("Tanh", ["b"], ["t"], name="tanh"),
        helper.make_node("Add", ["t", "b"], ["y"], name="add"),
    ]
    model = model_of(nodes, {**i1, **i2}, [1, 3, 8, 8])
    compiled = compile_model(_saved(model, tmp_path), TINY)
    exe = compiled.executable
    assert not [s for s in exe.steps if isinstance(s, HostStep)]
    nodes_by_name = {n.name: n for n in exe.reference.nodes}
    for name in ("sig", "tanh"):
        node = nodes_by_name[name]
        assert (node.op, node.attrs["act"], len(node.inputs)) == ("scale", "table", 1)
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert compare_fp32(compiled.source, exe.reference, x)["cosine_vs_fp32"] > 0.99

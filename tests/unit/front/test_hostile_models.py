"""Models whose numbers mean nothing are refused, naming what is wrong, never run to a silent
exit 0 or a layer mismatch: quantization scales no placement can use (denormal, 1e38, a weight
scale of 0, a Q/DQ pair of two scales), weights too large for an int8 scale and float32 that
overflows in calibration (named: the initializer, the node), a host op that draws random
numbers, and host ops whose fp32 output is NaN or infinite for the run's input (Log or Sqrt of
a negative, Reciprocal of 0), counted against numpy's own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from arch.config import PRESETS
from arch.host_runtime import HostOutputNotFinite
from arch.ops.quant import dequantize, zero_point
from arch.reference import evaluate_node, quantize_input
from compiler.compile import compile_model
from compiler.errors import CompileError
from sim.runtime.run import run
from tests.unit.run.test_cli_errors import in_process

RNG = np.random.default_rng(44)
W = RNG.normal(0, 0.3, (16, 16)).astype(np.float32)


def model(nodes, inits, path: Path) -> Path:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def qdq_model(path: Path, act_scale: float, w_scale: float, dq_scale: float) -> Path:
    """x -> Q(s) -> DQ(ds) -> MatMul(DQ(wq, ws))."""
    wq = RNG.integers(-127, 128, (16, 16)).astype(np.int8)
    inits = {
        "s": np.float32(act_scale),
        "ds": np.float32(dq_scale),
        "z": np.int8(0),
        "wq": wq,
        "ws": np.float32(w_scale),
        "wz": np.int8(0),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q_x"),
        helper.make_node("DequantizeLinear", ["xq", "ds", "z"], ["xd"], name="dq_x"),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], name="dq_w"),
        helper.make_node("MatMul", ["xd", "w"], ["y"], name="fc"),
    ]
    return model(nodes, inits, path)


@pytest.mark.parametrize(
    ("act", "weight", "dq", "names"),
    [
        (1e-40, 0.01, 1e-40, ("q_x", "y_scale 's'", "9.99995e-41")),  # float32(1e-40): denormal
        (1e38, 0.01, 1e38, ("q_x", "y_scale 's'", "1e+38")),
        (0.05, 0.0, 0.05, ("dq_w", "x_scale 'ws'", "is 0,")),
        (0.05, 0.01, 0.07, ("dq_x", "0.05", "0.07", "one scale per tensor")),
    ],
)
def test_unusable_scales_are_refused_naming_the_scale(act, weight, dq, names, tmp_path) -> None:
    path = qdq_model(tmp_path / "q.onnx", act, weight, dq)
    with pytest.raises(CompileError) as caught:
        compile_model(path, PRESETS["tiny"])
    message = str(caught.value)
    assert "reads int8 codes" not in message and "on the host" not in message, message
    for name in names:
        assert name in message, (name, message)


#: The largest weight magnitude whose int8 scale (magnitude / 127) stays within float32's
#: largest / 65536 (so a 16-bit code times the scale is finite).
FLOAT32_MAX = float(np.finfo(np.float32).max)
WEIGHT_LIMIT = 127 * FLOAT32_MAX / 65536


@pytest.mark.parametrize("value", [3e38, -3e38, 1e36])
def test_a_weight_too_large_for_an_int8_scale_is_named(value, tmp_path, capsys) -> None:
    """Once ``tensor 'y' has a bad scale inf`` (the product overflowed): now the initializer,
    its largest magnitude and where it is, and the bound; exit 2."""
    rng = np.random.default_rng(abs(int(np.log10(abs(value)))))
    w = rng.normal(0, 0.3, (16, 16)).astype(np.float32)
    at = [int(i) for i in rng.integers(0, 16, 2)]
    w[tuple(at)] = value
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")]
    path = model(nodes, {"w": w}, tmp_path / "m.onnx")
    result = in_process(capsys, "--model", str(path), "--out", str(tmp_path / "o"))
    big = abs(float(np.float32(value)))
    assert (result.returncode, result.stderr.splitlines()) == (2, [
        f"error: node 'fc' (MatMul): initializer 'w' has largest magnitude {big:.3g} (at index "
        f"{at}): its int8 scale {big / 127:.3g} is beyond the usable {FLOAT32_MAX / 65536:.3g}; "
        f"supported: finite weights of magnitude up to {WEIGHT_LIMIT:.3g}"
    ])  # fmt: skip


def test_a_weight_just_within_the_bound_passes_the_weight_check(tmp_path) -> None:
    w = W.copy()
    w[2, 9] = np.float32(WEIGHT_LIMIT * 0.99)
    path = model(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")], {"w": w}, tmp_path / "m.onnx"
    )
    with pytest.raises(CompileError) as caught:  # (its rescale is out of range: refused later)
        compile_model(path, PRESETS["tiny"])
    assert "initializer" not in str(caught.value) and "rescale" in str(caught.value)


def test_float32_overflow_in_calibration_names_the_node(tmp_path, capsys) -> None:
    """Two weights within the bound whose product overflows float32: the node whose output
    reaches inf on the calibration inputs, exit 2 (once ``tensor 'y' has a bad scale inf``)."""
    w1, w2 = W.copy(), W.copy()
    w1[:, 2] = w2[2, :] = np.float32(WEIGHT_LIMIT * 0.9)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("MatMul", ["h", "w2"], ["y"], name="fc2"),
    ]
    path = model(nodes, {"w1": w1, "w2": w2}, tmp_path / "m.onnx")
    result = in_process(capsys, "--model", str(path), "--out", str(tmp_path / "o"))
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("error: node 'fc2' (gemm): its output 'y' reaches inf "), line
    assert "float32 overflows" in line and "supported: " in line, line


def test_good_scales_still_compile(tmp_path: Path) -> None:
    compile_model(qdq_model(tmp_path / "q.onnx", 0.05, 0.01, 0.05), PRESETS["tiny"])


def test_a_random_host_op_is_refused_at_compile_time(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
        helper.make_node("RandomNormalLike", ["h"], ["r"], name="noise"),
        helper.make_node("Add", ["h", "r"], ["h2"], name="add_noise"),
        helper.make_node("MatMul", ["h2", "w"], ["y"], name="fc2"),
    ]
    path = model(nodes, {"w": W}, tmp_path / "r.onnx")
    with pytest.raises(CompileError, match=r"node 'noise' \(RandomNormalLike\): draws random"):
        compile_model(path, PRESETS["tiny"])


def host_op_model(op: str, path: Path) -> Path:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
        helper.make_node(op, ["h"], ["y"], name=f"the_{op.lower()}"),
    ]
    return model(nodes, {"w": W}, path)


@pytest.mark.parametrize(
    ("op", "function"),
    [("Log", np.log), ("Sqrt", np.sqrt), ("Reciprocal", lambda v: 1 / v)],
)
def test_non_finite_host_outputs_are_refused(op, function, tmp_path) -> None:
    exe = compile_model(host_op_model(op, tmp_path / "m.onnx"), PRESETS["tiny"]).executable
    x = RNG.normal(0, 1, (1, 16)).astype(np.float32)
    if op == "Reciprocal":
        x = np.zeros((1, 16), np.float32)  # (x @ w = 0: 1/0 everywhere)
    # numpy's count on what the host reads: the MatMul layer's int8 output, dequantized
    with np.errstate(all="ignore"):
        expected = np.count_nonzero(~np.isfinite(function(_host_input(exe, x))))
    assert expected > 0
    with pytest.raises(HostOutputNotFinite) as caught:
        run(exe, x, "isa")
    message = str(caught.value)
    assert f"host step the_{op.lower()} ({op}) gives {expected} of 16 values" in message


def _host_input(exe, x: np.ndarray) -> np.ndarray:
    """The fp32 values the host step reads: the integer reference's MatMul codes, dequantized."""
    graph = exe.reference
    values = {graph.inputs[0]: quantize_input(x, exe.input.scale or 1.0, exe.input.zero_point)}
    for node in graph.nodes:
        if node.op == "host":
            [source] = node.inputs
            return dequantize(
                values[source], graph.tensors[source].scale, zero_point(graph, source)
            )
        values[node.output] = evaluate_node(graph, node, [values[i] for i in node.inputs])
    raise AssertionError("no host step")


def test_finite_host_outputs_run(tmp_path: Path) -> None:
    """The same Log on an input where every value it reads is positive runs bit-exact."""
    positive = np.abs(W) + 0.01
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
        helper.make_node("Log", ["h"], ["y"], name="the_log"),
    ]
    path = model(nodes, {"w": positive}, tmp_path / "p.onnx")
    exe = compile_model(path, PRESETS["tiny"]).executable
    x = np.abs(RNG.normal(0, 1, (1, 16))).astype(np.float32) + 0.5
    result = run(exe, x, "isa")
    assert result.first_mismatch is None
    [output] = result.outputs.values()
    assert np.isfinite(output).all()

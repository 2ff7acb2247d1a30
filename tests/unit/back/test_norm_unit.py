"""LayerNormalization on the norm unit (configs with norm_unit): the compiler's layer_norm
lowered to NORM + STORE, on the ISA simulator bit-exact against the integer reference
(arch.norm_ops through arch.ops.norm) and close to onnxruntime's fp32; without the unit (the
default configs) the same graphs run LayerNorm on the host as before."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from arch import norm_ops
from arch.config import PRESETS
from arch.ops import OP_SPECS
from compiler.compile import compile_graph, compile_model
from compiler.errors import Unplaceable
from compiler.frontend import compile_front
from sim.runtime.run import run
from tests.onnx_graphs import make_model
from zoo.transformers import bert


def _with_norm(config: str) -> object:
    return dataclasses.replace(PRESETS[config], norm_unit=True)


def _ln_model(tokens: int, channels: int, seed: int, linear: bool) -> onnx.ModelProto:
    """x (1, T, C) [-> MatMul] -> LayerNormalization (random gamma, beta) [-> MatMul] -> y."""
    rng = np.random.default_rng(seed)
    inits = {
        "gamma": (1.0 + 0.5 * rng.standard_normal(channels)).astype(np.float32),
        "beta": (0.3 * rng.standard_normal(channels)).astype(np.float32),
    }
    nodes = []
    src = "x"
    if linear:
        inits["w1"] = (rng.standard_normal((channels, channels)) / channels**0.5).astype(np.float32)
        inits["w2"] = (rng.standard_normal((channels, channels)) / channels**0.5).astype(np.float32)
        nodes.append(helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"))
        src = "h"
    out = "n" if linear else "y"
    nodes.append(
        helper.make_node(
            "LayerNormalization", [src, "gamma", "beta"], [out], name="ln", axis=-1, epsilon=1e-5
        )
    )
    if linear:
        nodes.append(helper.make_node("MatMul", ["n", "w2"], ["y"], name="fc2"))
    return make_model(nodes, [1, tokens, channels], inits)


def _run(model: onnx.ModelProto, config, x: np.ndarray, tmp_path, calibration=None):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    exe = compile_model(path, config, calibration=calibration).executable
    return run(exe, x, "isa")


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _fp32(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize(
    ("config", "tokens", "channels", "linear"),
    [
        ("default", 20, 64, True),  # 20 tokens: two tiles on no multiple of the array
        ("default", 9, 40, False),  # 40 channels: 3 lines, 8 lanes in the last
        ("tiny", 7, 24, True),  # rows of 6 lines on the 4x4 array
        ("tiny", 5, 7, False),  # one line and 3 lanes of a second
    ],
)
def test_layer_norm_on_the_norm_unit(config, tokens, channels, linear, tmp_path):
    model = _ln_model(tokens, channels, seed=channels, linear=linear)
    rng = np.random.default_rng(tokens)
    # large and negative values: an offset and a spread per token
    x = (
        rng.standard_normal((1, tokens, channels)) * rng.uniform(0.5, 8.0, (1, tokens, 1))
        - rng.uniform(-20.0, 20.0, (1, tokens, 1))
    ).astype(np.float32)
    result = _run(model, _with_norm(config), x, tmp_path, calibration=[x])
    assert result.bit_exact, result.first_mismatch
    norms = [la for la in result.layers if la.op == "layer_norm"]
    assert [la.device for la in norms] == ["accel"]
    assert norms[0].cycles > 0
    assert all(la.device == "accel" for la in result.layers)
    assert _cosine(result.outputs["y"], _fp32(model, x)) > 0.995


def test_all_equal_rows(tmp_path):
    """Rows whose every value is equal (variance 0): eps alone keeps the reciprocal square root
    finite; the output is beta (its codes), bit-exact."""
    model = _ln_model(6, 24, seed=3, linear=False)
    rng = np.random.default_rng(4)
    x = np.repeat(rng.uniform(-3.0, 3.0, (1, 6, 1)), 24, axis=2).astype(np.float32)
    x[0, :3] = rng.standard_normal((3, 24))  # half the rows differ, to calibrate a range
    result = _run(model, _with_norm("tiny"), x, tmp_path, calibration=[x])
    assert result.bit_exact, result.first_mismatch
    expected = _fp32(model, x)[0, 3:]  # beta, for the all-equal rows
    scale = np.abs(expected).max() / 100.0
    np.testing.assert_allclose(
        result.outputs["y"].reshape(6, 24)[3:], expected, atol=2 * scale + 0.02
    )


def test_without_the_unit_layer_norm_runs_on_the_host(tmp_path):
    """The default config has no norm unit: the LayerNorm is a host step, as before."""
    model = _ln_model(20, 64, seed=1, linear=True)
    x = np.random.default_rng(2).standard_normal((1, 20, 64)).astype(np.float32)
    result = _run(model, PRESETS["default"], x, tmp_path)
    assert result.bit_exact, result.first_mismatch
    assert [(la.op, la.device) for la in result.layers if la.name == "ln"] == [
        ("host:LayerNormalization", "host")
    ]


def test_rows_too_wide_for_param_go_to_the_host(tmp_path):
    """Rows whose two PARAM sets do not fit PARAM (tiny: 64 lines of 4) run on the host."""
    config = dataclasses.replace(_with_norm("tiny"), param_lines=32)
    model = _ln_model(3, 68, seed=5, linear=True)  # 17 lines per row: 34 PARAM lines
    x = np.random.default_rng(6).standard_normal((1, 3, 68)).astype(np.float32)
    result = _run(model, config, x, tmp_path)
    assert result.bit_exact, result.first_mismatch
    assert [(la.op, la.device) for la in result.layers if la.name == "ln"] == [
        ("host:LayerNormalization", "host")
    ]


@pytest.mark.parametrize(
    ("config", "tokens", "hidden", "heads"),
    [
        ("default", 20, 64, 2),  # rows of 20 scores: 2 lines, 4 lanes in the last
        ("tiny", 7, 16, 2),  # rows of 7 on the 4x4 array
    ],
)
def test_encoder_norms_and_softmax_on_the_norm_unit(config, tokens, hidden, heads, tmp_path):
    """A BERT-style encoder with the norm unit: every LayerNorm and attention Softmax is a
    device layer, bit-exact against the reference, and the output close to fp32."""
    model = bert(tokens=tokens, hidden=hidden, heads=heads, layers=1, mlp=2 * hidden, seed=3)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    result = _run(model, _with_norm(config), x, tmp_path)
    assert result.bit_exact, result.first_mismatch
    ops = [(la.op, la.device) for la in result.layers if la.op in ("layer_norm", "row_softmax")]
    # the embedding LayerNorm, then per block: attention's Softmax, two LayerNorms
    assert sorted(ops) == [("layer_norm", "accel")] * 3 + [("row_softmax", "accel")]
    assert not any(la.device == "host" and "Softmax" in la.op for la in result.layers)
    name = model.graph.output[0].name
    assert _cosine(result.outputs[name], _fp32_of(model, x)) > 0.99


def _fp32_of(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {model.graph.input[0].name: x})[0]


def test_row_softmax_reference_against_float():
    """The row_softmax reference (norm_ops' integer softmax, then the STORE's shift to 1/128)
    within one code of fp32 softmax rounded to 1/128: all-equal rows, large and negative
    codes, rows of one value and rows longer than a line."""
    rng = np.random.default_rng(11)
    s_in = 0.06
    rows = [
        np.full(20, 37),  # all equal: 1/20 each
        np.full(5, -128),
        np.array([127, -128, -128, 5]),  # one dominant value
        rng.integers(-128, 128, 40),
        rng.integers(-128, 128, 3),
        np.array([9]),  # one value: probability 1.0 saturates to 127
    ]
    for row in rows:
        node = SimpleNamespace(
            params={"k": np.array([norm_ops.softmax_params(s_in)])}, attrs={"causal": False}
        )
        codes = row.reshape(1, 1, 1, -1).astype(np.int8)
        got = OP_SPECS["row_softmax"].evaluate(SimpleNamespace(), node, [codes])
        z = row * s_in
        p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        want = np.clip(np.rint(128 * p), -128, 127)
        assert np.abs(got.ravel().astype(np.int64) - want).max() <= 1, (row, got, want)


def _decomposed_ln_model(tokens: int, channels: int, seed: int, opset: int) -> onnx.ModelProto:
    """x -> MatMul -> LayerNorm as ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div,
    Mul gamma, Add beta (older exporters) -> MatMul -> y."""
    rng = np.random.default_rng(seed)
    inits = {
        "w1": (rng.standard_normal((channels, channels)) / channels**0.5).astype(np.float32),
        "w2": (rng.standard_normal((channels, channels)) / channels**0.5).astype(np.float32),
        "two": np.array(2.0, np.float32),
        "eps": np.array(1e-5, np.float32),
        "gamma": (1.0 + 0.5 * rng.standard_normal(channels)).astype(np.float32),
        "beta": (0.3 * rng.standard_normal(channels)).astype(np.float32),
    }
    mean = {"axes": [-1]} if opset < 18 else {}
    axes_in = [] if opset < 18 else ["axes"]
    if opset >= 18:
        inits["axes"] = np.array([-1], np.int64)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("ReduceMean", ["h", *axes_in], ["mu"], name="mean", **mean),
        helper.make_node("Sub", ["h", "mu"], ["d"], name="sub"),
        helper.make_node("Pow", ["d", "two"], ["d2"], name="pow"),
        helper.make_node("ReduceMean", ["d2", *axes_in], ["var"], name="var", **mean),
        helper.make_node("Add", ["var", "eps"], ["ve"], name="add_eps"),
        helper.make_node("Sqrt", ["ve"], ["sd"], name="ln"),
        helper.make_node("Div", ["d", "sd"], ["nrm"], name="div"),
        helper.make_node("Mul", ["nrm", "gamma"], ["g"], name="mul"),
        helper.make_node("Add", ["g", "beta"], ["n"], name="add"),
        helper.make_node("MatMul", ["n", "w2"], ["y"], name="fc2"),
    ]
    return make_model(nodes, [1, tokens, channels], inits, opset=opset)


@pytest.mark.parametrize("opset", [13, 18])
def test_decomposed_layer_norm_is_one_node_on_the_norm_unit(opset, tmp_path):
    """The decomposed form is fused into one LayerNormalization: on the norm unit with it,
    one host step without it, bit-exact both ways and close to fp32."""
    model = _decomposed_ln_model(12, 32, seed=opset, opset=opset)
    x = np.random.default_rng(7).standard_normal((1, 12, 32)).astype(np.float32)
    fp32 = _fp32(model, x)
    norm = _run(model, _with_norm("default"), x, tmp_path)
    assert norm.bit_exact, norm.first_mismatch
    assert [la.device for la in norm.layers] == ["accel"] * 3
    assert _cosine(norm.outputs["y"], fp32) > 0.995
    host = _run(model, PRESETS["default"], x, tmp_path)
    assert host.bit_exact, host.first_mismatch
    assert [(la.op, la.device) for la in host.layers if la.device == "host"] == [
        ("host:LayerNormalization", "host")
    ]
    assert _cosine(host.outputs["y"], fp32) > 0.995


def _rms_model(tokens: int, channels: int, seed: int, reciprocal: bool) -> onnx.ModelProto:
    """x -> MatMul -> RMSNorm as exported (Pow 2, ReduceMean, Add eps, Sqrt, then Div, or
    Reciprocal and Mul, and Mul gamma) -> MatMul -> y, opset 13."""
    rng = np.random.default_rng(seed)
    inits = {
        "w1": (rng.standard_normal((channels, channels)) / channels**0.5).astype(np.float32),
        "w2": (rng.standard_normal((channels, channels)) / channels**0.5).astype(np.float32),
        "two": np.array(2.0, np.float32),
        "eps": np.array(1e-6, np.float32),
        "gamma": (1.0 + 0.5 * rng.standard_normal(channels)).astype(np.float32),
    }
    divide = [
        helper.make_node("Reciprocal", ["sd"], ["r"], name="recip"),
        helper.make_node("Mul", ["h", "r"], ["nrm"], name="times"),
    ]
    if not reciprocal:
        divide = [helper.make_node("Div", ["h", "sd"], ["nrm"], name="div")]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
        helper.make_node("Pow", ["h", "two"], ["h2"], name="pow"),
        helper.make_node("ReduceMean", ["h2"], ["ms"], name="mean", axes=[-1]),
        helper.make_node("Add", ["ms", "eps"], ["mse"], name="add_eps"),
        helper.make_node("Sqrt", ["mse"], ["sd"], name="rms"),
        *divide,
        helper.make_node("Mul", ["nrm", "gamma"], ["n"], name="mul"),
        helper.make_node("MatMul", ["n", "w2"], ["y"], name="fc2"),
    ]
    return make_model(nodes, [1, tokens, channels], inits, opset=13)


@pytest.mark.parametrize(("config", "reciprocal"), [("default", False), ("tiny", True)])
def test_rms_norm_on_the_norm_unit(config, reciprocal, tmp_path):
    """RMSNorm as exported is one rms_norm: on the norm unit bit-exact and close to fp32; on
    the host without it."""
    model = _rms_model(10, 24, seed=9, reciprocal=reciprocal)
    rng = np.random.default_rng(10)
    x = (rng.standard_normal((1, 10, 24)) * rng.uniform(0.2, 6.0, (1, 10, 1))).astype(np.float32)
    fp32 = _fp32(model, x)
    norm = _run(model, _with_norm(config), x, tmp_path, calibration=[x])
    assert norm.bit_exact, norm.first_mismatch
    assert [(la.op, la.device) for la in norm.layers if la.name == "rms"] == [("rms_norm", "accel")]
    assert _cosine(norm.outputs["y"], fp32) > 0.995
    host = _run(model, PRESETS[config], x, tmp_path, calibration=[x])
    assert host.bit_exact, host.first_mismatch
    assert [la.device for la in host.layers if la.name == "rms"] == ["host"]


@pytest.mark.parametrize(
    ("fixture", "config"),
    [
        ("encoder_default.onnx", "default"),
        ("encoder_legacy.onnx", "default"),
        ("encoder_causal.onnx", "default"),  # the causal mask's Add: NORM's causal flag
        ("encoder_causal.onnx", "tiny"),  # 1 KiB of ACT: 2 tiles of query rows (row0 12)
    ],
)
def test_torch_encoder_layer_has_no_host_step_with_the_norm_unit(fixture, config):
    """torch's exported nn.TransformerEncoderLayer (both exporters, and with a causal mask):
    LayerNorms and Softmax on the norm unit, so no host step at all; bit-exact and close to
    fp32."""
    path = Path(__file__).resolve().parents[2] / "fixtures" / "torch" / fixture
    model = onnx.load(path)
    x = np.random.default_rng(0).standard_normal((1, 20, 64)).astype(np.float32)
    accel = _with_norm(config)
    if config == "tiny":
        accel = dataclasses.replace(accel, act_kib=1)
    exe = compile_model(path, accel).executable
    causal = [n.attrs["causal"] for n in exe.reference.nodes if n.op == "row_softmax"]
    assert causal == ["causal" in fixture]
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert [la.op for la in result.layers if la.device == "host"] == []
    assert sorted(la.op for la in result.layers if la.op in ("layer_norm", "row_softmax")) == [
        "layer_norm",
        "layer_norm",
        "row_softmax",
    ]
    name = model.graph.output[0].name
    assert _cosine(result.outputs[name], _fp32_of(model, x)) > 0.999


def test_a_graph_imported_for_the_unit_is_refused_by_a_config_without_it():
    """compile_front(norm_unit=True), then a config without the unit: every norm node is
    named unplaceable at once (the placement sends them all to the host)."""
    model = _decomposed_ln_model(4, 16, seed=2, opset=13)
    graph = compile_front(model, norm_unit=True)
    with pytest.raises(Unplaceable) as refused:
        compile_graph(graph, PRESETS["tiny"])
    assert refused.value.op == "layer_norm"
    assert "has no norm unit" in str(refused.value) and "norm_unit=true" in str(refused.value)
    assert refused.value.indices is not None and len(refused.value.indices) == 1

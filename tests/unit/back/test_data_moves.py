"""Data movement and per-channel ops of transformers on the device (issue 39 item 2): each
graph on the ISA simulator bit-exact against the integer reference, close to onnxruntime's fp32,
and with the moves out of the host steps."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from arch.config import PRESETS
from arch.executable.format import HostStep
from arch.ops import OP_SPECS
from compiler.compile import compile_model
from compiler.onnx import load_onnx
from compiler.onnx.token_canon import canonicalize_tokens
from compiler.passes import canonicalize
from sim.app.cli import main
from sim.quality.accuracy import compare_fp32
from sim.runtime.run import run
from tests import token_graphs
from tests.onnx_graphs import make_model


def _run_isa(model: onnx.ModelProto, config: str, seed: int, tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    exe = compile_model(path, PRESETS[config]).executable
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert compare_fp32(model, exe.reference, x)["cosine_vs_fp32"] > 0.995
    return exe


def _host_onnx_nodes(exe) -> set[str]:
    """The ONNX node names the host steps run (their reasons name each as 'name (Op)')."""
    return {part.split(" (")[0] for s in exe.steps if isinstance(s, HostStep)
            for part in s.reason.split("; ")}  # fmt: skip


def test_layer_scale_folds_into_the_linear_layer(tmp_path):
    """A Mul of tokens by one constant per channel (timm's layer scale) after MatMul + Add is
    folded into the layer's weights and bias: no host step, and the folded fp32 weights equal
    W * gamma, the bias b * gamma."""
    rng = np.random.default_rng(7)
    w = rng.normal(0, 0.2, (24, 40)).astype(np.float32)
    b = rng.normal(0, 0.1, 40).astype(np.float32)
    gamma = rng.uniform(-1.0, 1.0, 40).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="fc"),
        helper.make_node("Add", ["mm", "b"], ["h"], name="fc.bias"),
        helper.make_node("Mul", ["h", "gamma"], ["y"], name="layer_scale"),
    ]
    model = make_model(nodes, [1, 12, 24], {"w": w, "b": b, "gamma": gamma})
    graph = canonicalize.run(load_onnx(model))
    (gemm,) = [n for n in graph.nodes if n.op == "gemm"]
    np.testing.assert_allclose(gemm.params["weight"], (w * gamma).T, rtol=1e-6)
    np.testing.assert_allclose(gemm.params["bias"], b * gamma, rtol=1e-6)
    exe = _run_isa(model, "default", 1, tmp_path)
    assert not [s for s in exe.steps if isinstance(s, HostStep)]


def test_layer_scale_with_nothing_to_fold_into_runs_on_the_host(tmp_path):
    """A per-channel Mul after a Relu has no linear layer to fold into: the host runs it, and
    the run stays bit-exact."""
    rng = np.random.default_rng(8)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="fc"),
        helper.make_node("Relu", ["mm"], ["r"], name="act"),
        helper.make_node("Mul", ["r", "gamma"], ["g"], name="layer_scale"),
        helper.make_node("MatMul", ["g", "w2"], ["y"], name="fc2"),
    ]
    inits = {
        "w": rng.normal(0, 0.2, (16, 32)).astype(np.float32),
        "gamma": rng.uniform(0.2, 1.0, 32).astype(np.float32),
        "w2": rng.normal(0, 0.2, (32, 16)).astype(np.float32),
    }
    exe = _run_isa(make_model(nodes, [1, 8, 16], inits), "default", 2, tmp_path)
    assert "layer_scale" in _host_onnx_nodes(exe)


@pytest.mark.parametrize(("timm_form", "config"), [(True, "default"), (False, "tiny")])
def test_map_and_tokens_moves_are_views(timm_form, config, tmp_path):
    """Conv -> tokens -> linear -> map -> Conv -> tokens -> linear, in timm's pairs (Reshape +
    Transpose (0, 2, 1)) or the NHWC ones: one device program, no host step, every move a
    view of the bytes its producer stored."""
    model = token_graphs.map_token_round_trip(timm_form=timm_form, seed=3)
    exe = _run_isa(model, config, 4, tmp_path)
    assert len(exe.programs) == 1
    assert not [s for s in exe.steps if isinstance(s, HostStep)]
    views = [n.op for n in exe.reference.nodes if n.op in ("map_to_tokens", "tokens_to_map")]
    assert views == ["map_to_tokens", "tokens_to_map", "map_to_tokens"]


def test_the_view_evaluators_move_what_onnx_moves():
    """map_to_tokens and tokens_to_map against numpy's Reshape + Transpose (ONNX's semantics),
    on random codes of a map that is not square."""
    rng = np.random.default_rng(11)
    x = rng.integers(-128, 128, size=(1, 5, 3, 4), dtype=np.int8)
    to = SimpleNamespace(name="n", op="map_to_tokens", inputs=["x"], output="y", attrs={})
    tokens = OP_SPECS["map_to_tokens"].evaluate(None, to, [x])  # type: ignore[arg-type]
    expected = np.transpose(x.reshape(1, 5, 12), (0, 2, 1))  # (1, T, C)
    np.testing.assert_array_equal(tokens.reshape(1, 12, 5), expected)
    back = SimpleNamespace(name="n", op="tokens_to_map", inputs=["y"], output="z",
                           attrs={"size": (3, 4)})  # fmt: skip
    np.testing.assert_array_equal(OP_SPECS["tokens_to_map"].evaluate(None, back, [tokens]), x)  # type: ignore[arg-type]


def test_tokens_of_a_concat_input_go_to_the_host(tmp_path):
    """A map that is also a Concat's input is a view of the Concat's bytes: its tokens are no
    view of their own, and the host moves them (the run stays bit-exact)."""
    rng = np.random.default_rng(12)
    node = helper.make_node
    nodes = [
        node("Conv", ["x", "w1"], ["a"], name="c1", kernel_shape=[1, 1]),
        node("Conv", ["x", "w2"], ["b"], name="c2", kernel_shape=[1, 1]),
        node("Concat", ["a", "b"], ["cat"], name="cat", axis=1),
        node("Conv", ["cat", "w3"], ["y2"], name="c3", kernel_shape=[1, 1]),
        node("Reshape", ["a", "flat"], ["ar"], name="to_tokens.reshape"),
        node("Transpose", ["ar"], ["t"], name="to_tokens", perm=[0, 2, 1]),
        node("MatMul", ["t", "w4"], ["y"], name="fc"),
    ]
    inits = {
        "w1": rng.normal(0, 0.3, (16, 8, 1, 1)).astype(np.float32),
        "w2": rng.normal(0, 0.3, (16, 8, 1, 1)).astype(np.float32),
        "w3": rng.normal(0, 0.3, (16, 32, 1, 1)).astype(np.float32),
        "flat": np.array([1, 16, 16], np.int64),
        "w4": rng.normal(0, 0.3, (16, 16)).astype(np.float32),
    }
    exe = _run_isa(make_model(nodes, [1, 8, 4, 4], inits, ("y", "y2")), "default", 5, tmp_path)
    hosted = _host_onnx_nodes(exe)
    assert "to_tokens" in hosted or "to_tokens.reshape" in hosted
    reasons = " ".join(s.reason for s in exe.steps if isinstance(s, HostStep))
    assert "is laid out as a view of 'cat'" in reasons, reasons


@pytest.mark.parametrize("flat", [False, True])
def test_batchnorm1d_over_tokens_folds_into_the_linear_layer(flat, tmp_path):
    """LeViT's BatchNorm1d (Transpose, BatchNormalization, Transpose; or Flatten to (T, C),
    BatchNormalization, Reshape back) after a linear layer: its scale and shift fold into the
    layer - one program, no host step."""
    exe = _run_isa(token_graphs.bn1d(seed=5, flat=flat), "default", 6, tmp_path)
    assert len(exe.programs) == 1
    assert not [s for s in exe.steps if isinstance(s, HostStep)]


@pytest.mark.parametrize("flat", [False, True])
def test_batchnorm1d_rewrite_computes_what_onnxruntime_computes(flat):
    """The rewritten graph (Mul + Add on the last axis) equals the original on onnxruntime."""
    model = token_graphs.bn1d(tokens=9, dim=24, seed=6, flat=flat)
    rewritten = canonicalize_tokens(onnx.load_from_string(model.SerializeToString()))
    assert "BatchNormalization" not in {n.op_type for n in rewritten.graph.node}
    x = np.random.default_rng(13).standard_normal((1, 9, 24)).astype(np.float32)
    runs = [
        ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
        for m in (model, rewritten)
    ]
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("index", "config"), [(0, "default"), (-2, "tiny")])
def test_one_token_by_gather_is_a_view(index, config, tmp_path):
    """Gather of one token (the class token, x[:, 0]; here also x[:, -2]) after the residual
    stream feeds the head: a view of that token's pixel, no host step."""
    rng = np.random.default_rng(14)
    node = helper.make_node
    nodes = [
        node("MatMul", ["x", "w"], ["h"], name="fc"),
        node("Relu", ["h"], ["r"], name="act"),
        node("Add", ["x", "r"], ["s"], name="residual"),
        node("Gather", ["s", "i"], ["c"], name="cls_select", axis=1),
        node("Gemm", ["c", "hw", "hb"], ["y"], name="head", transB=1),
    ]
    inits = {
        "w": rng.normal(0, 0.3, (24, 24)).astype(np.float32),
        "i": np.array(index, np.int64),
        "hw": rng.normal(0, 0.3, (10, 24)).astype(np.float32),
        "hb": rng.normal(0, 0.1, 10).astype(np.float32),
    }
    exe = _run_isa(make_model(nodes, [1, 7, 24], inits), config, 7, tmp_path)
    assert not [s for s in exe.steps if isinstance(s, HostStep)]
    (select,) = [n for n in exe.reference.nodes if n.op == "select_token"]
    assert select.attrs["index"] == index % 7


def test_a_gather_of_many_tokens_goes_to_the_host(tmp_path):
    """Gather of a vector of indices is no single token: the host runs it, naming why."""
    rng = np.random.default_rng(15)
    node = helper.make_node
    nodes = [
        node("MatMul", ["x", "w"], ["h"], name="fc"),
        node("Gather", ["h", "i"], ["g"], name="pick", axis=1),
        node("MatMul", ["g", "w2"], ["y"], name="fc2"),
    ]
    inits = {
        "w": rng.normal(0, 0.3, (16, 16)).astype(np.float32),
        "i": np.array([0, 2], np.int64),
        "w2": rng.normal(0, 0.3, (16, 16)).astype(np.float32),
    }
    graph = load_onnx(make_model(nodes, [1, 5, 16], inits))
    (host,) = [n for n in graph.nodes if n.op == "host" and "pick" in n.onnx_nodes]
    assert (
        "Gather along axis 1 of (1, 5, 1, 16) by indices of shape (2,)"
        in (graph.host_reasons[host.name])
    )


def test_a_token_index_out_of_range_is_one_error_line(tmp_path, capsys):
    """Gather of token 7 of 5: the importer sends it to the host naming the index, and the run
    ends with exit 2 and one error line from onnxruntime naming the node and the range."""
    rng = np.random.default_rng(16)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
        helper.make_node("Gather", ["h", "i"], ["y"], name="pick", axis=1),
    ]
    inits = {"w": rng.normal(0, 0.3, (16, 16)).astype(np.float32), "i": np.array(7, np.int64)}
    model = make_model(nodes, [1, 5, 16], inits)
    graph = load_onnx(model)
    assert graph.host_reasons["pick"] == "pick (Gather): index 7 is outside 5 tokens"
    path = tmp_path / "oob.onnx"
    onnx.save(model, path)
    code = main(["--backend", "isa", "--out", str(tmp_path / "run"), "--model", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: onnxruntime"), err
    assert "'pick'" in err[0] and "[-5,4]" in err[0]

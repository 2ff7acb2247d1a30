"""Transformers on the array: linear layers over tokens, attention's MatMul of two activations
per head, the heads views, GELU in torch's Erf form - on the ISA simulator against onnxruntime
(fp32) and the integer reference, and the import of the patterns exporters write."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from arch.config import PRESETS
from arch.executable import DeviceProgram, DramTensor
from compiler.compile import compile_graph, compile_model
from compiler.errors import CompileError
from compiler.frontend import compile_front
from compiler.onnx import load_onnx
from compiler.onnx.gelu_pattern import MS_DOMAIN, fuse_gelu
from compiler.plan import GemmShape, Plan
from sim.runtime.host import read_tensor, tensor_bytes
from sim.runtime.run import run
from tests.twin_check import assert_twin_agrees
from zoo._graph import GraphBuilder
from zoo.transformers import bert, vit


def _run_isa(model: onnx.ModelProto, config: str, seed: int, tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    exe = compile_model(path, PRESETS[config]).executable
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    result = run(exe, x, "isa")
    return exe, x, result


@pytest.mark.parametrize(
    ("config", "tokens", "hidden", "heads"),
    [
        ("default", 20, 64, 2),  # 20 tokens: not a multiple of the 16x16 array
        ("default", 33, 48, 3),
        ("default", 16, 32, 1),
        ("tiny", 7, 16, 4),  # heads of 4 channels: one line of the 4x4 array
        ("tiny", 9, 24, 3),
    ],
)
def test_encoder_block_on_the_array(config, tokens, hidden, heads, tmp_path):
    """A BERT-style block: every MAC on the accelerator - the attention products per head among
    them, with their real MAC count - bit-exact, and close to onnxruntime's fp32."""
    model = bert(tokens=tokens, hidden=hidden, heads=heads, layers=1, mlp=2 * hidden, seed=3)
    exe, x, result = _run_isa(model, config, 5, tmp_path)
    assert result.bit_exact, result.first_mismatch
    products = [la for la in result.layers if la.op == "batch_matmul"]
    assert [la.device for la in products] == ["accel", "accel"]
    head = hidden // heads
    # q @ k^T: H x T x T outputs of `head` products; p @ v: H x T x head outputs of T products
    assert [la.macs for la in products] == [heads * tokens * tokens * head] * 2
    assert all(la.cycles > 0 and la.bit_exact for la in products)
    host_macs = sum(la.macs for la in result.layers if la.device == "host")
    assert host_macs == 0
    assert_twin_agrees(model, exe.reference, [x])


def test_vit_on_the_array(tmp_path):
    """ViT: patches by a strided conv, 4 blocks: all MACs on the array, bit-exact."""
    model = vit(image_size=32, layers=2, seed=1)
    exe, x, result = _run_isa(model, "default", 2, tmp_path)
    assert result.bit_exact, result.first_mismatch
    accel = sum(la.macs for la in result.layers if la.device == "accel")
    total = sum(la.macs for la in result.layers)
    assert accel == total > 0
    assert_twin_agrees(model, exe.reference, [x])


def test_head_views_carry_their_name_and_scale():
    """Every DRAM tensor of a plan with head views (q, k^T, v and the merged heads of bert on
    the 4x4 array) is named by its key and has its graph tensor's scale."""
    graph = compile_front(bert(tokens=6, hidden=32, heads=2, layers=1, mlp=64, seed=3), seed=3)
    views = 0
    for step in compile_graph(graph, PRESETS["tiny"]):
        if not isinstance(step, Plan):
            continue
        for name, tensor in step.tensors.items():
            assert tensor.name == name
            assert tensor.scale == graph.tensors[name].scale, name
            views += tensor.alias_of is not None
    assert views >= 4


def test_import_of_the_attention_patterns(tmp_path):
    model = bert(tokens=8, hidden=32, heads=2, layers=1, mlp=64, seed=0)
    graph = load_onnx(model)
    ops = [n.op for n in graph.nodes]
    assert ops.count("split_heads") == 2  # q and v
    assert ops.count("split_heads_t") == 1  # k^T: k's linear layer stores it transposed
    assert ops.count("merge_heads") == 1
    products = [n for n in graph.nodes if n.op == "batch_matmul"]
    assert len(products) == 2
    # the 1/sqrt(head) Mul of the scores is folded into the product
    assert products[0].params["alpha"][0] == pytest.approx(1 / math.sqrt(16))
    assert "alpha" not in products[1].params
    hosts = [n for n in graph.nodes if n.op == "host"]
    assert all({"MatMul", "Transpose"}.isdisjoint(n.attrs["onnx_ops"]) for n in hosts)


def _scores_model(scale_op: str, perm: tuple[int, ...]) -> onnx.ModelProto:
    """q @ k (both (1, 2, 8, 16) inputs made by a conv-free path: a linear layer and views)."""
    g = GraphBuilder(7)
    x = "input"
    parts = []
    for which in ("q", "k"):
        w = g.param(f"{which}.w", g.he_normal((32, 32), 32))
        y = g.node("MatMul", f"{which}.mm", [x, w])
        shape = g.param(f"{which}.shape", np.zeros(4))
        g.initializers[-1] = onnx.numpy_helper.from_array(np.array([1, 8, 2, 16], np.int64), shape)
        y = g.node("Reshape", f"{which}.reshape", [y, shape])
        parts.append(
            g.node(
                "Transpose", f"{which}.t", [y], perm=list(perm if which == "k" else (0, 2, 1, 3))
            )
        )
    scores = g.node("MatMul", "qk", parts)
    c = g.param("c", np.float32(4.0 if scale_op == "Div" else 0.25))
    g.node(scale_op, "scale", [scores, c], output="logits")
    return g.model("scores", {"input": [1, 8, 32]}, {"logits": [1, 2, 8, 8]}, "scores")


@pytest.mark.parametrize("scale_op", ["Mul", "Div"])
def test_scaled_scores_bit_exact_and_close(scale_op, tmp_path):
    model = _scores_model(scale_op, (0, 2, 3, 1))
    exe, x, result = _run_isa(model, "default", 1, tmp_path)
    assert result.bit_exact, result.first_mismatch
    [product] = [n for n in load_onnx(model).nodes if n.op == "batch_matmul"]
    assert product.params["alpha"][0] == pytest.approx(0.25)
    assert_twin_agrees(model, exe.reference, [x])


def _with_node_before(model: onnx.ModelProto, node: onnx.NodeProto, reader: str) -> None:
    """Insert ``node`` before the node named ``reader`` (graph order stays topological)."""
    nodes = list(model.graph.node)
    nodes.insert(next(i for i, n in enumerate(nodes) if n.name == reader), node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)


def test_k_transposed_after_its_heads_view_is_one_transposed_view(tmp_path):
    """``k.view(...).transpose(1, 2)`` then ``.transpose(-2, -1)`` - the legacy exporters' k^T
    in two Transposes - becomes the one split_heads_t view: no host step, bit-exact."""
    model = _scores_model("Mul", (0, 2, 1, 3))
    swap = onnx.helper.make_node(
        "Transpose", ["k.t.out"], ["k.t.swap"], "k.swap", perm=[0, 1, 3, 2]
    )
    next(n for n in model.graph.node if n.name == "qk").input[1] = "k.t.swap"
    _with_node_before(model, swap, "qk")
    assert [n.op for n in load_onnx(model).nodes].count("split_heads_t") == 1
    exe, x, result = _run_isa(model, "default", 4, tmp_path)
    assert result.bit_exact, result.first_mismatch
    assert [la.device for la in result.layers] == ["accel"] * len(result.layers)
    assert_twin_agrees(model, exe.reference, [x])


def test_a_transpose_that_is_no_heads_view_goes_to_the_host():
    """The scores transposed: a Transpose of heads that is no view of tokens."""
    model = _scores_model("Mul", (0, 2, 3, 1))
    next(n for n in model.graph.node if n.name == "scale").output[0] = "logits.pre"
    model.graph.node.append(
        onnx.helper.make_node("Transpose", ["logits.pre"], ["logits"], "swap", perm=[0, 1, 3, 2])
    )
    graph = load_onnx(model)
    reasons = " ".join(graph.host_reasons.values())
    assert "Transpose (0, 1, 3, 2)" in reasons and "not a view of attention heads" in reasons


def test_k_read_by_a_graph_output_stays_on_the_device(tmp_path):
    """k's tokens also feed a graph output: they stay as they are (the output is k itself)
    and ``q @ k^T`` reads them with transpose_w, on the device - bit-exact, no host step (it
    was one: the k^T view went to the host when k^T was stored transposed)."""
    model = _scores_model("Mul", (0, 2, 3, 1))
    k = next(n for n in model.graph.node if n.name == "k.mm").output[0]
    model.graph.output.append(
        onnx.helper.make_tensor_value_info(k, onnx.TensorProto.FLOAT, [1, 8, 32])
    )
    exe, x, result = _run_isa(model, "default", 3, tmp_path)
    assert result.bit_exact, result.first_mismatch
    assert [la.device for la in result.layers] == ["accel"] * len(result.layers)
    [program] = [s for s in exe.steps if isinstance(s, DeviceProgram)]
    assert program.tensors[k].layout == "tokens" and k in program.outputs
    assert_twin_agrees(model, exe.reference, [x])


# -- GELU as torch exports it ------------------------------------------------------------------


def _gelu_chain(half_first: bool) -> onnx.ModelProto:
    g = GraphBuilder(0)
    x = g.node("Relu", "pre", ["input"])  # x is an activation read twice
    scaled = g.node("Mul", "inv", [x, g.param("r2", np.float32(1 / math.sqrt(2)))])
    one = g.node("Add", "one", [g.node("Erf", "erf", [scaled]), g.param("c1", np.float32(1))])
    if half_first:
        half = g.node("Mul", "half", [x, g.param("c5", np.float32(0.5))])
        g.node("Mul", "prod", [half, one], output="logits")
    else:
        prod = g.node("Mul", "prod", [one, x])
        g.node("Mul", "half", [prod, g.param("c5", np.float32(0.5))], output="logits")
    return g.model("gelu", {"input": [1, 3, 4, 4]}, {"logits": [1, 3, 4, 4]}, "gelu")


@pytest.mark.parametrize("half_first", [False, True])
def test_gelu_chain_fused_into_one_node_computing_the_same(half_first):
    model = _gelu_chain(half_first)
    fused = fuse_gelu(onnx.shape_inference.infer_shapes(model))
    ops = [(n.domain, n.op_type) for n in fused.graph.node]
    assert ops == [("", "Relu"), (MS_DOMAIN, "Gelu")]
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 4)).astype(np.float32) * 3
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"input": x})[0]
    got = ort.InferenceSession(fused.SerializeToString()).run(None, {"input": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_gelu_chain_with_another_reader_is_left_alone():
    model = _gelu_chain(False)
    erf = next(n for n in model.graph.node if n.op_type == "Erf")
    model.graph.output.append(onnx.helper.make_empty_tensor_value_info(erf.output[0]))
    fused = fuse_gelu(onnx.shape_inference.infer_shapes(model))
    assert [n.op_type for n in fused.graph.node] == [n.op_type for n in model.graph.node]


# -- DRAM layouts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layout", "shape", "h", "channels"),
    [
        ("tokens", (1, 7, 1, 20), 7, 32),
        ("heads", (1, 3, 5, 6), 5, 3 * 16),
        ("tokens_t", (1, 6, 1, 3 * 5), 5, 3 * 16),  # 3 heads of 5 features, 6 tokens each
    ],
)
def test_tokens_and_heads_layouts_round_trip(layout, shape, h, channels):
    """What the host writes for a layout reads back as the same tensor; padding bytes are 0 and
    head h's values start at h x its padded width."""
    q = np.random.default_rng(1).integers(-128, 128, shape).astype(np.int8)
    t = DramTensor("t", 0, h, 1, channels, shape[-1], layout)
    data = tensor_bytes(t, q)
    assert data.shape == (h, channels)
    back = read_tensor(t, data.reshape(-1), shape)
    np.testing.assert_array_equal(back, q)
    rows = data.view(np.int8)
    if layout == "heads":
        np.testing.assert_array_equal(rows[:, 16 : 16 + 6], q[0, 1])
        assert not rows[:, 6:16].any()
    elif layout == "tokens_t":  # pixel d, head 1's channels: feature 5 + d of every token
        np.testing.assert_array_equal(rows[:, 16 : 16 + 6], q[0, :, 0, 5:10].T)
        assert not rows[:, 6:16].any()
    else:
        np.testing.assert_array_equal(rows[:, :20], q[0, :, 0])
        assert not rows[:, 20:].any()


def test_transformer_executable_saved_and_reloaded_runs_the_same(tmp_path):
    """tokens, heads and tokens_t layouts, batch_matmul layers and heads views (k^T's
    among them) through the file."""
    from arch import executable

    model = bert(tokens=6, hidden=32, heads=2, layers=1, mlp=64, seed=2)
    exe, x, result = _run_isa(model, "default", 3, tmp_path)
    loaded = executable.load(executable.save(exe, tmp_path / "bert.cosim"), PRESETS["default"])
    again = run(loaded, x, "isa")
    assert again.bit_exact, again.first_mismatch
    assert [la.cycles for la in again.layers] == [la.cycles for la in result.layers]
    for name, value in result.outputs.items():
        np.testing.assert_array_equal(again.outputs[name], value)


def test_shape_of_a_token_tensor_is_its_onnx_shape(tmp_path):
    """Shape of a (1, T, F) activation folds to (1, T, F), not to the IR's (1, T, 1, F): the
    legacy exporter builds the heads' Reshape targets from it (Gather of F here)."""
    g = GraphBuilder(1)
    x = g.node("Relu", "relu", ["input"])
    shape = g.node("Shape", "shape", [x])
    g.initializers.append(onnx.numpy_helper.from_array(np.array(2, np.int64), "axis2"))
    width = g.node("Gather", "width", [shape, "axis2"], axis=0)
    g.initializers.append(onnx.numpy_helper.from_array(np.array([0], np.int64), "zero"))
    width = g.node("Unsqueeze", "unsqueeze", [width, "zero"])
    g.initializers.append(onnx.numpy_helper.from_array(np.array([1, -1], np.int64), "lead"))
    target = g.node("Concat", "target", ["lead", width], axis=0)
    y = g.node("Reshape", "reshape", [x, target])
    g.node("MatMul", "fc", [y, g.param("w", g.he_normal((32, 16), 32))], output="logits")
    model = g.model("shaped", {"input": [1, 8, 32]}, {"logits": [1, 8, 16]}, "shaped")
    exe, x_in, result = _run_isa(model, "default", 4, tmp_path)
    assert result.bit_exact, result.first_mismatch
    assert_twin_agrees(model, exe.reference, [x_in])


def test_attention_products_are_1x1_gemms_over_the_tokens_of_each_head():
    """bert with 6 tokens, 2 heads of 16 channels on the 4x4 array: q @ k^T is, per head, a 1x1
    GEMM over 6 pixels of 16 channels giving 6 scores (padded to 8 lanes); scores @ v is one over
    6 pixels of 6 (padded to 8) channels giving 16. Inputs with a zero point are refused by
    name (the DMA cannot subtract a zero point from weight lines)."""
    graph = compile_front(bert(tokens=6, hidden=32, heads=2, layers=1, mlp=64, seed=3), seed=3)
    shapes = {
        layer.node.name: layer.gemm
        for step in compile_graph(graph, PRESETS["tiny"])
        if isinstance(step, Plan)
        for layer in step.accel_layers()
        if layer.kind == "matmul"
    }
    one = ((1, 1), (1, 1), (0, 0, 0, 0))
    assert shapes == {
        "encoder.0.attn.qk": GemmShape(6, 1, 16, *one, 6, 1, 8),
        "encoder.0.attn.av": GemmShape(6, 1, 8, *one, 6, 1, 16),
    }
    qk = next(n for n in graph.nodes if n.name == "encoder.0.attn.qk")
    # q (the heads view and the tokens it views, which keep one scale and zero point)
    split = next(n for n in graph.nodes if n.output == qk.inputs[0])
    graph.tensors[qk.inputs[0]].zero_point = graph.tensors[split.inputs[0]].zero_point = 3
    with pytest.raises(CompileError) as info:
        compile_graph(graph, PRESETS["tiny"])
    assert (info.value.node, info.value.op) == ("encoder.0.attn.qk", "batch_matmul")
    assert info.value.reason == f"input '{qk.inputs[0]}' has zero point 3"
    assert info.value.supported == "symmetric (zero point 0) inputs of a MatMul of two activations"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"logical_channels": 5}, "tokens_t 16x1 of 5; graph \\(1, 6, 1, 32\\)"),
        ({"h": 12}, "tokens_t 12x1 of 6"),
        ({"channels": 10}, "10 channels hold no 2 heads of 6"),
    ],
)
def test_a_tokens_t_tensor_that_cannot_hold_k_is_refused(change, message, tmp_path):
    """k stored transposed (tokens_t: 16 feature pixels of 2 heads x 6 tokens, padded): an
    archive whose geometry does not hold its (1, 6, 1, 32) graph tensor is refused, naming it."""
    from arch import executable
    from arch.executable import ExecutableError
    from tests.unit.arch.test_executable import with_manifest

    model = bert(tokens=6, hidden=32, heads=2, layers=1, mlp=64, seed=2)
    exe, _x, _result = _run_isa(model, "default", 3, tmp_path)
    saved = executable.save(exe, tmp_path / "bert.cosim")

    def alter(info: dict) -> None:
        for step in info["steps"]:
            for tensor in step.get("tensors", {}).values():
                if tensor["layout"] == "tokens_t":
                    tensor.update(change)
                    return
        raise AssertionError("no tokens_t tensor in the executable")

    with pytest.raises(ExecutableError, match=message):
        executable.load(with_manifest(saved, tmp_path / "bad.cosim", alter))


def test_a_k_whose_tokens_are_also_an_output_is_read_as_key_rows():
    """k's tokens made a graph output (the host reads them, as a prefill's key cache) stay as
    they are: not stored transposed (tokens_t), k^T is a view of the token rows and the
    product reads them with GEMM's transpose_w. (Before, such a k was refused.)"""
    graph = compile_front(bert(tokens=6, hidden=32, heads=2, layers=1, mlp=64, seed=3), seed=3)
    view = next(n for n in graph.nodes if n.op == "split_heads_t")
    graph.outputs.append(view.inputs[0])
    plans = [step for step in compile_graph(graph, PRESETS["tiny"]) if isinstance(step, Plan)]
    plan = next(p for p in plans if view.name in {la.name for la in p.layers})
    assert plan.tensors[view.inputs[0]].layout == "tokens"
    assert plan.tensors[view.output].layout == "tokens"
    assert plan.tensors[view.output].alias_of == view.inputs[0]
    product = next(la for la in plan.accel_layers() if view.output in la.inputs)
    gemms = [op for op in product.ops if op.opcode.name == "GEMM"]
    assert gemms and all(op.fields.get("transpose_w") == 1 for op in gemms)


def test_tokens_heads_and_tokens_t_tensors_are_laid_out_per_their_shapes():
    """bert (6 tokens, hidden 32, 2 heads) on the 4x4 array, every DRAM tensor of every plan
    by its layout: tokens (1, T, 1, F) are T pixels of F channels padded to lines; heads
    (1, H, M, N) are M pixels of H blocks of N channels, each block padded to lines; k's
    tokens stored transposed (tokens_t) are F/H pixels of H blocks of T channels; other
    tensors NHWC."""
    graph = compile_front(bert(tokens=6, hidden=32, heads=2, layers=1, mlp=64, seed=3), seed=3)
    seen = set()
    for step in compile_graph(graph, PRESETS["tiny"]):
        if not isinstance(step, Plan):
            continue
        for name, t in step.tensors.items():
            shape = step.graph.tensors[name].shape
            got = (t.h, t.w, t.channels, t.logical_channels)
            if t.layout == "tokens":
                _, tl, _, f = shape
                assert got == (tl, 1, -(-f // 4) * 4, f), name
            elif t.layout == "heads":
                _, h, m, n = shape
                assert got == (m, 1, h * -(-n // 4) * 4, n), name
            elif t.layout == "tokens_t":
                _, tl, _, f = shape
                assert got == (f // 2, 1, 2 * -(-tl // 4) * 4, tl), name
            else:
                assert t.layout == "nhwc", name
                c, h, w = shape[1], *(shape[2:] if len(shape) == 4 else (1, 1))
                assert got == (h, w, -(-c // 4) * 4, c), name
            seen.add(t.layout)
    assert seen == {"tokens", "heads", "tokens_t", "nhwc"}
    # a linear layer over tokens is a 1x1 GEMM over the T pixels: F_in -> F_out, padded to lines
    gemms = 0
    for step in compile_graph(graph, PRESETS["tiny"]):
        if not isinstance(step, Plan):
            continue
        for layer in step.accel_layers():
            if layer.kind != "gemm" or step.tensors[layer.inputs[0]].layout != "tokens":
                continue
            _, tl, _, f_in = step.graph.tensors[layer.inputs[0]].shape
            _, to, _, f_out = step.graph.tensors[layer.output].shape
            pad_in, pad_out = -(-f_in // 4) * 4, -(-f_out // 4) * 4
            one = ((1, 1), (1, 1), (0, 0, 0, 0))
            assert layer.gemm == GemmShape(tl, 1, pad_in, *one, to, 1, pad_out), layer.name
            gemms += 1
    assert gemms >= 6  # q, k, v, the attention output and the two MLP layers


def test_a_k_written_by_other_than_a_gemm_cannot_be_stored_transposed():
    """Only a GEMM's stores transpose: k's tokens written by another kind of layer (here the
    producer turned into an add) are refused at the split_heads_t, naming the writer."""
    from compiler.passes.layout import _transposed_tensors

    graph = compile_front(bert(tokens=6, hidden=32, heads=2, layers=1, mlp=64, seed=3), seed=3)
    plan = next(
        step
        for step in compile_graph(graph, PRESETS["tiny"])
        if isinstance(step, Plan) and any(la.node.op == "split_heads_t" for la in step.layers)
    )
    node = next(la.node for la in plan.layers if la.node.op == "split_heads_t")
    src = node.inputs[0]
    assert _transposed_tensors(plan) == {src: 2}
    plan.graph.producer(src).op = "add"
    with pytest.raises(CompileError) as info:
        _transposed_tensors(plan)
    assert (info.value.node, info.value.op) == (node.name, "split_heads_t")
    assert info.value.reason == f"'{src}' is written by a add, which cannot store it transposed"
    assert info.value.supported == "a k^T of a linear layer's output"


def test_head_tensors_of_bert_and_shapes_the_layout_takes():
    """The heads-laid-out tensors are exactly the batch_matmuls' inputs and outputs, the
    split_heads(_t) outputs and the merge_heads inputs. A tensor is (1, C, H, W) or (1, F);
    any other rank is refused naming the shape."""
    from compiler.passes.layout import _head_tensors, _tensor_dims

    graph = compile_front(bert(tokens=6, hidden=32, heads=2, layers=1, mlp=64, seed=3), seed=3)
    plan = next(
        step
        for step in compile_graph(graph, PRESETS["tiny"])
        if isinstance(step, Plan) and any(la.kind == "matmul" for la in step.layers)
    )
    # this plan: the q, k, v projections, their head splits (k^T's transposed) and q @ k^T
    attn = "encoder.0.attn"
    want = {f"{attn}.{x}.transpose.out" for x in "qkv"} | {f"{attn}.scale_mul.out"}
    assert _head_tensors(plan) == want
    assert _tensor_dims((1, 8, 5, 3)) == (8, 5, 3) and _tensor_dims((1, 7)) == (7, 1, 1)
    for shape in ((1, 2, 3), (1, 2, 3, 4, 5), (6,)):
        with pytest.raises(CompileError) as info:
            _tensor_dims(shape)
        assert (info.value.node, info.value.op) == (None, None)
        assert info.value.reason == f"tensor shape {shape} is neither (1,C,H,W) nor (1,F)"


def test_token_tensors_of_bert_are_its_token_shaped_tensors():
    """In every plan of bert (6 tokens of 32 or 64 features) the tensors laid out as tokens are
    exactly the (1, T, 1, F) tensors its accelerator layers (views included) read or write:
    those of the gemms over tokens, the split_heads inputs, the merge_heads outputs and what
    residual adds join to them."""
    from compiler.passes.layout import _head_tensors, _token_tensors

    graph = compile_front(bert(tokens=6, hidden=32, heads=2, layers=1, mlp=64, seed=3), seed=3)
    plans = [step for step in compile_graph(graph, PRESETS["tiny"]) if isinstance(step, Plan)]
    found = 0
    for plan in plans:
        names = {
            name for la in plan.layers if la.target == "accel" for name in (*la.inputs, la.output)
        }
        want = {n for n in names if plan.graph.tensors[n].shape in ((1, 6, 1, 32), (1, 6, 1, 64))}
        assert _token_tensors(plan, _head_tensors(plan)) == want
        found += len(want)
    assert found >= 10


def test_tokens_read_by_another_kind_of_layer_are_refused_by_name():
    """Tokens are read only by gemms over their last axis, elementwise layers and the heads
    views: bert's q projection turned into a conv (the k and v projections still read the
    same tokens) is refused naming the layer and the tensor."""
    from compiler.passes.layout import _head_tensors, _token_tensors

    graph = compile_front(bert(tokens=6, hidden=32, heads=2, layers=1, mlp=64, seed=3), seed=3)
    plan = next(
        step
        for step in compile_graph(graph, PRESETS["tiny"])
        if isinstance(step, Plan) and any(la.node.op == "split_heads_t" for la in step.layers)
    )
    q = next(la for la in plan.accel_layers() if la.name == "encoder.0.attn.q.matmul")
    readers = [la for la in plan.accel_layers() if la.inputs[:1] == q.inputs[:1]]
    assert len(readers) == 3  # q, k, v
    q.node.op = "conv"
    with pytest.raises(CompileError) as info:
        _token_tensors(plan, _head_tensors(plan))
    assert (info.value.node, info.value.op) == (q.name, "conv")
    assert info.value.reason == (
        f"tensor '{q.inputs[0]}' is tokens (1, T, 1, F) of a transformer here"
    )
    assert info.value.supported == "tokens read by gemms over their last axis and elementwise ops"


@pytest.mark.parametrize("config", ["tiny", "default"])
def test_a_constant_bias_added_to_the_scores_is_laid_out_as_heads(config, tmp_path):
    """LeViT's attention bias: scores + a constant (1, H, T, T). The Add and the constant take
    the scores' heads layout (each head's row padded to lines), so the Add runs on the device,
    bit-exact; laid out as a feature map it read other bytes than the scores' (508 of 512
    codes differed)."""
    model = _scores_model("Mul", (0, 2, 3, 1))
    next(n for n in model.graph.node if n.name == "scale").output[0] = "logits.pre"
    bias = np.random.default_rng(3).normal(0.0, 2.0, (1, 2, 8, 8)).astype(np.float32)
    model.graph.initializer.append(onnx.numpy_helper.from_array(bias, "bias"))
    model.graph.node.append(
        onnx.helper.make_node("Add", ["logits.pre", "bias"], ["logits"], "bias_add")
    )
    exe, x, result = _run_isa(model, config, 6, tmp_path)
    [program] = [s for s in exe.steps if isinstance(s, DeviceProgram)]
    assert program.tensors["logits"].layout == "heads"
    assert result.bit_exact, result.first_mismatch
    assert [la.device for la in result.layers] == ["accel"] * len(result.layers)
    assert [la.op for la in result.layers][-1] == "add"
    assert_twin_agrees(model, exe.reference, [x])


@pytest.mark.parametrize("as_node", [False, True])
def test_a_head_merge_whose_shape_has_a_minus_one_is_a_view(as_node, tmp_path):
    """TorchScript writes the merge's target as (1, T, -1), in a Constant node between the
    Transpose and the Reshape: still the merge_heads view, its -1 resolved against the
    Transpose's output (not imported yet) - no host step."""
    model = bert(tokens=8, hidden=32, heads=2, layers=1, mlp=64, seed=2)
    merge = next(i for i in model.graph.initializer if i.name.endswith("merge_shape"))
    target = onnx.numpy_helper.from_array(np.array([1, 8, -1], np.int64), merge.name)
    merge.CopyFrom(target)
    if as_node:
        model.graph.initializer.remove(merge)
        constant = onnx.helper.make_node("Constant", [], [merge.name], value=target)
        reshape = next(n for n in model.graph.node if n.name.endswith("merge_reshape"))
        _with_node_before(model, constant, reshape.name)
    ops = [n.op for n in load_onnx(model).nodes]
    assert ops.count("merge_heads") == 1
    assert all("Transpose" not in n.attrs.get("onnx_ops", ()) for n in load_onnx(model).nodes)
    exe, x, result = _run_isa(model, "default", 3, tmp_path)
    assert result.bit_exact, result.first_mismatch
    assert_twin_agrees(model, exe.reference, [x])


def test_a_tensor_both_tokens_and_heads_is_refused_at_the_layer_joining_them():
    """A tensor that would be tokens and heads at once: the elementwise layer that joins the
    two (here bert's position-embedding add, its output taken as heads too) is refused by name
    - the partition then sends it to the host; with no such layer (the scores of ``q @ k^T``,
    read by nothing else on the device) it is an error naming the tensor."""
    from compiler.passes.layout import _head_tensors, _refuse_mixed_join, _token_tensors

    graph = compile_front(bert(tokens=6, hidden=32, heads=2, layers=1, mlp=64, seed=3), seed=3)
    plans = [step for step in compile_graph(graph, PRESETS["tiny"]) if isinstance(step, Plan)]
    embed = next(p for p in plans if any(la.kind == "add" for la in p.layers))
    heads = _head_tensors(embed)
    tokens = _token_tensors(embed, heads)
    add = next(la for la in embed.accel_layers() if la.kind == "add")
    assert add.output in tokens and add.output not in heads
    with pytest.raises(CompileError) as info:
        _refuse_mixed_join(embed, heads | {add.output}, tokens)
    assert (info.value.node, info.value.op) == (add.name, "add")
    assert info.value.reason == f"tensor '{add.output}' would be both tokens and heads"
    assert info.value.supported == "elementwise ops of heads alone or of tokens alone"
    attention = next(p for p in plans if any(la.node.op == "split_heads_t" for la in p.layers))
    heads = _head_tensors(attention)
    tokens = _token_tensors(attention, heads)
    scores = next(la.output for la in attention.layers if la.kind == "matmul")
    assert scores in heads and scores not in tokens
    with pytest.raises(CompileError) as info:
        _refuse_mixed_join(attention, heads, tokens | {scores})
    assert (info.value.node, info.value.op) == (None, None)
    assert f"tensor '{scores}' is both tokens and heads" in str(info.value)

"""torch's own exports of ``nn.TransformerEncoderLayer`` (tests/fixtures/torch/encoder_*.onnx)
and the rewrite that puts their attention on the array (:mod:`compiler.onnx.token_canon`): the
rewritten graph computes what the export computes (onnxruntime on both), every MAC runs on the
accelerator bit-exact, and random chains of data movement on tokens are rewritten exactly."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from arch.config import PRESETS, load_config
from compiler.compile import compile_model
from compiler.errors import CompileError
from compiler.onnx.gelu_pattern import MS_DOMAIN, fuse_gelu
from compiler.onnx.host_models import HOST_IR_VERSION
from compiler.onnx.token_canon import canonicalize_tokens
from sim.runtime.run import run
from tests.twin_check import assert_twin_agrees

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "torch"
D, FF = 64, 128  # as tests/fixtures/torch/export_encoder.py exports them
#: fixture -> its tokens
FIXTURE_TOKENS = {
    "encoder_default.onnx": 20,
    "encoder_legacy.onnx": 20,
    "encoder_causal.onnx": 20,
    "block_default.onnx": 24,
    "block_legacy.onnx": 24,
}


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {model.graph.input[0].name: x})[0]


@pytest.mark.parametrize("name", sorted(FIXTURE_TOKENS))
def test_rewritten_encoder_computes_what_the_export_computes(name):
    model = onnx.load(FIXTURES / name)
    rewritten = canonicalize_tokens(copy.deepcopy(model))
    ops = [n.op_type for n in rewritten.graph.node]
    # the packed q/k/v projection is three MatMuls; nothing of torch's shuffling is left
    assert ops.count("MatMul") == 3 + 2 + 2 + 1  # q k v, the two products, the FFN, out_proj
    assert not {"Gemm", "Gather", "Squeeze", "Unsqueeze", "Shape", "Split"} & set(ops)
    x = np.random.default_rng(4).standard_normal((1, FIXTURE_TOKENS[name], D)).astype(np.float32)
    np.testing.assert_allclose(_ort(rewritten, x), _ort(model, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(FIXTURE_TOKENS))
def test_torch_encoder_runs_every_mac_on_the_array(name, tmp_path):
    """Every MAC of torch's encoder on the accelerator - the three projections, both attention
    products per head, the output projection and the FFN - bit-exact, close to fp32."""
    exe = compile_model(FIXTURES / name, PRESETS["default"]).executable
    t = FIXTURE_TOKENS[name]
    x = np.random.default_rng(7).standard_normal((1, t, D)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    accel = [la for la in result.layers if la.device == "accel"]
    expected = 4 * t * D * D + 2 * t * D * FF + 2 * t * t * D  # linear layers + attention
    assert sum(la.macs for la in accel) == expected
    assert sum(la.macs for la in result.layers if la.device == "host") == 0
    products = [la for la in accel if la.op == "batch_matmul"]
    assert [la.macs for la in products] == [t * t * D] * 2  # H heads of t x t x D/H
    # on the host: LayerNorm, Softmax (after the causal mask's Add) - no MACs, no data moves:
    # the heads split and merge are views, and k's linear layer stores k^T transposed
    host_ops = {op for la in result.layers if la.device == "host" for op in la.op[5:].split("+")}
    assert host_ops <= {"LayerNormalization", "Softmax", "Add"}
    assert_twin_agrees(onnx.load(FIXTURES / name), exe.reference, [x])


@pytest.mark.parametrize("name", ["encoder_legacy.onnx", "block_legacy.onnx"])
def test_tanh_gelu_of_the_legacy_export_fused_and_equal(name):
    """The TorchScript exporter writes tanh GELU as Mul/Add/Tanh: fused into FastGelu, which
    computes what the chain computes."""
    model = onnx.load(FIXTURES / name)
    fused = fuse_gelu(copy.deepcopy(model))
    gelus = [n for n in fused.graph.node if n.op_type == "FastGelu"]
    assert len(gelus) == 1 and gelus[0].domain == MS_DOMAIN
    assert "Tanh" not in [n.op_type for n in fused.graph.node]
    x = np.random.default_rng(2).standard_normal((1, FIXTURE_TOKENS[name], D)).astype(np.float32)
    np.testing.assert_allclose(_ort(fused, x), _ort(model, x), rtol=1e-5, atol=1e-5)


def _tanh_chain(cube_by_pow: bool, extra_reader: bool) -> onnx.ModelProto:
    """x -> 0.5 * x * (1 + tanh(0.79788456 * (x + 0.044715 * x^3))) -> Relu, on (1, 6, 8)."""
    scalars = {"three": 3.0, "a": 0.044715, "s": 0.7978845608, "one": 1.0, "half": 0.5}
    c = {k: numpy_helper.from_array(np.array(v, np.float32), k) for k, v in scalars.items()}
    cube = (
        [helper.make_node("Pow", ["x", "three"], ["x3"])]
        if cube_by_pow
        else [
            helper.make_node("Mul", ["x", "x"], ["x2"]),
            helper.make_node("Mul", ["x2", "x"], ["x3"]),
        ]
    )
    nodes = [
        *cube,
        helper.make_node("Mul", ["a", "x3"], ["ax3"]),
        helper.make_node("Add", ["x", "ax3"], ["inner"]),
        helper.make_node("Mul", ["inner", "s"], ["arg"]),
        helper.make_node("Tanh", ["arg"], ["th"]),
        helper.make_node("Add", ["th", "one"], ["onep"]),
        helper.make_node("Mul", ["half", "x"], ["hx"]),
        helper.make_node("Mul", ["hx", "onep"], ["gelu"]),
        helper.make_node("Relu", ["gelu"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 8])]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("th", TensorProto.FLOAT, [1, 6, 8]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 8])],
        outputs, initializer=list(c.values()),
    )  # fmt: skip
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=HOST_IR_VERSION
    )


@pytest.mark.parametrize("cube_by_pow", [True, False])
def test_tanh_gelu_written_in_other_orders_is_found(cube_by_pow):
    model = _tanh_chain(cube_by_pow, extra_reader=False)
    fused = fuse_gelu(copy.deepcopy(model))
    assert [n.op_type for n in fused.graph.node] == ["FastGelu", "Relu"]
    x = np.random.default_rng(3).standard_normal((1, 6, 8)).astype(np.float32) * 3
    np.testing.assert_allclose(_ort(fused, x), _ort(model, x), rtol=1e-5, atol=1e-6)


def test_tanh_chain_whose_values_are_read_elsewhere_is_left_alone():
    model = _tanh_chain(cube_by_pow=True, extra_reader=True)
    fused = fuse_gelu(copy.deepcopy(model))
    assert "FastGelu" not in [n.op_type for n in fused.graph.node]


def test_a_near_miss_of_the_tanh_constant_is_not_gelu():
    model = _tanh_chain(cube_by_pow=True, extra_reader=False)
    for init in model.graph.initializer:
        if init.name == "a":
            init.CopyFrom(numpy_helper.from_array(np.array(0.05, np.float32), "a"))
    assert "FastGelu" not in [n.op_type for n in fuse_gelu(model).graph.node]


# -- random movement chains ----------------------------------------------------------------

TOKENS, FEATURES = 6, 12


@st.composite
def _chains(draw: st.DrawFn) -> list[tuple[str, object]]:
    """Random Reshape/Transpose/Unsqueeze/Squeeze/Gather/Slice/Split steps from (1, 6, 12)."""
    shape, steps = [1, TOKENS, FEATURES], []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(
            st.sampled_from(
                ["reshape", "transpose", "unsqueeze", "squeeze", "gather", "slice", "split"]
            )
        )
        if kind == "reshape":
            size = int(np.prod(shape))
            first = draw(st.sampled_from([d for d in range(1, size + 1) if size % d == 0]))
            rest = size // first
            second = draw(st.sampled_from([d for d in range(1, rest + 1) if rest % d == 0]))
            shape = [first, second, rest // second]
            steps.append(("Reshape", list(shape)))
        elif kind == "transpose":
            perm = draw(st.permutations(range(len(shape))))
            shape = [shape[p] for p in perm]
            steps.append(("Transpose", list(perm)))
        elif kind == "unsqueeze" and len(shape) < 5:
            axis = draw(st.integers(0, len(shape)))
            shape.insert(axis, 1)
            steps.append(("Unsqueeze", [axis]))
        elif kind == "squeeze" and 1 in shape and len(shape) > 2:
            axis = shape.index(1)
            del shape[axis]
            steps.append(("Squeeze", [axis]))
        elif kind == "gather" and len(shape) > 2:
            axis = draw(st.sampled_from([a for a, d in enumerate(shape) if 1 < d <= 4] or [None]))
            if axis is not None:
                index = draw(st.integers(0, shape[axis] - 1))
                del shape[axis]
                steps.append(("Gather", (axis, index)))
        elif kind in ("slice", "split") and max(shape) > 1:
            axis = draw(st.sampled_from([a for a, d in enumerate(shape) if d > 1]))
            start = draw(st.integers(0, shape[axis] - 1))
            end = draw(st.integers(start + 1, shape[axis]))
            if kind == "slice":  # also with negative bounds, as exporters write them
                steps.append(("Slice", (start - shape[axis], end, axis)))
            else:  # the parts before, this one, and after (sizes of 0 dropped)
                sizes = [n for n in (start, end - start, shape[axis] - end) if n]
                steps.append(("Split", (axis, sizes, int(start > 0))))
            shape[axis] = end - start
    return steps


def _chain_model(steps: list[tuple[str, object]]) -> onnx.ModelProto:
    """tokens -> MatMul (a token product) -> the steps -> Relu."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, FEATURES)).astype(np.float32), "w")]
    nodes, value = [helper.make_node("MatMul", ["x", "w"], ["p"])], "p"
    for i, (op, arg) in enumerate(steps):
        out = f"m{i}"
        if op == "Transpose":
            nodes.append(helper.make_node(op, [value], [out], perm=arg))
        elif op == "Gather":
            axis, index = arg  # type: ignore[misc]
            inits.append(numpy_helper.from_array(np.array(index, np.int64), f"i{i}"))
            nodes.append(helper.make_node(op, [value, f"i{i}"], [out], axis=axis))
        elif op == "Slice":
            names = [f"s{i}.{k}" for k in range(3)]
            for name, v in zip(names, arg, strict=True):  # type: ignore[call-overload]
                inits.append(numpy_helper.from_array(np.array([v], np.int64), name))
            nodes.append(helper.make_node(op, [value, *names], [out]))
        elif op == "Split":
            axis, sizes, part = arg  # type: ignore[misc]
            inits.append(numpy_helper.from_array(np.array(sizes, np.int64), f"c{i}"))
            outs = [out if k == part else f"{out}.{k}" for k in range(len(sizes))]
            nodes.append(helper.make_node(op, [value, f"c{i}"], outs, axis=axis))
        else:
            inits.append(numpy_helper.from_array(np.array(arg, np.int64), f"c{i}"))
            nodes.append(helper.make_node(op, [value, f"c{i}"], [out]))
        value = out
    nodes.append(helper.make_node("Relu", [value], ["y"]))
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, TOKENS, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits,
    )  # fmt: skip
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=HOST_IR_VERSION
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_chains())
def test_random_movement_chains_are_rewritten_exactly(steps):
    model = _chain_model(steps)
    rewritten = canonicalize_tokens(copy.deepcopy(model))
    x = np.random.default_rng(1).standard_normal((1, TOKENS, 8)).astype(np.float32)
    # the same products (a sliced weight may change only the float summation order)
    np.testing.assert_allclose(_ort(rewritten, x), _ort(model, x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("steps", "ops"),
    [
        # torch's sequence-first round trip: moves nothing, so nothing is left
        ([("Transpose", [1, 0, 2]), ("Reshape", [1, TOKENS, FEATURES])], ["MatMul", "Relu"]),
        # channels 4..8 of every token: a Slice, which then narrows the MatMul's weight
        ([("Reshape", [TOKENS, 3, 4]), ("Gather", (1, 1))], ["MatMul", "Reshape", "Relu"]),
        # heads of a slice, sequence-first as torch splits them
        (
            [
                ("Transpose", [1, 0, 2]),
                ("Reshape", [TOKENS, 1, 3, 4]),
                ("Gather", (2, 2)),
                ("Reshape", [TOKENS, 2, 2]),
                ("Transpose", [1, 0, 2]),
                ("Reshape", [1, 2, TOKENS, 2]),
            ],
            ["MatMul", "Reshape", "Transpose", "Relu"],
        ),  # fmt: skip
    ],
)
def test_token_chains_become_the_canonical_nodes(steps, ops):
    model = _chain_model(steps)
    rewritten = canonicalize_tokens(copy.deepcopy(model))
    assert [n.op_type for n in rewritten.graph.node] == ops
    x = np.random.default_rng(5).standard_normal((1, TOKENS, 8)).astype(np.float32)
    np.testing.assert_allclose(_ort(rewritten, x), _ort(model, x), rtol=1e-6, atol=1e-6)


def test_graphs_without_token_products_are_untouched():
    """A CNN's Flatten/Reshape stays as it is: the rewrite only looks at token products."""
    model = onnx.load(FIXTURES / "mixed_torch.onnx")
    before = [(n.op_type, list(n.input)) for n in model.graph.node]
    after = [(n.op_type, list(n.input)) for n in canonicalize_tokens(model).graph.node]
    assert after == before


def _packed_attention(split: str) -> onnx.ModelProto:
    """timm's ``Attention``: one qkv projection reshaped to (1, T, 3, H, d), permuted to
    (3, 1, H, T, d) and taken apart (Split + Squeeze from TorchScript, Slice + Squeeze from the
    dynamo exporter), k transposed for ``q @ k^T``, the heads merged, the output projection."""
    t, c, h = 9, 32, 2
    rng = np.random.default_rng(7)
    inits = [
        numpy_helper.from_array((rng.standard_normal((c, 3 * c)) / c**0.5).astype(np.float32), "w"),
        numpy_helper.from_array((rng.standard_normal((c, c)) / c**0.5).astype(np.float32), "wo"),
        numpy_helper.from_array(np.array([1, t, 3, h, c // h], np.int64), "split_shape"),
        numpy_helper.from_array(np.array([1, t, c], np.int64), "merge_shape"),
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
        numpy_helper.from_array(np.float32((c // h) ** -0.5), "scale"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["qkv"]),
        helper.make_node("Reshape", ["qkv", "split_shape"], ["qkv5"]),
        helper.make_node("Transpose", ["qkv5"], ["qkvp"], perm=[2, 0, 3, 1, 4]),
    ]
    for k, part in enumerate("qkv"):
        if split == "slice":
            for name, v in ((f"{part}.s", k), (f"{part}.e", k + 1)):
                inits.append(numpy_helper.from_array(np.array([v], np.int64), name))
            nodes.append(helper.make_node("Slice", ["qkvp", f"{part}.s", f"{part}.e", "axis0"],
                                          [f"{part}5"]))  # fmt: skip
    if split == "split":
        nodes.append(helper.make_node("Split", ["qkvp"], ["q5", "k5", "v5"], axis=0))
    nodes += [helper.make_node("Squeeze", [f"{p}5", "axis0"], [p]) for p in "qkv"]
    nodes += [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s0"]),
        helper.make_node("Mul", ["s0", "scale"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["o"]),
        helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ot", "merge_shape"], ["m"]),
        helper.make_node("MatMul", ["m", "wo"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "timm_attention", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, t, c])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, t, c])], initializer=inits,
    )  # fmt: skip
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=HOST_IR_VERSION
    )


@pytest.mark.parametrize("split", ["split", "slice"])
def test_packed_qkv_taken_apart_by_split_or_slice_runs_on_the_device(split, tmp_path):
    """timm's packed q, k, v: each part's chain (Reshape, Transpose, Split or Slice, Squeeze,
    and k's Transpose) is one heads view of a slice of the projection - no host step (before:
    the chain went to the host, 3 host steps per block), one device program, bit-exact."""
    model = _packed_attention(split)
    rewritten = canonicalize_tokens(copy.deepcopy(model))
    assert not {"Split", "Squeeze"} & {n.op_type for n in rewritten.graph.node}
    x = np.random.default_rng(2).standard_normal((1, 9, 32)).astype(np.float32)
    np.testing.assert_allclose(_ort(rewritten, x), _ort(model, x), rtol=1e-5, atol=1e-5)
    path = tmp_path / "attention.onnx"
    onnx.save(model, path)
    exe = compile_model(path, load_config("default_norm")).executable
    assert [type(s).__name__ for s in exe.steps] == ["DeviceProgram"]
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert_twin_agrees(model, exe.reference, [x])


def _levit_attention(key: int, value: int, heads: int, tokens: int = 9) -> onnx.ModelProto:
    """timm's LeViT ``Attention``: one projection with BatchNorm1d on the flattened tokens
    (dynamo: Reshape to (T, C), BatchNormalization, then straight to (1, T, H, 2k + v)), each
    head's q, k and v interleaved and taken apart by Split on the last axis, k^T by a
    Transpose (0, 2, 3, 1), the heads merged, the output projection."""
    c, per_head = 32, 2 * key + value
    rng = np.random.default_rng(9)
    packed = heads * per_head
    inits = {
        "w": rng.standard_normal((c, packed)) / c**0.5,
        "gamma": rng.uniform(0.5, 1.5, packed),
        "beta": rng.normal(0.0, 0.2, packed),
        "mean": rng.normal(0.0, 0.2, packed),
        "var": rng.uniform(0.5, 2.0, packed),
        "wo": rng.standard_normal((heads * value, c)) / (heads * value) ** 0.5,
        "scale": np.float32(key**-0.5),
    }
    ints = {
        "rows": np.array([tokens, packed]),
        "heads_shape": np.array([1, tokens, heads, per_head]),
        "sizes": np.array([key, key, value]),
        "merge_shape": np.array([1, tokens, heads * value]),
    }
    initializers = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()]
    initializers += [numpy_helper.from_array(v.astype(np.int64), k) for k, v in ints.items()]
    node = helper.make_node
    nodes = [
        node("MatMul", ["x", "w"], ["qkv"]),
        node("Reshape", ["qkv", "rows"], ["flat"]),
        node("BatchNormalization", ["flat", "gamma", "beta", "mean", "var"], ["bn"]),
        node("Reshape", ["bn", "heads_shape"], ["per_head"]),
        node("Split", ["per_head", "sizes"], ["q0", "k0", "v0"], axis=3),
        node("Transpose", ["q0"], ["q"], perm=[0, 2, 1, 3]),
        node("Transpose", ["k0"], ["kt"], perm=[0, 2, 3, 1]),
        node("Transpose", ["v0"], ["v"], perm=[0, 2, 1, 3]),
        node("MatMul", ["q", "kt"], ["s0"]),
        node("Mul", ["s0", "scale"], ["s"]),
        node("Softmax", ["s"], ["p"], axis=-1),
        node("MatMul", ["p", "v"], ["o"]),
        node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
        node("Reshape", ["ot", "merge_shape"], ["m"]),
        node("MatMul", ["m", "wo"], ["y"]),
    ]
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, tokens, c])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, tokens, c])
    graph = helper.make_graph(nodes, "levit_attention", [x_info], [y_info], initializers)
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=HOST_IR_VERSION
    )


@pytest.mark.parametrize(("config", "key", "value"), [("tiny", 4, 8), ("default", 16, 32)])
def test_heads_interleaved_in_a_packed_projection_run_on_the_device(config, key, value, tmp_path):
    """LeViT's q, k, v of each head side by side in one projection with its BatchNorm: each
    part's features gathered into a projection of its own (weights, scale and shift of those
    columns), then heads views - no host step (before: the BatchNorm, the Split and the
    Transposes ran on the host), bit-exact."""
    model = _levit_attention(key, value, heads=2)
    rewritten = canonicalize_tokens(copy.deepcopy(model))
    assert not {"Split", "Gather", "BatchNormalization"} & {n.op_type for n in rewritten.graph.node}
    x = np.random.default_rng(4).standard_normal((1, 9, 32)).astype(np.float32)
    np.testing.assert_allclose(_ort(rewritten, x), _ort(model, x), rtol=1e-5, atol=1e-5)
    path = tmp_path / "levit.onnx"
    onnx.save(model, path)
    exe = compile_model(path, dataclasses.replace(PRESETS[config], norm_unit=True)).executable
    assert [type(s).__name__ for s in exe.steps] == ["DeviceProgram"]
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert_twin_agrees(model, exe.reference, [x])


def test_a_reshape_to_another_size_in_a_token_chain_is_named_not_a_crash(tmp_path):
    """A Reshape whose target holds another number of elements (a broken export) leaves the
    chain as it is; the compile names what onnxruntime says (it raised numpy's ValueError)."""
    model = _chain_model([("Reshape", [1, TOKENS, FEATURES // 2])])
    assert [n.op_type for n in canonicalize_tokens(copy.deepcopy(model)).graph.node] == [
        "MatMul",
        "Reshape",
        "Relu",
    ]
    path = tmp_path / "broken.onnx"
    onnx.save(model, path)
    with pytest.raises(CompileError, match="cannot be reshaped|Reshape"):
        compile_model(path, PRESETS["default"])

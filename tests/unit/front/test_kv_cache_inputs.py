"""A decoder exported with its cache inputs and outputs (``past_key_values`` / ``present``) is
compiled as its prefill: the past bound to length 0 (issue 40, item 4). The bound graph computes
what the exported one does with an empty past (onnxruntime on both); what cannot be bound is a
clear error naming the input or node."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.errors import CompileError
from compiler.onnx.kv_cache_inputs import bind_empty_cache, cache_io_of
from tests.fixtures.hf.survey import HERE

PASTS = [f"past_key_values.{i}.{kv}" for i in range(2) for kv in ("key", "value")]


def _fixture(exporter: str) -> onnx.ModelProto:
    return onnx.load(str(HERE / f"hf_gpt2_cache_{exporter}.onnx"))


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("exporter", ["ts", "dy"])
def test_the_bound_graph_is_the_export_with_an_empty_past(exporter) -> None:
    original = _fixture(exporter)
    bound = bind_empty_cache(_fixture(exporter))
    assert [v.name for v in bound.graph.input if v.name not in PASTS] == ["input_ids"]
    assert not any(v.name in PASTS for v in bound.graph.input)
    assert [o.name for o in bound.graph.output] == ["logits"]
    dims = [d.dim_value for d in bound.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [1, 32]  # the position table's rows: GPT2Config(n_positions=32)
    io = cache_io_of(bound)
    assert io == {
        "cache": [[p, p.replace("past_key_values", "present"), 2] for p in PASTS],
        "context": 32,
    }
    ids = np.random.default_rng(5).integers(0, 96, (1, 32))
    empty = np.zeros((1, 2, 0, 16), np.float32)
    want = _run(original, {"input_ids": ids, **dict.fromkeys(PASTS, empty)})[0]
    np.testing.assert_allclose(_run(bound, {"input_ids": ids})[0], want, rtol=1e-5, atol=1e-5)


def test_a_model_without_cache_inputs_is_left_alone() -> None:
    model = onnx.load(str(HERE / "hf_gpt2_dy.onnx"))
    before = model.SerializeToString()
    assert bind_empty_cache(model).SerializeToString() == before
    assert cache_io_of(model) is None


def test_a_past_length_fixed_by_the_export_is_refused_by_name() -> None:
    model = _fixture("dy")
    dim = model.graph.input[1].type.tensor_type.shape.dim[2]
    dim.Clear()
    dim.dim_value = 3
    with pytest.raises(CompileError, match="past length fixed at 3") as info:
        bind_empty_cache(model)
    assert "past_key_values.0.key" in str(info.value) and "symbolic past" in str(info.value)


def test_a_past_read_by_another_op_is_refused_naming_that_node() -> None:
    model = _fixture("dy")
    model.graph.node.append(helper.make_node("Neg", [PASTS[1]], ["spy"], name="spy_node"))
    model.graph.output.append(helper.make_tensor_value_info("spy", TensorProto.FLOAT, None))
    with pytest.raises(CompileError, match="reads the cache input 'past_key_values.0.value'") as e:
        bind_empty_cache(model)
    assert "spy_node" in str(e.value) and "Neg" in str(e.value)


def _tiny_decoder(positions: int | None) -> onnx.ModelProto:
    """Embeddings (and, with ``positions``, a position table read through a Range), one head
    of 4 whose keys go through the cache; logits over 8 ids."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "wte"),
        numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32), "head"),
        numpy_helper.from_array(np.asarray([1], np.int64), "axis1"),
    ]
    nodes = [helper.make_node("Gather", ["wte", "input_ids"], ["tok"])]
    x = "tok"
    if positions is not None:
        inits += [
            numpy_helper.from_array(rng.standard_normal((positions, 4)).astype(np.float32), "wpe"),
            numpy_helper.from_array(np.asarray(0, np.int64), "zero"),
            numpy_helper.from_array(np.asarray(1, np.int64), "one"),
        ]
        nodes += [
            helper.make_node("Shape", ["input_ids"], ["shape"], start=1, end=2),
            helper.make_node("Squeeze", ["shape"], ["length"]),
            helper.make_node("Range", ["zero", "length", "one"], ["pos"]),
            helper.make_node("Gather", ["wpe", "pos"], ["pos_emb"]),
            helper.make_node("Add", ["tok", "pos_emb"], ["x"]),
        ]
        x = "x"
    nodes += [
        helper.make_node("Unsqueeze", [x, "axis1"], ["k"]),
        helper.make_node("Concat", ["past", "k"], ["present"], axis=-2),
        helper.make_node("ReduceSum", ["present", "axis1"], ["keys"], keepdims=0),
        helper.make_node("MatMul", ["keys", "head"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "seq"]),
            helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, 1, "past", 4]),
        ],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "seq", 8]),
            helper.make_tensor_value_info("present", TensorProto.FLOAT, [1, 1, "total", 4]),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_symbolic_sequence_is_fixed_to_the_position_tables_rows() -> None:
    bound = bind_empty_cache(_tiny_decoder(positions=6))
    assert cache_io_of(bound) == {"cache": [["past", "present", 2]], "context": 6}
    ids = np.asarray([[3, 1, 4, 1, 5, 2]])
    want = _run(_tiny_decoder(6), {"input_ids": ids, "past": np.zeros((1, 1, 0, 4), np.float32)})
    np.testing.assert_allclose(_run(bound, {"input_ids": ids})[0], want[0], rtol=1e-6)


def test_a_symbolic_sequence_without_a_position_table_is_refused() -> None:
    with pytest.raises(CompileError, match="symbolic sequence length") as info:
        bind_empty_cache(_tiny_decoder(positions=None))
    assert "input_ids" in str(info.value) and "position" in str(info.value)


def test_an_image_concat_along_the_rows_is_no_cache() -> None:
    """A float input of rank 4 concatenated along axis 2 is a cache only beside token ids."""
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Concat", ["x", "r"], ["y"], axis=2),
        ],
        "image",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, "h2", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    before = model.SerializeToString()
    assert bind_empty_cache(model).SerializeToString() == before

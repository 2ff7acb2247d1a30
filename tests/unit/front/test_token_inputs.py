"""Integer graph inputs (compiler/onnx/token_inputs.py): token ids and attention masks packed as
base-128 digits into the one int8 input, the embedding lookup and the mask on the host at the
graph input; checked against onnxruntime running the model on the integers. (The Hugging Face
fixtures run in tests/network/test_hf_fixtures.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from arch.config import PRESETS
from arch.executable import HostStep
from compiler.compile import compile_model
from compiler.errors import CompileError
from compiler.onnx.token_inputs import TokenInput, TokenInputs, pack_token_inputs, token_inputs_of
from sim.runtime.inputs import check_input
from sim.runtime.run import run
from tests.unit.run.test_cli_errors import assert_usage_error, in_process

HF = Path(__file__).resolve().parents[2] / "fixtures" / "hf"
TINY = PRESETS["tiny"]
SPEC = TokenInputs(
    (
        TokenInput("input_ids", "int64", "ids", 30522),
        TokenInput("attention_mask", "int64", "mask", 2),
    ),
    12,
)


def test_pack_round_trip_is_exact() -> None:
    """Ids of a BERT-sized vocabulary as 3 base-128 digits, each an int8 code (0..127)."""
    rng = np.random.default_rng(51)
    ids, mask = rng.integers(0, 30522, 12), rng.integers(0, 2, 12)
    packed = SPEC.pack({"input_ids": ids, "attention_mask": mask[None]}, "t")
    assert packed.shape == (1, 6, 12) and SPEC.digits == 3
    assert packed.min() >= 0 and packed.max() <= 127 and np.array_equal(packed, np.rint(packed))
    back = SPEC.unpack(packed)
    np.testing.assert_array_equal(back["input_ids"], ids)
    np.testing.assert_array_equal(back["attention_mask"], mask)
    np.testing.assert_array_equal(
        SPEC.unpack(SPEC.pack({"input_ids": ids}, "t"))["attention_mask"], 1
    )


def test_default_inputs_are_seeded_in_vocab_with_a_padded_tail() -> None:
    packed, words = SPEC.default(7)
    again, _ = SPEC.default(7)
    np.testing.assert_array_equal(packed, again)
    values = SPEC.unpack(packed)
    assert values["input_ids"].min() >= 0 and values["input_ids"].max() < 30522
    assert len(set(values["input_ids"].tolist())) > 6  # not a constant
    mask = values["attention_mask"]
    pad = int((mask == 0).sum())
    assert 1 <= pad <= 3 and np.all(mask[: 12 - pad] == 1) and np.all(mask[12 - pad :] == 0)
    assert f"last {pad} of 12 padded" in words and "seed 7" in words


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"input_ids": np.zeros(12)}, "input_ids has dtype float64; use integers"),
        (
            {"input_ids": np.full(12, 30522)},
            "input_ids holds 30522; the model takes ids in [0, 30522)",
        ),
        ({"input_ids": np.zeros((2, 12), np.int64)}, "has shape (2, 12); the model takes (12,)"),
        ({"input_ids": np.zeros(12, np.int64), "attention_mask": np.full(12, 2)}, "takes 0 or 1"),
        ({"token_type_ids": np.zeros(12, np.int64)}, "no input named 'token_type_ids'"),
    ],
)
def test_bad_token_inputs_are_named(arrays: dict[str, np.ndarray], message: str) -> None:
    with pytest.raises(ValueError, match="^t: ") as err:
        SPEC.pack(arrays, "t")
    assert message in str(err.value)


def test_integer_input_that_is_neither_ids_nor_mask_is_refused() -> None:
    model = onnx.load(HF / "hf_gpt2_dy.onnx")
    model.graph.input[0].name = "counts"
    for node in model.graph.node:  # nothing reads 'counts': no table to index
        node.input[:] = ["other" if i == "input_ids" else i for i in node.input]
    with pytest.raises(CompileError, match="'counts'.*indexes no embedding table"):
        pack_token_inputs(model)


def test_tokens_option_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """TOKENS= of the wrong dtype, outside the vocabulary or of the wrong shape; --image for
    a text model and --tokens for an image model: exit 2, one line."""
    model = str(HF / "hf_gpt2_dy.onnx")
    floats, outside, shape = tmp_path / "f.npy", tmp_path / "o.npy", tmp_path / "s.npy"
    np.save(floats, np.random.default_rng(52).standard_normal(16))
    np.save(outside, np.random.default_rng(53).integers(96, 200, 16))
    np.save(shape, np.random.default_rng(54).integers(0, 96, (16, 2)))
    out = str(tmp_path / "o")
    cases = [
        ((str(floats),), ("f.npy", "input_ids has dtype float64")),
        ((str(outside),), ("o.npy", "ids in [0, 96)")),
        ((str(shape),), ("s.npy", "shape (16, 2)", "(16,)")),
    ]
    for (tokens,), names in cases:
        result = in_process(capsys, "--model", model, "--config", "tiny", "--tokens", tokens,
                            "--out", out)  # fmt: skip
        assert_usage_error(result, *names)
    result = in_process(capsys, "--model", model, "--config", "tiny", "--image", str(floats),
                        "--out", out)  # fmt: skip
    assert_usage_error(result, "--image", "input_ids (ids, vocab 96)", "--tokens")
    result = in_process(capsys, "--model", "mlp", "--tokens", str(outside), "--out", out)
    assert_usage_error(result, "--tokens", "--image")


def _ids_and_positions_model(path: Path) -> Path:
    """input_ids and position_ids (int64, (1, 8)) looked up in tables of 300 and 16 rows (ids
    of 2 digits), summed, a linear layer and a Tanh: position ids as an integer input."""
    rng = np.random.default_rng(55)
    nodes = [
        helper.make_node("Gather", ["words", "input_ids"], ["w"], name="word_embeddings"),
        helper.make_node("Gather", ["positions", "position_ids"], ["p"], name="pos_embeddings"),
        helper.make_node("Add", ["w", "p"], ["e"], name="embed_add"),
        helper.make_node("MatMul", ["e", "fc"], ["m"], name="fc"),
        helper.make_node("Tanh", ["m"], ["y"], name="tanh"),
    ]
    inits = {
        "words": rng.normal(0, 1, (300, 16)).astype(np.float32),
        "positions": rng.normal(0, 0.5, (16, 16)).astype(np.float32),
        "fc": rng.normal(0, 0.25, (16, 16)).astype(np.float32),
    }
    ints = [
        helper.make_tensor_value_info(n, TensorProto.INT64, [1, 8])
        for n in ("input_ids", "position_ids")
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        ints,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.save(model, str(path))
    return path


def test_position_ids_input_runs_bit_exact_against_onnxruntime(tmp_path: Path) -> None:
    path = _ids_and_positions_model(tmp_path / "m.onnx")
    compiled = compile_model(path, TINY)
    assert compiled.source is not None
    spec = token_inputs_of(compiled.source)
    assert spec is not None and spec.digits == 2
    assert [(t.name, t.kind, t.vocab) for t in spec.inputs] == [
        ("input_ids", "ids", 300),
        ("position_ids", "ids", 16),
    ]
    # the input stage on the host: the packed input's one-row Gathers are no selected token
    (first, *_) = [s for s in compiled.executable.steps if isinstance(s, HostStep)]
    assert "reads the packed token input 'tokens' (ids as digits" in first.reason, first.reason
    assert not [n for n in compiled.executable.reference.nodes if n.op == "select_token"]
    rng = np.random.default_rng(56)
    ids, positions = rng.integers(0, 300, 8), rng.permutation(8)
    packed = spec.pack({"input_ids": ids, "position_ids": positions}, "t")
    result = run(compiled.executable, check_input(packed, compiled.executable.input.shape), "isa")
    assert result.bit_exact, result.first_mismatch
    (ours,) = result.outputs.values()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (theirs,) = session.run(None, {"input_ids": ids[None], "position_ids": positions[None]})
    np.testing.assert_allclose(ours.reshape(theirs.shape), theirs, atol=0.08)
    assert np.corrcoef(ours.ravel(), theirs.ravel())[0, 1] > 0.99

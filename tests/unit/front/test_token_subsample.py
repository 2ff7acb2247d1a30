"""LeViT's attention subsampling - tokens reshaped to their map, sliced with a step along H and
W, reshaped back - as a 1x1 strided max pool between the tokens<->map views: the same values,
on the device, bit-exact; any other slice stays on the host."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from arch.config import PRESETS
from arch.executable import HostStep
from compiler.compile import compile_model
from compiler.onnx.shape_inference import infer_shapes
from compiler.onnx.token_subsample import subsamples_as_pools
from sim.runtime.run import run
from tests.onnx_graphs import make_model
from tests.twin_check import assert_twin_agrees

C = 32
BIG = 2**63 - 1  # torch.export's "to the end"


def _subsampled(side: int, slices: list[tuple[list[int], list[int], list[int], list[int]]]):
    """x (1, side*side, 16) -> linear -> Reshape (1, side, side, C) -> the Slices (starts,
    ends, axes, steps) -> Reshape to tokens -> linear."""
    rng = np.random.default_rng(side + len(slices))
    inits: dict[str, np.ndarray] = {
        "w1": rng.normal(0, 0.3, (16, C)).astype(np.float32),
        "w2": rng.normal(0, 0.3, (C, 8)).astype(np.float32),
        "grid": np.array([1, side, side, C], np.int64),
        "back": np.array([1, -1, C], np.int64),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["t"], name="proj"),
        helper.make_node("Reshape", ["t", "grid"], ["g"], name="view"),
    ]
    value = "g"
    for k, arrays in enumerate(slices):
        names = [f"s{k}.{part}" for part in ("starts", "ends", "axes", "steps")]
        inits.update({n: np.array(a, np.int64) for n, a in zip(names, arrays, strict=True)})
        nodes.append(helper.make_node("Slice", [value, *names], [f"sl{k}"], name=f"slice{k}"))
        value = f"sl{k}"
    nodes += [
        helper.make_node("Reshape", [value, "back"], ["q"], name="unview"),
        helper.make_node("MatMul", ["q", "w2"], ["y"], name="fc"),
    ]
    return make_model(nodes, [1, side * side, 16], inits)


PICKS = {
    "two slices, step 2": (4, [([0], [BIG], [1], [2]), ([0], [BIG], [2], [2])]),
    "one slice of both axes": (4, [([0, 0], [BIG, BIG], [1, 2], [2, 2])]),
    "odd side, steps 2 and 1": (5, [([0], [5], [1], [2]), ([0], [BIG], [2], [1])]),
    "step 3, negative axes": (7, [([0, 0], [BIG, BIG], [-3, -2], [3, 3])]),
}


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["y"], {"x": x})[0]


@pytest.mark.parametrize("case", list(PICKS))
def test_a_token_subsample_is_a_strided_pool_on_the_device(case, tmp_path) -> None:
    side, slices = PICKS[case]
    model = _subsampled(side, slices)
    x = np.random.default_rng(3).standard_normal((1, side * side, 16)).astype(np.float32)
    rewritten = subsamples_as_pools(
        infer_shapes(onnx.ModelProto.FromString(model.SerializeToString()))
    )
    ops = [n.op_type for n in rewritten.graph.node]
    assert "Slice" not in ops and ops.count("MaxPool") == 1
    np.testing.assert_array_equal(_ort(rewritten, x), _ort(model, x))
    onnx.save(model, tmp_path / "m.onnx")
    exe = compile_model(tmp_path / "m.onnx", PRESETS["default"]).executable
    assert not [s for s in exe.steps if isinstance(s, HostStep)]
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert "maxpool" in [la.op for la in result.layers]
    assert_twin_agrees(model, exe.reference, [x])


@pytest.mark.parametrize(
    "slices",
    [
        [([1], [BIG], [1], [2])],  # starts at 1
        [([0], [3], [1], [2])],  # stops before the end
        [([0], [BIG], [3], [2])],  # along the channels
    ],
)
def test_any_other_slice_is_left_alone(slices) -> None:
    model = _subsampled(4, slices)
    rewritten = subsamples_as_pools(
        infer_shapes(onnx.ModelProto.FromString(model.SerializeToString()))
    )
    assert [n.op_type for n in rewritten.graph.node].count("Slice") == 1
    assert "MaxPool" not in [n.op_type for n in rewritten.graph.node]

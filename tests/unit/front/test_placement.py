"""Host placement (compiler/placement.py): only an Unplaceable refusal sends a node to the host;
a verifier's error - a compiler bug - fails the compile; calibration ranges are measured once
across the placement's attempts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import compiler.passes
from arch.config import PRESETS
from arch.executable.format import HostStep
from compiler import calibrate
from compiler.compile import compile_graph, compile_model
from compiler.errors import CompileError, Unplaceable, VerifyError
from compiler.frontend import compile_front, compile_placed
from compiler.ir import Node
from compiler.passes import BACK_PASSES, quantize
from compiler.placement import Placement, place
from compiler.plan import Plan

TINY = PRESETS["tiny"]


def _model(x_shape: list[int]) -> onnx.ModelProto:
    """conv c1 (1x1, 3 -> 8) -> MaxPool (1, 2) - ONNX node 0 and 1."""
    rng = np.random.default_rng(11)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["a"], name="c1", kernel_shape=[1, 1]),
        helper.make_node("MaxPool", ["a"], ["y"], name="pool", kernel_shape=[1, 2], strides=[1, 2]),
    ]
    inits = {
        "w": rng.normal(0, 0.5, (8, 3, 1, 1)).astype(np.float32),
        "b": rng.normal(0, 0.1, 8).astype(np.float32),
    }
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def _refusing(error: type[CompileError], stage: str, layer: str) -> Callable[[Plan], Plan]:
    """The back-end pass ``stage``, raising ``error`` for ``layer`` while it is on the array."""
    (run,) = [p for name, p in BACK_PASSES if name == stage]

    def refuse(plan: Plan) -> Plan:
        for la in plan.layers:
            if la.name == layer and la.target == "accel":
                raise error(la.name, la.node.op, "an invariant of the test does not hold")
        return run(plan)

    return refuse


def _replace(monkeypatch: pytest.MonkeyPatch, passes: str, name: str, run: Callable) -> None:
    """Pass ``name`` of the list ``passes`` (of :mod:`compiler.passes`) replaced by ``run``."""
    replaced = [(n, run if n == name else p) for n, p in getattr(compiler.passes, passes)]
    monkeypatch.setattr(compiler.passes, passes, replaced)


def _host_steps(model: onnx.ModelProto, tmp_path: Path) -> list[str]:
    """The names of the host steps of ``model`` compiled for the tiny config."""
    onnx.save(model, tmp_path / "m.onnx")
    exe = compile_model(tmp_path / "m.onnx", TINY).executable
    return [s.name for s in exe.steps if isinstance(s, HostStep)]


def test_a_verify_error_in_a_back_end_pass_fails_the_compile(monkeypatch, tmp_path) -> None:
    _replace(monkeypatch, "BACK_PASSES", "tile", _refusing(VerifyError, "tile", "c1"))
    with pytest.raises(VerifyError, match="node 'c1' .*an invariant of the test does not hold"):
        _host_steps(_model([1, 3, 2, 16]), tmp_path)


def test_an_unplaceable_layer_in_the_same_place_goes_to_the_host(monkeypatch, tmp_path) -> None:
    """The control of the test above: the same raise, as a refusal, moves c1 to the host."""
    model = _model([1, 3, 2, 16])
    assert _host_steps(model, tmp_path) == []
    _replace(monkeypatch, "BACK_PASSES", "tile", _refusing(Unplaceable, "tile", "c1"))
    assert _host_steps(model, tmp_path) == ["c1"]


def test_a_verify_error_in_a_front_end_pass_fails_the_compile(monkeypatch) -> None:
    """Raised while c1 is on the array: moving c1 to the host would hide it."""
    model = _model([1, 3, 2, 16])

    def broken(graph, *args):  # type: ignore[no-untyped-def]
        if any(n.name == "c1" and n.op == "conv" for n in graph.nodes):
            raise VerifyError("c1", "conv", "a broken invariant")
        return quantize.run(graph, *args)

    _replace(monkeypatch, "FRONT_PASSES", "quantize", broken)
    with pytest.raises(VerifyError, match="a broken invariant"):
        compile_front(model)


def test_a_refusal_for_a_node_already_on_the_host_is_final() -> None:
    def attempt(placement: Placement) -> None:
        raise Unplaceable(None, None, "cannot", indices=frozenset({3}))

    with pytest.raises(Unplaceable, match="cannot"):
        place(attempt, {3: "forced by the caller"})
    seen: list[dict[int, str]] = []

    def twice(placement: Placement) -> str:
        seen.append(dict(placement.forced))
        if 5 not in placement.forced:
            raise Unplaceable("n", "conv", "too wide", "narrower", indices=frozenset({5}))
        return "done"

    assert place(twice) == "done"
    assert seen == [{}, {5: "too wide (supported: narrower)"}]


def test_calibration_runs_once_across_the_placements_attempts(monkeypatch) -> None:
    """A 600-pixel row finds no tiling in the tiny config: the back end refuses c1 after the
    front end calibrated, and c1 goes to the host without a second calibration. The scales
    are those of a compile with c1 placed on the host from the start."""
    runs: list[list[str]] = []
    measure = calibrate.ranges

    def counted(model, names, inputs, method="minmax"):  # type: ignore[no-untyped-def]
        runs.append(list(names))
        return measure(model, names, inputs, method)

    monkeypatch.setattr(calibrate, "ranges", counted)
    model = _model([1, 3, 2, 600])
    graph, steps = compile_placed(model, back=lambda g: compile_graph(g, TINY))
    assert len(runs) == 1  # one per attempt (2) when each attempt calibrated again
    (host,) = [s for s in steps if isinstance(s, Node)]
    why = "no tiling fits: one output row is 600 pixels, ACC half holds 512 lines, ACT half 1024"
    assert graph.host_reasons[host.name] == f"c1 (Conv): {why}"
    runs.clear()
    placed = compile_front(model, host={0: why})
    assert len(runs) == 1
    assert {k: (t.scale, t.zero_point) for k, t in placed.tensors.items()} == {
        k: (t.scale, t.zero_point) for k, t in graph.tensors.items()
    }

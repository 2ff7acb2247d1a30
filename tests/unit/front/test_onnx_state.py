"""The ONNX front end's import state and handler registry (compiler/onnx/state.py, registry.py):
a refused handler leaves every field of the state as it was, whatever field it changed, and
handlers replace records rather than change them (what makes the rollback exact)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import zoo
from compiler.errors import CompileError
from compiler.ir import Node, Tensor
from compiler.onnx import SUPPORTED_OPS, importer, load_onnx
from compiler.onnx.prepare import prepare, read_model
from compiler.onnx.registry import HANDLERS
from compiler.onnx.state import ImportState
from tests.ort_quantized import branchy_net, quantize

FIELDS = [f.name for f in dataclasses.fields(ImportState)]


def _model(nodes: list[onnx.NodeProto], inits: dict[str, np.ndarray]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _conv_integer_model() -> onnx.ModelProto:
    """QuantizeLinear (uint8 codes: qdtype) -> ConvInteger -> Cast -> Mul -> Relu."""
    rng = np.random.default_rng(3)
    inits = {
        "s": np.float32(0.05),
        "z": np.array(128, np.uint8),
        "wq": rng.integers(-127, 128, (5, 3, 1, 1)).astype(np.int8),
        "k": rng.uniform(1e-4, 1e-3, (1, 5, 1, 1)).astype(np.float32),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q"),
        helper.make_node("ConvInteger", ["xq", "wq", "z"], ["acc"], name="convint"),
        helper.make_node("Cast", ["acc"], ["accf"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["accf", "k"], ["m"], name="scale"),
        helper.make_node("Relu", ["m"], ["y"], name="relu"),
    ]
    return _model(nodes, inits)


def _state_before_last_node(model: onnx.ModelProto) -> tuple[ImportState, int, onnx.NodeProto]:
    """The state after importing every node but the last (a Relu), which is returned."""
    proto = prepare(read_model(model)).proto
    st = ImportState.of(proto, {})
    (x,) = proto.graph.input
    st.tensors["x"], st.alias["x"] = Tensor("x", (1, 3, 4, 4)), "x"
    *first, last = proto.graph.node
    for index, node in enumerate(first):
        assert importer.try_handler(st, index, node, st.unique(node.name)) is None
    return st, len(first), last


def _same(a: Any, b: Any) -> bool:
    """Equal values, arrays by dtype and content, records field by field."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if dataclasses.is_dataclass(a):
        return _same(vars(a), vars(b))
    return bool(a == b)


def _changed_fields(before: dict[str, Any], st: ImportState) -> list[str]:
    return [name for name in FIELDS if not _same(before[name], getattr(st, name))]


def _change(st: ImportState, name: str) -> None:
    """Change field ``name`` as a handler might: a container in place, any other value replaced."""
    value = getattr(st, name)
    if isinstance(value, dict):
        value["#new"] = next(iter(value.values())) if value else 1
    elif isinstance(value, list):
        value.append(value[0] if value else Node("#new", "relu", ["x"], "#new"))
    elif isinstance(value, set):
        value.add("#new")
    elif isinstance(value, int):
        setattr(st, name, value + 1)
    else:
        setattr(st, name, copy.copy(value))
        assert getattr(st, name) is not value


def _refuse_after_changing(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    def handler(st: ImportState, node: onnx.NodeProto, _: str) -> None:
        _change(st, name)
        raise CompileError(node.name, node.op_type, "refused for the test")

    monkeypatch.setitem(HANDLERS, "Relu", handler)


@pytest.mark.parametrize("name", FIELDS)
def test_a_refused_handler_leaves_every_field_as_it_was(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    st, index, relu = _state_before_last_node(_conv_integer_model())
    assert st.qdtype == {"xq": "uint8"} and st.tensors["x"].zero_point == 0  # a real state
    before = copy.deepcopy({f: getattr(st, f) for f in FIELDS})
    _refuse_after_changing(monkeypatch, name)
    reason = importer.try_handler(st, index, relu, st.unique("relu"))
    assert reason == "refused for the test"
    st.names.discard("relu")  # reserved before the handler ran, as the importer does
    assert _changed_fields(before, st) == []


def test_the_check_sees_a_rollback_that_forgets_a_field(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rollback the importer had kept eight fields and forgot ``qdtype``."""
    st, index, relu = _state_before_last_node(_conv_integer_model())
    before = copy.deepcopy({f: getattr(st, f) for f in FIELDS})
    full = ImportState.snapshot
    monkeypatch.setattr(
        ImportState, "snapshot", lambda self: {k: v for k, v in full(self).items() if k != "qdtype"}
    )
    _refuse_after_changing(monkeypatch, "qdtype")
    importer.try_handler(st, index, relu, st.unique("relu"))
    st.names.discard("relu")
    assert _changed_fields(before, st) == ["qdtype"]


def _records(st: ImportState) -> list[Any]:
    return [
        *st.nodes,
        *st.tensors.values(),
        *st.pending.values(),
        *(p.node for p in st.pending.values()),
    ]


def _models(tmp_path: Path) -> list[onnx.ModelProto]:
    qdq = onnx.load(str(quantize(branchy_net(), "qdq-uint8", tmp_path)))
    # SiLU as x * Sigmoid(x) (a product table), attention's scaled q @ k^T, integer accumulators
    efficientnet = zoo.build("efficientnet", image_size=32)
    return [qdq, efficientnet, zoo.build("vit"), _conv_integer_model()]


def test_handlers_replace_records_rather_than_change_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What a snapshot of the state's containers relies on, checked around every handler
    call while real models (QDQ, SiLU tables, attention, ConvInteger) are imported."""
    changed: list[str] = []
    calls: list[str] = []

    def checked(handler):  # type: ignore[no-untyped-def]
        def run(st: ImportState, node: onnx.NodeProto, name: str) -> None:
            calls.append(node.op_type)
            records = _records(st)
            before = [copy.deepcopy(vars(r)) for r in records]
            try:
                handler(st, node, name)
            finally:
                for record, old in zip(records, before, strict=True):
                    if not _same(vars(record), old):
                        changed.append(f"{node.op_type} changed {type(record).__name__} in place")

        return run

    for op, handler in list(HANDLERS.items()):
        monkeypatch.setitem(HANDLERS, op, checked(handler))
    nodes = [n for model in _models(tmp_path) for n in load_onnx(model).nodes]
    assert changed == []
    assert {"Mul", "Cast", "QuantizeLinear", "DequantizeLinear"} <= set(calls)
    # the handlers that take over an earlier node (or tensor) ran
    assert any(n.op == "table" and n.attrs["function"] == "silu" for n in nodes)
    assert any(n.op == "batch_matmul" and "alpha" in n.params for n in nodes)
    assert any(n.onnx_nodes == ["convint", "scale"] for n in nodes)
    assert any(n.op == "conv" and "weight_q" in n.params for n in nodes)


def test_the_supported_ops_are_the_registered_handlers() -> None:
    assert set(SUPPORTED_OPS) == set(HANDLERS)
    assert {"Conv", "QLinearConv", "MatMul", "Sigmoid", "Resize", "Upsample", "FastGelu"} <= set(
        SUPPORTED_OPS
    )
    assert len(set(HANDLERS.values())) < len(HANDLERS)  # the table ops share one handler

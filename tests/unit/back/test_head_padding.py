"""Heads that are not whole lines, padded to whole lines (compiler/passes/head_padding.py): the
padded graph computes exactly what the unpadded one does, the attention runs on the device, and
the padded tensors are still checked against the fake-quantized twin."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest

from arch.config import PRESETS
from arch.executable import DeviceProgram, HostStep
from arch.reference import evaluate, quantize_input
from compiler.compile import compile_model
from compiler.errors import CompileError
from compiler.frontend import compile_front
from compiler.passes import head_padding, run_back
from sim.runtime.run import run
from tests.twin_check import assert_twin_agrees
from zoo.transformers import bert


def _front(model: onnx.ModelProto):
    return compile_front(model, seed=6, norm_unit=True)


def _norm(config: str):
    return dataclasses.replace(PRESETS[config], norm_unit=True)


@pytest.mark.parametrize(("hidden", "heads", "line"), [(24, 2, 16), (24, 4, 4), (40, 4, 16)])
def test_the_padded_graph_computes_what_the_unpadded_one_does(hidden, heads, line):
    """The integer reference of the padded graph: every tensor both graphs have is equal code
    for code (the logits among them), and the padded q, k, v hold the unpadded ones' codes
    head by head, then the zero point."""
    graph = _front(bert(tokens=9, hidden=hidden, heads=heads, layers=1, mlp=32, seed=2))
    padded = head_padding.run(graph.copy(), line)
    per_head = hidden // heads
    assert sum(name.endswith(head_padding.PAD) for name in padded.tensors) == 8  # 3 x 2 + 2
    x = np.random.default_rng(1).standard_normal(graph.tensors[graph.inputs[0]].shape)
    q = quantize_input(x, graph.tensors[graph.inputs[0]].scale, 0)
    want, got = evaluate(graph, q), evaluate(padded, q)
    shared = set(want) & set(got)
    assert set(graph.outputs) <= shared and len(shared) > len(graph.nodes) // 2
    for name in shared:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    for split in (n for n in graph.nodes if n.op in ("split_heads", "split_heads_t")):
        wide = got[f"{split.output}{head_padding.PAD}"]
        axis = 2 if split.op == "split_heads_t" else 3
        whole = -(-per_head // line) * line
        assert wide.shape[axis] == whole
        np.testing.assert_array_equal(np.take(wide, range(per_head), axis=axis), want[split.output])
        pad = np.take(wide, range(per_head, whole), axis=axis)
        zp = graph.tensors[graph.producer(split.inputs[0]).output].zero_point
        assert pad.size and np.all(pad == zp)


def test_heads_of_whole_lines_are_left_alone():
    graph = _front(bert(tokens=9, hidden=32, heads=2, layers=1, mlp=32, seed=2))
    before = {name: t.shape for name, t in graph.tensors.items()}
    head_padding.run(graph, 16)
    assert {name: t.shape for name, t in graph.tensors.items()} == before


@pytest.mark.parametrize("config", ["default", "tiny"])
def test_heads_of_12_run_on_the_device_in_one_program(config, tmp_path):
    """BERT with heads of 12 features (6 on the tiny config: not whole lines of 4 either): one
    device program, no host step, bit-exact; the twin compares the padded heads on their own
    features (was: the head splits and merges on the host, 3 programs)."""
    hidden = 24 if config == "default" else 12
    model = bert(tokens=10, hidden=hidden, heads=2, layers=1, mlp=48, seed=4)
    onnx.save(model, tmp_path / "m.onnx")
    exe = compile_model(tmp_path / "m.onnx", _norm(config)).executable
    assert not [s for s in exe.steps if isinstance(s, HostStep)]
    assert len([s for s in exe.steps if isinstance(s, DeviceProgram)]) == 1
    x = np.random.default_rng(6).standard_normal((1, 10, hidden)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    rows = assert_twin_agrees(model, exe.reference, [x])
    padded = [r for r in rows if r["tensor"].endswith(head_padding.PAD)]
    assert len(padded) >= 3 and all(r["count"] for r in padded)


def test_a_head_read_twice_is_left_to_the_layout_which_names_it():
    """A q head also read by something else (here: q's projection feeds two splits) keeps its
    12-feature heads, and the back end refuses it as before: node, op, reason."""
    graph = _front(bert(tokens=10, hidden=24, heads=2, layers=1, mlp=48, seed=4))
    split = next(n for n in graph.nodes if n.op == "split_heads")
    twin = type(split)(f"{split.name}.twin", split.op, list(split.inputs), "q2", dict(split.attrs))
    graph.nodes.insert(graph.nodes.index(split) + 1, twin)
    graph.tensors["q2"] = graph.tensors[split.output].__class__(
        "q2", graph.tensors[split.output].shape, graph.tensors[split.output].scale,
        graph.tensors[split.output].zero_point,
    )  # fmt: skip
    graph.outputs.append("q2")
    head_padding.run(graph, 16)
    assert (
        split.output in graph.tensors and f"{split.output}{head_padding.PAD}" not in graph.tensors
    )
    with pytest.raises(CompileError) as info:
        run_back(graph, _norm("default"))
    assert (info.value.node, info.value.op, info.value.reason, info.value.supported) == (
        split.name, split.op, "a head of 12 channels is not whole lines of 16",
        "head sizes that are multiples of 16 (the heads are then a view)",
    )  # fmt: skip

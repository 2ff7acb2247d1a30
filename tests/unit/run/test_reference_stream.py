"""The shared integer reference of a run (sim/runtime/reference_stream.py) and its reuse by the fp32
and SQNR comparisons (``known=``): the same tensors as an evaluation of their own, and never a
reference of another input."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from arch.config import PRESETS
from arch.reference import (
    ReferenceError,
    evaluate,
    evaluate_node,
    quantize_input,
    reuse_or_evaluate,
)
from compiler.compile import compile_model
from sim.quality.accuracy import compare_fp32
from sim.quality.sqnr import layer_sqnr
from sim.runtime import reference_stream
from sim.runtime.reference_stream import ReferenceStream, StoppedError


@pytest.fixture(scope="module")
def compiled():
    return compile_model("cnn", PRESETS["tiny"], image_size=16, seed=3)


def inputs(exe, seeds):
    return [
        np.random.default_rng(s).standard_normal(exe.input.shape).astype(np.float32) for s in seeds
    ]


def quantized(exe, x):
    return quantize_input(x, exe.input.scale or 1.0, exe.input.zero_point)


def test_stream_computes_every_tensor_of_evaluate(compiled):
    exe = compiled.executable
    [x] = inputs(exe, [11])
    stream = ReferenceStream(exe, x)
    last = exe.reference.nodes[-1].output
    assert last in stream.wait([last])
    got, want = stream.result(), evaluate(exe.reference, quantized(exe, x))
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_waiting_for_a_tensor_the_graph_lacks_is_an_error(compiled):
    stream = ReferenceStream(compiled.executable, inputs(compiled.executable, [12])[0])
    with pytest.raises(KeyError, match="no tensor 'no such tensor'"):
        stream.wait(["no such tensor"])


def test_an_evaluation_error_reaches_every_waiter(compiled):
    exe = compiled.executable
    wrong = np.zeros((1, *exe.input.shape[1:], 2), np.float32)  # not the graph's input shape
    stream = ReferenceStream(exe, wrong)
    with pytest.raises(ReferenceError, match="expected int8"):
        stream.wait([exe.reference.nodes[-1].output])
    with pytest.raises(ReferenceError, match="expected int8"):
        stream.result()


def test_a_reference_of_another_input_is_not_reused(compiled):
    exe = compiled.executable
    x, other = inputs(exe, [13, 14])
    known = evaluate(exe.reference, quantized(exe, other))
    assert reuse_or_evaluate(exe.reference, quantized(exe, other), known) is known
    fresh = reuse_or_evaluate(exe.reference, quantized(exe, x), known)
    assert fresh is not known
    want = evaluate(exe.reference, quantized(exe, x))
    last = exe.reference.nodes[-1].output
    np.testing.assert_array_equal(fresh[last], want[last])


def test_comparisons_with_the_runs_reference_equal_their_own(compiled):
    exe, source = compiled.executable, compiled.source
    x, other = inputs(exe, [15, 16])
    known = ReferenceStream(exe, x).result()
    assert compare_fp32(source, exe.reference, x, known) == compare_fp32(source, exe.reference, x)
    assert layer_sqnr(source, exe.reference, [x, other], known) == layer_sqnr(
        source, exe.reference, [x, other]
    )
    # A reference of another input is ignored, not compared.
    stale = ReferenceStream(exe, other).result()
    assert compare_fp32(source, exe.reference, x, stale) == compare_fp32(source, exe.reference, x)


def test_stop_ends_the_evaluation_after_the_node_being_computed(compiled, monkeypatch):
    exe = compiled.executable
    entered, release, computed = threading.Event(), threading.Event(), []

    def slow_node(graph, node, values):
        entered.set()
        release.wait()
        computed.append(node.output)
        return evaluate_node(graph, node, values)

    monkeypatch.setattr(reference_stream, "evaluate_node", slow_node)
    stream = ReferenceStream(exe, inputs(exe, [17])[0])
    assert entered.wait(10)  # the thread is inside the first node (else stop() may come first)
    threading.Timer(0.2, release.set).start()
    stream.stop()  # waits for the first node, then the thread ends
    assert computed == [exe.reference.nodes[0].output]
    with pytest.raises(StoppedError):
        stream.result()
    assert len(exe.reference.nodes) > 1

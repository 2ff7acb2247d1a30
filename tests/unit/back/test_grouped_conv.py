"""Grouped (not depthwise) convolutions on the array: canonicalize cuts them into pieces of a few
groups whose channels fill whole 16-channel lines - channel-slice views of the input, one
block-diagonal conv per piece, a concat of the pieces' outputs - run on the ISA simulator against
onnxruntime (the reference is ``reference_ops.conv2d`` with its groups)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from arch.config import PRESETS
from arch.executable import HostStep
from compiler.compile import compile_model
from compiler.onnx import load_onnx
from compiler.passes import canonicalize
from sim.quality.accuracy import compare_fp32
from sim.runtime.run import run
from tests.unit.front.test_partition import _run_and_reload, _saved, conv, model_of


def grouped_model(cin: int, cout: int, group: int, seed: int, residual: bool = False):
    """conv 3->cin, grouped 3x3 conv cin->cout (+ BN-free Relu, or a residual Add), conv."""
    rng = np.random.default_rng(seed)
    c1, i1 = conv("c1", "x", "a", 3, cin, rng)
    w = rng.normal(0, (2 / (cin // group * 9)) ** 0.5, (cout, cin // group, 3, 3))
    inits = {**i1, "gw": w.astype(np.float32), "gb": rng.normal(0, 0.1, cout).astype(np.float32)}
    grouped = helper.make_node(
        "Conv", ["a", "gw", "gb"], ["b"], name="grouped", group=group, pads=[1] * 4
    )
    nodes = [c1, grouped]
    if residual:  # cin == cout: the Add fuses into the grouped conv as its residual
        nodes.append(helper.make_node("Add", ["b", "a"], ["r"], name="res"))
    else:
        nodes.append(helper.make_node("Relu", ["b"], ["r"], name="relu"))
    c3, i3 = conv("c3", "r", "y", cout, 8, rng, k=1)
    return model_of([*nodes, c3], {**inits, **i3}, [1, 3, 10, 10])


CASES = {  # name: (cin, cout, group, residual, pieces' groups)
    "width8": (32, 32, 4, False, [2, 2]),
    "unequal": (24, 48, 3, False, [2, 1]),  # 8 in / 16 out per group; the last piece partial
    "whole": (16, 16, 2, False, None),  # one line in and out: block-diagonal, not cut
    "width4_residual": (32, 32, 8, True, [4, 4]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_grouped_conv_is_cut_into_line_pieces(case) -> None:
    cin, cout, group, residual, pieces = CASES[case]
    g = canonicalize.run(load_onnx(grouped_model(cin, cout, group, 1, residual)))
    convs = [n for n in g.nodes if n.op == "conv" and n.name.startswith("grouped")]
    if pieces is None:
        assert [n.attrs["group"] for n in convs] == [group]
        assert not [n for n in g.nodes if n.op == "channel_slice"]
        return
    assert [n.attrs["group"] for n in convs] == pieces
    slices = [n for n in g.nodes if n.op == "channel_slice"]
    assert len(slices) == len(pieces) * (2 if residual else 1)
    [concat] = [n for n in g.nodes if n.op == "concat"]
    assert concat.inputs == [n.output for n in convs]
    assert sum(g.tensors[n.output].shape[1] for n in convs) == cout


@pytest.mark.parametrize("config", ["tiny", "default"])
@pytest.mark.parametrize("case", list(CASES))
def test_grouped_conv_runs_on_the_array(case, config, tmp_path) -> None:
    cin, cout, group, residual, _ = CASES[case]
    model = grouped_model(cin, cout, group, 2, residual)
    compiled = compile_model(_saved(model, tmp_path), PRESETS[config])
    exe = compiled.executable
    assert not [s for s in exe.steps if isinstance(s, HostStep)]
    x = np.random.default_rng(3).standard_normal(exe.input.shape).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert compare_fp32(compiled.source, exe.reference, x)["cosine_vs_fp32"] > 0.99
    # the report counts the grouped conv's real MACs (not the block-diagonal zeros)
    grouped_macs = sum(la.macs for la in result.layers if la.name.startswith("grouped"))
    assert grouped_macs == 100 * cout * (cin // group) * 9


def test_grouped_executable_reloads(tmp_path) -> None:
    """The channel_slice views travel in the executable's reference graph: a saved copy
    reloads and runs the same."""
    _run_and_reload(grouped_model(24, 48, 3, 6), tmp_path, (1, 3, 10, 10))

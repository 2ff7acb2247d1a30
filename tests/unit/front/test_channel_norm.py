"""LayerNorm over a map's channels (timm's LayerNorm2d: Transpose, LayerNormalization,
Transpose) as a LayerNorm over its pixels as tokens (:mod:`compiler.onnx.channel_norm`): the
rewrite computes what the export computes (onnxruntime on both), and with the norm unit the
whole network is one device program, bit-exact, in the twin's rule."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from arch.config import PRESETS
from arch.executable import DeviceProgram
from compiler.compile import compile_model
from compiler.onnx.channel_norm import norms_over_channels
from compiler.onnx.shape_inference import infer_shapes
from sim.runtime.run import run
from tests.twin_check import assert_twin_agrees
from zoo._graph import GraphBuilder

C, H, W = 8, 5, 3  # 15 pixels: not a multiple of the tiny array's 4 lanes


def _layer_norm_2d(g: GraphBuilder, name: str, x: str) -> str:
    pixels = g.node("Transpose", f"{name}.to_pixels", [x], perm=[0, 2, 3, 1])
    gamma = g.param(f"{name}.gamma", g.rng.uniform(0.5, 1.5, C))
    beta = g.param(f"{name}.beta", g.rng.normal(0.0, 0.2, C))
    norm = g.node("LayerNormalization", f"{name}.ln", [pixels, gamma, beta], axis=-1, epsilon=1e-6)
    return g.node("Transpose", f"{name}.to_map", [norm], perm=[0, 3, 1, 2])


def _model(extra_reader: bool = False) -> onnx.ModelProto:
    """conv -> LayerNorm2d -> depthwise conv -> LayerNorm2d -> 1x1 conv (a ConvNeXt stem and
    block in small); ``extra_reader``: the first channels-last map is also an output."""
    g = GraphBuilder(11)
    x = g.conv("stem", "input", 3, C, 3, pad=1, bias=True)
    x = _layer_norm_2d(g, "norm0", x)
    x = g.conv("dw", x, C, C, 3, pad=1, group=C, bias=True)
    x = _layer_norm_2d(g, "norm1", x)
    g.conv("pw", x, C, 16, 1, bias=True)
    outputs = {"pw.out": [1, 16, H, W]}
    if extra_reader:
        g.node("Relu", "side", ["norm0.to_pixels.out"], output="side")
        outputs["side"] = [1, H, W, C]
    return g.model("layer_norm_2d", {"input": [1, 3, H, W]}, outputs, "LayerNorm2d")


def _ort(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"input": x})


def test_the_rewrite_computes_what_the_export_computes():
    model = _model()
    rewritten = norms_over_channels(infer_shapes(model))
    ops = [n.op_type for n in rewritten.graph.node]
    assert ops.count("Reshape") == 4  # a pair around each LayerNorm
    norms = [n for n in rewritten.graph.node if n.op_type == "LayerNormalization"]
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in rewritten.graph.value_info}  # fmt: skip
    assert all(shapes[n.input[0]] == [1, H * W, C] for n in norms)
    x = np.random.default_rng(3).standard_normal((1, 3, H, W)).astype(np.float32)
    np.testing.assert_allclose(_ort(rewritten, x)[0], _ort(model, x)[0], rtol=1e-5, atol=1e-5)


def test_a_channels_last_map_read_elsewhere_is_left_alone():
    rewritten = norms_over_channels(infer_shapes(_model(extra_reader=True)))
    ops = [n.op_type for n in rewritten.graph.node]
    assert ops.count("Reshape") == 2  # only the second LayerNorm2d


@pytest.mark.parametrize("config", ["tiny", "default"])
def test_layer_norm_2d_runs_on_the_norm_unit_in_one_program(config, tmp_path):
    """Both LayerNorms on the norm unit over the map's pixels (before: each Transpose pair and
    its LayerNorm a host step), one device program, bit-exact, in the twin's rule."""
    model = _model()
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    exe = compile_model(path, dataclasses.replace(PRESETS[config], norm_unit=True)).executable
    assert [type(s) for s in exe.steps] == [DeviceProgram]
    assert [n.op for n in exe.reference.nodes].count("layer_norm") == 2
    x = np.random.default_rng(5).standard_normal((1, 3, H, W)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch
    assert_twin_agrees(model, exe.reference, [x])


def test_a_view_between_host_steps_is_no_program_of_its_own(tmp_path):
    """Without the norm unit, a LayerNorm2d after a host op leaves its first view (map to
    tokens) alone between two host steps: no device program of no instruction (it had one,
    and the run stopped with an IndexError) - the view goes to the host with its LayerNorm."""
    g = GraphBuilder(12)
    x = g.conv("stem", "input", 3, C, 3, pad=1, bias=True)
    x = g.node("Sin", "host_only", [x])
    x = _layer_norm_2d(g, "norm0", x)
    g.conv("pw", x, C, 16, 1, bias=True)
    model = g.model("view_alone", {"input": [1, 3, H, W]}, {"pw.out": [1, 16, H, W]}, "")
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    exe = compile_model(path, PRESETS["default"]).executable
    programs = [s for s in exe.steps if isinstance(s, DeviceProgram)]
    assert programs and all(p.layers for p in programs)
    x = np.random.default_rng(8).standard_normal((1, 3, H, W)).astype(np.float32)
    result = run(exe, x, "isa")
    assert result.bit_exact, result.first_mismatch

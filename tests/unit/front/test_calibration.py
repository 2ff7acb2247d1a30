"""Calibration users control: each method's clip threshold against hand-computed histograms
and arrays, the quantize pass using it, per-layer SQNR against a hand computation on the ISA
simulator's output, and ``--calib`` / ``--calib-method`` from the command line (good runs and
one-line errors)."""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import zoo
from arch.config import PRESETS
from compiler import calib_methods as cm
from compiler import calibrate
from compiler.calibrate import default_calibration, run_onnx
from compiler.compile import compile_model
from compiler.errors import CompileError
from compiler.frontend import compile_front
from sim.quality.sqnr import layer_sqnr
from sim.runtime.inputs import noise_input
from sim.runtime.run import run
from tests.unit.run.test_cli_errors import assert_usage_error, in_process


def test_percentile_hand_computed() -> None:
    # counts 5 3 1 1 over [0,1) [1,2) [2,3) [3,4]: cumulative 0.5 0.8 0.9 1.0
    hist = np.array([5, 3, 1, 1])
    assert cm.percentile_threshold(hist, 4.0, 80) == 2.0  # reached in bin 1: its upper edge
    assert cm.percentile_threshold(hist, 4.0, 85) == 3.0
    assert cm.percentile_threshold(hist, 4.0, 50) == 1.0
    assert cm.percentile_threshold(hist, 4.0, 100) == 4.0


def test_entropy_hand_computed() -> None:
    """Two quantized levels over four bins. [2, 6, 1, 3]: i=2 keeps P = [2, 10]/12 against
    Q = [2, 6]/8, KL = 1/6 ln(2/3) + 5/6 ln(10/9) = 0.0202; i=3: P = [2, 6, 4]/12, Q = [2, 3.5,
    3.5]/9, KL = 0.0263; i=4: Q = [4, 4, 2, 2]/12, KL = 0.1308 -> two bins kept, T = 2.0.
    [4, 2, 0, 2]: i=2 KL 0.0589; i=3 Q is empty at the outlier bin (infinite); i=4 P = [4, 2,
    0, 2]/8, Q = [3, 3, 0, 2]/8, KL = 0.0425 -> T = 4.0."""
    assert cm.entropy_threshold(np.array([2, 6, 1, 3]), 4.0, quant_bins=2) == 2.0
    assert cm.entropy_threshold(np.array([4, 2, 0, 2]), 4.0, quant_bins=2) == 4.0
    assert cm.entropy_threshold(np.array([4, 2, 0, 2]), 4.0) == 4.0  # fewer bins than levels


def test_entropy_clips_rare_outliers() -> None:
    rng = np.random.default_rng(5)
    x = np.abs(rng.standard_normal(200_000))
    x[:4] = 40.0
    hist, _ = np.histogram(x, cm.BINS, (0.0, 40.0))
    t = cm.entropy_threshold(hist, 40.0)
    assert 2.5 < t < 6.0  # a few sigma of the bulk, not the outliers


def test_mse_hand_computed() -> None:
    """Counts 4 at centre 1.5, 1 at 3.5; codes -2..2 (levels=2), s = T/2. T=1: 1.5 and 3.5 clip
    to 1 -> 4*0.25 + 6.25 = 7.25; T=2: 1.5 -> 2 (0.25 each), 3.5 -> 2 (2.25): 3.25; T=3:
    1.5 exact, 3.5 -> 3 (0.25): 0.25; T=4: 1.5 -> 2 (1.0 in all), 3.5 -> 4 (0.25): 1.25."""
    assert cm.mse_threshold(np.array([0, 4, 0, 1]), 4.0, levels=2) == 3.0


def test_mse_finds_the_analytic_optimum_of_a_uniform_tensor() -> None:
    """|x| uniform on [0, 1], 127 levels: rounding below T costs T * s**2 / 12 with s = T/127,
    clipping above T costs (1 - T)**3 / 3; their derivatives balance at 1 - T = T / 254, so
    T = 254/255 = 0.99608 - a little clipping, not minmax's 1.0 (within a bin, 1/2048)."""
    x = np.random.default_rng(11).random(2_000_000)
    amax = float(x.max())
    hist, _ = np.histogram(x, cm.BINS, (0.0, amax))
    t = cm.mse_threshold(hist, amax)
    assert abs(t - 254 / 255) <= amax / cm.BINS and t < amax - 2 * amax / cm.BINS


@pytest.mark.parametrize(
    ("text", "expected"),
    [("minmax", ("minmax", None)), ("percentile", ("percentile", 99.99)),
     ("percentile:99.9", ("percentile", 99.9)), ("entropy", ("entropy", None)),
     ("mse", ("mse", None))],
)  # fmt: skip
def test_method_names(text: str, expected: tuple[str, float | None]) -> None:
    assert cm.parse_method(text) == expected


@pytest.mark.parametrize("text", ["kl", "percentile:0", "percentile:101", "percentile:x", "mse:3"])
def test_bad_method_names(text: str) -> None:
    with pytest.raises(cm.CalibMethodError, match="percentile"):
        cm.parse_method(text)


def neg_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["y"], name="neg")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_ranges_on_small_arrays() -> None:
    """|x| over two inputs: 1.2 1.4 1.6 1.8 1.5 (bin 1 of [0, 4] in 4 bins) and 4.0 (bin 3):
    counts [0, 5, 0, 1], cumulative [0, 5/6, 5/6, 1]."""
    xs = [np.array([[-1.2, 1.4, -1.6]], np.float32), np.array([[1.8, -4.0, 1.5]], np.float32)]
    model = neg_model()

    def ranges(method: str) -> dict[str, float]:
        return calibrate.ranges(model, ["x", "y"], xs, method, bins=4)

    assert ranges("minmax") == {"x": 4.0, "y": 4.0}
    assert ranges("percentile:80") == {"x": 2.0, "y": 2.0}
    assert ranges("percentile:90") == {"x": 4.0, "y": 4.0}
    # MSE with 127 levels: clipping 3.5 to 3.0 costs 0.25; T=4 rounds 1.5 and 3.5 within 0.02.
    assert ranges("mse") == {"x": 4.0, "y": 4.0}
    assert ranges("entropy") == {"x": 4.0, "y": 4.0}  # 4 bins: fewer than the 128 levels
    with pytest.raises(CompileError, match="unknown calibration method 'max'"):
        ranges("max")


@pytest.mark.parametrize("method", ["minmax", "percentile:99", "entropy", "mse"])
def test_quantize_pass_scales_by_the_method(method: str) -> None:
    """Every calibrated activation of the MLP gets scale T/127 with T from calibrate.ranges."""
    model = zoo.build("mlp")
    inputs = default_calibration(model, count=6, seed=3)
    graph = compile_front(model, calibration=inputs, calib_method=method)
    names = [t for t in graph.tensors if t in {o for n in model.graph.node for o in n.output}]
    assert names
    expected = calibrate.ranges(model, names, inputs, method)
    for name in names:
        assert graph.tensors[name].scale == pytest.approx(expected[name] / 127.0, rel=1e-12)


def test_sqnr_against_the_simulators_output() -> None:
    """The last layer's SQNR is 10 log10(sum(ref^2) / sum((ref - int8)^2)) of onnxruntime's
    fp32 logits and the ISA simulator's dequantized int8 logits, summed over the inputs."""
    compiled = compile_model("mlp", PRESETS["tiny"], seed=2)
    xs = [noise_input((1, 64), seed) for seed in (1, 2, 3)]
    entries = layer_sqnr(compiled.source, compiled.executable.reference, xs)
    signal = noise = 0.0
    for x in xs:
        ref = run_onnx(compiled.source, x)["logits"].astype(np.float64)
        got = run(compiled.executable, x, "isa").outputs["logits"].astype(np.float64)
        signal += float(np.sum(ref**2))
        noise += float(np.sum((ref - got) ** 2))
    last = entries[-1]
    assert last["tensor"] == "logits"
    assert last["sqnr_db"] == pytest.approx(10 * math.log10(signal / noise), abs=0.01)
    assert all(10 < e["sqnr_db"] < 60 for e in entries), entries


def test_default_input_is_no_calibration_input() -> None:
    shape = (1, 3, 16, 16)
    calibration = default_calibration(zoo.build("cnn", image_size=16), seed=0)
    x = noise_input(shape, 0)
    assert not any(np.array_equal(x, c) for c in calibration)


def test_cli_calibration_options(tmp_path, capsys) -> None:
    """--calib .npy batch and image folder, --calib-method: stated in report.json; bad ones:
    one error line, exit code 2."""
    from PIL import Image

    rng = np.random.default_rng(8)
    batch = tmp_path / "calib.npy"
    np.save(batch, rng.standard_normal((5, 64)).astype(np.float32))
    out = tmp_path / "run"
    mlp = ("--model", "mlp", "--config", "tiny")
    done = in_process(
        capsys, *mlp, "--calib", str(batch), "--calib-method", "mse", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["calibration"] == {"method": "mse", "source": str(batch), "count": 5}
    assert report["input"]["source"].startswith("seeded noise")
    assert [e["tensor"] for e in report["accuracy"]["sqnr"]][-1] == "logits"
    assert (out / "sqnr.png").stat().st_size > 1000
    assert "calibration: mse on 5 inputs" in done.stdout

    folder = tmp_path / "digits"
    folder.mkdir()
    for i in range(3):
        pixels = (rng.random((8, 8)) * 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / f"{i}.png")
    out = tmp_path / "run2"
    done = in_process(capsys, "--model", "digits", "--calib", str(folder), "--eval", "0",
                      "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert (
        report["calibration"]["count"] == 3
        and report["calibration"]["preprocess"]["name"] == "unit"
    )

    wrong = tmp_path / "wrong.npy"
    np.save(wrong, rng.standard_normal((5, 63)).astype(np.float32))
    line = assert_usage_error(in_process(capsys, *mlp, "--calib", str(wrong)))
    assert "(5, 63)" in line and "(N, 64)" in line
    line = assert_usage_error(in_process(capsys, *mlp, "--calib-method", "kl"))
    assert "minmax, percentile, entropy, mse" in line
    line = assert_usage_error(in_process(capsys, *mlp, "--calib", str(tmp_path / "nope.npy")))
    assert "does not exist" in line
    empty = tmp_path / "empty"
    empty.mkdir()
    line = assert_usage_error(in_process(capsys, *mlp, "--calib", str(empty)))
    assert "holds no image" in line
    line = assert_usage_error(in_process(capsys, *mlp, "--calib", str(folder)))
    assert "the model takes (1, 64), not an image" in line
    exe = tmp_path / "run" / "mlp.cosim"
    line = assert_usage_error(in_process(capsys, "--bundle", str(exe), "--calib", str(batch)))
    assert "not to --bundle" in line

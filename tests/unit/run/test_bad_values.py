"""Values that once ran to a silent wrong answer: NaN or infinite weights, biases and input
images, an input array of another layout or complex dtype, and NaN in report.json. Each is now
one ``error:`` line naming what is wrong, exit code 2 (or a clear exception in the API)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from arch.config import PRESETS
from compiler.compile import compile_model
from compiler.errors import CompileError
from sim.app import api
from sim.app import report as reports
from sim.runtime.inputs import InputError, check_input
from tests.unit.run.test_cli_errors import assert_usage_error, in_process


def conv_model(path: Path, weight: np.ndarray, bias: np.ndarray) -> Path:
    """x (1,3,8,8) -> Conv(w, b) -> Relu -> y."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"], name="relu1"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        initializer=[numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.save(model, str(path))
    return path


@pytest.fixture
def weights() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), rng.normal(0, 0.1, 8).astype(
        np.float32
    )


@pytest.mark.parametrize(
    ("where", "value", "names"),
    [
        ("w", np.nan, ("'w'", "NaN", "1 of its 216")),
        ("b", np.nan, ("'b'", "NaN")),
        ("w", np.inf, ("conv1", "'w'", "infinite")),
        ("b", -np.inf, ("conv1", "'b'", "infinite")),
    ],
)
def test_non_finite_weights_and_biases_are_refused(
    weights, where, value, names, tmp_path, capsys
) -> None:
    w, b = (a.copy() for a in weights)
    (w if where == "w" else b).reshape(-1)[5] = value
    model = conv_model(tmp_path / "m.onnx", w, b)
    out = tmp_path / "o"
    line = assert_usage_error(
        in_process(capsys, "--model", str(model), "--config", "tiny", "--out", str(out)), *names
    )
    assert "index [" in line
    assert not out.exists()


def test_finite_weights_compile(weights, tmp_path) -> None:
    compile_model(conv_model(tmp_path / "m.onnx", *weights), PRESETS["tiny"])  # no error


def test_non_finite_constant_in_the_api_is_a_compile_error(weights, tmp_path) -> None:
    w, b = weights
    w = w.copy()
    w[0, 0, 0, 0] = np.nan
    with pytest.raises(CompileError, match="NaN"):
        compile_model(conv_model(tmp_path / "m.onnx", w, b), PRESETS["tiny"])


@pytest.fixture(scope="module")
def cnn_input_shape() -> tuple[int, ...]:
    return tuple(compile_model("cnn", PRESETS["tiny"], image_size=8).executable.input.shape)


def _image_cases(shape: tuple[int, ...]) -> list[tuple[str, np.ndarray, tuple[str, ...]]]:
    rng = np.random.default_rng(11)
    good = rng.standard_normal(shape).astype(np.float32)
    nan, inf = good.copy(), good.copy()
    nan[0, 1, 2, 3] = np.nan
    inf[0, 0, 0, 1] = -np.inf
    nhwc = good.transpose(0, 2, 3, 1).copy()  # the right element count, the wrong layout
    return [
        ("nan", nan, ("NaN or infinite", "[0, 1, 2, 3]")),
        ("inf", inf, ("1 NaN or infinite", "[0, 0, 0, 1]")),
        ("nhwc", nhwc, (str(nhwc.shape), str(shape), "NCHW")),
        ("complex", good.astype(np.complex64) * (1 + 1j), ("complex",)),
    ]


def test_bad_input_images_are_refused(cnn_input_shape, tmp_path, capsys) -> None:
    for name, array, names in _image_cases(cnn_input_shape):
        path = tmp_path / f"{name}.npy"
        np.save(path, array)
        args = ("--model", "cnn", "--config", "tiny", "--image-size", "8", "--image", str(path))
        assert_usage_error(in_process(capsys, *args, "--out", str(tmp_path / "o")), *names)
    assert not (tmp_path / "o").exists()


def test_bad_inputs_in_the_api(cnn_input_shape) -> None:
    exe = compile_model("cnn", PRESETS["tiny"], image_size=8).executable
    for _name, array, names in _image_cases(cnn_input_shape):
        with pytest.raises(InputError) as info:
            api.run(exe, array, "isa")
        assert all(n in str(info.value) for n in names), str(info.value)


def test_input_without_its_batch_dimension_is_taken() -> None:
    x = np.random.default_rng(1).standard_normal((3, 4, 4))
    y = check_input(x, (1, 3, 4, 4))
    assert y.shape == (1, 3, 4, 4) and y.dtype == np.float32
    assert np.array_equal(y[0], x.astype(np.float32))


def test_report_json_has_no_bare_nan(tmp_path) -> None:
    exe = compile_model("mlp", PRESETS["tiny"], seed=1).executable
    x = np.random.default_rng(1).standard_normal(exe.input.shape).astype(np.float32)
    _outputs, report = api.run(exe, x, "isa")
    report["accuracy"] = {"cosine_vs_fp32": math.nan, "top1_agree_fp32": True}
    report["total"]["utilization"] = math.inf
    paths = reports.write(report, tmp_path)

    def refuse(token: str) -> None:
        raise AssertionError(f"report.json holds {token}, which is not JSON")

    data = json.loads(paths["json"].read_text(), parse_constant=refuse)
    assert data["accuracy"]["cosine_vs_fp32"] is None and data["total"]["utilization"] is None


def test_image_size_has_an_upper_bound(tmp_path, capsys) -> None:
    args = ("--model", "resnet", "--image-size", "100000", "--out", str(tmp_path / "o"))
    line = assert_usage_error(in_process(capsys, *args), "100000", "at most 1024")
    assert "'resnet'" in line


def test_out_of_memory_is_one_line(tmp_path, capsys, monkeypatch) -> None:
    import sim.app.session

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(sim.app.session, "load_executable", exhausted)
    assert_usage_error(in_process(capsys, "--model", "cnn", "--out", str(tmp_path / "o")), "memory")


def test_oversized_dram_image_is_a_format_error(tmp_path) -> None:
    from arch import executable
    from arch.executable import ExecutableError
    from sim.runtime.run import run

    exe = compile_model("mlp", PRESETS["tiny"], seed=1).executable
    [program] = exe.programs
    dram = exe.config.dram_bytes
    big = np.zeros(dram + 64, np.uint8)
    big[: program.image.size] = program.image
    object.__setattr__(program, "image", big)
    x = np.random.default_rng(1).standard_normal(exe.input.shape).astype(np.float32)
    with pytest.raises(ExecutableError, match=f"more than the config's DRAM \\({dram}\\)"):
        run(exe, x, "isa")
    with pytest.raises(ExecutableError, match="more than the config's DRAM"):
        executable.save(exe, tmp_path / "big.cosim")
    assert not (tmp_path / "big.cosim").exists()


def test_messages_that_once_misled(tmp_path, capsys) -> None:
    from PIL import Image

    gray_2d = tmp_path / "gray.png"
    Image.fromarray((np.random.default_rng(4).random((32, 32)) * 255).astype(np.uint8)).save(
        gray_2d
    )
    out = ("--out", str(tmp_path / "o"))
    cnn = ("--model", "cnn", "--config", "tiny", "--image-size", "32")
    # A grayscale PNG was once refused as "3x32"; now it is converted to RGB, and the report
    # says how it was preprocessed (sim/app/images.py; tests/unit/run/test_images.py).
    ran = in_process(capsys, *cnn, "--image", str(gray_2d), "--out", str(tmp_path / "gray"))
    assert ran.returncode == 0, ran.stderr
    assert "preprocess: imagenet" in ran.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    line = assert_usage_error(in_process(capsys, *cnn, "--image", str(empty), *out))
    assert "holds no image" in line and "png" in line
    line = assert_usage_error(in_process(capsys, *cnn, "--max-cycles", "0", *out))
    assert "--max-cycles must be a positive integer, not 0" in line
    assert not (tmp_path / "o").exists()

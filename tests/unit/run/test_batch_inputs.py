"""Batches end to end: a model of fixed batch N > 1 runs as N programs of batch 1 (one batch
for the backend) and matches onnxruntime on the original batch-N model; ``IMAGE=`` a folder
runs every image; one-line errors for batches that do not fit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

import zoo
from arch.config import PRESETS
from compiler.compile import compile_model
from sim.runtime.batch import run_batch
from tests.unit.run.test_cli_errors import assert_usage_error, in_process

BATCH = 3


def batched_model(path: Path, extra_add: bool = False) -> Path:
    """Conv 3->16, Relu, GlobalAveragePool, Reshape to [BATCH, 16] (a constant holding the
    batch, as exporters write it), Gemm 16->10, input (BATCH, 3, 8, 8); seeded weights."""
    rng = np.random.default_rng(21)
    inits = [
        numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal((10, 16)).astype(np.float32) * 0.3, "fw"),
        numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "fb"),
        numpy_helper.from_array(np.array([BATCH, 16], np.int64), "flat"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["g"], name="gap"),
        helper.make_node("Reshape", ["g", "flat"], ["f"], name="reshape"),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1, name="fc"),
    ]
    if extra_add:  # a constant of batch BATCH: the batch is more than the first dimension
        inits.append(numpy_helper.from_array(np.ones((BATCH, 10), np.float32), "k"))
        nodes[-1].output[0] = "y0"
        nodes.append(helper.make_node("Add", ["y0", "k"], ["y"], name="add"))
    graph = helper.make_graph(
        nodes,
        "batched",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, str(path))
    return path


def test_batch_model_matches_onnxruntime_on_the_whole_batch(tmp_path) -> None:
    path = batched_model(tmp_path / "b.onnx")
    compiled = compile_model(path, PRESETS["tiny"])
    assert compiled.batch == BATCH and compiled.executable.input.shape == (1, 3, 8, 8)
    x = np.random.default_rng(4).standard_normal((BATCH, 3, 8, 8)).astype(np.float32)
    result = run_batch(compiled.executable, list(x[:, None]), "isa")
    assert result.bit_exact
    ours = np.concatenate([out["y"] for out in result.outputs])
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    assert ours.shape == want.shape == (BATCH, 10)
    # The batch-1 model (what was compiled) computes each row of the batch-N model exactly.
    assert compiled.source is not None
    single = ort.InferenceSession(
        compiled.source.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    rows = np.concatenate([single.run(None, {"x": row[None]})[0] for row in x])
    np.testing.assert_allclose(rows, want, rtol=1e-5, atol=1e-5)
    for got, ref in zip(ours, want, strict=True):  # int8 (4 noise calibration inputs) vs fp32
        cosine = float(got @ ref / (np.linalg.norm(got) * np.linalg.norm(ref)))
        assert cosine > 0.99 and got.argmax() == ref.argmax()


def test_batch_model_from_the_command_line(tmp_path, capsys) -> None:
    path = batched_model(tmp_path / "b.onnx")
    x = np.random.default_rng(5).standard_normal((BATCH, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "run"
    model = ("--model", str(path), "--config", "tiny")
    done = in_process(capsys, *model, "--image", str(tmp_path / "x.npy"), "--out", str(out))
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["input"]["batch"] == BATCH
    images = report["input"]["images"]
    assert [i["file"] for i in images] == [f"x.npy[{i}]" for i in range(BATCH)]
    assert all(i["bit_exact"] for i in images)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})  # the original batch-N model on the whole batch
    assert [i["top1_fp32"] for i in images] == want.argmax(axis=1).tolist()
    np.save(tmp_path / "one.npy", x[:1])
    line = assert_usage_error(in_process(capsys, *model, "--image", str(tmp_path / "one.npy")))
    assert f"({BATCH}, 3, 8, 8)" in line
    bad = batched_model(tmp_path / "bad.onnx", extra_add=True)
    line = assert_usage_error(in_process(capsys, "--model", str(bad), "--config", "tiny"))
    assert f"batch {BATCH} cannot run as {BATCH} programs of batch 1" in line


def test_image_folder_of_real_digits(tmp_path, capsys) -> None:
    """Held-out digits saved as 8-bit grayscale PNGs (what a user has) run as one batch; each
    image's int8 top-1 is its label (images the fp32 model gets right) and agrees with fp32."""
    held = zoo.held_out("digits")
    assert held is not None
    folder = tmp_path / "digits"
    folder.mkdir()
    for i in range(4):
        pixels = np.rint(held.x[i, 0] * 255).astype(np.uint8)
        Image.fromarray(pixels, "L").save(folder / f"{i}_label{held.y[i]}.png")
    out = tmp_path / "run"
    done = in_process(
        capsys, "--model", "digits", "--image", str(folder), "--eval", "0", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["input"]["files"] == 4 and report["input"]["preprocess"]["name"] == "unit"
    for row in report["input"]["images"]:
        label = int(row["file"].split("label")[1][0])
        assert row["bit_exact"] and row["top1_agree_fp32"]
        assert row["top1_int8"] == label, row
    assert "4 images: top-1 agrees with fp32 on 4" in done.stdout


def test_comparisons_a_pool_thread_has_not_taken_yet_still_reach_the_report(
    tmp_path, capsys, monkeypatch
) -> None:
    """A run can end before a pool thread has taken the fp32 / SQNR / agreement tasks (a tiny
    model on a loaded machine): they must still run and reach the report, not be cancelled
    with the pool. Here the pool has one thread, held until the pool is shut down, so two of
    the three tasks are still queued when the run ends."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from sim.app import session

    class LatePool(ThreadPoolExecutor):
        def __init__(self, max_workers: int, initializer=None) -> None:
            super().__init__(max_workers=1, initializer=initializer)
            self.gate = threading.Event()
            self.submitted = 0

        def submit(self, fn, /, *args, **kwargs):
            self.submitted += 1
            if self.submitted == 1:  # the first task holds the only thread until shutdown

                def held(*a, **k):
                    self.gate.wait()
                    return fn(*a, **k)

                return super().submit(held, *args, **kwargs)
            return super().submit(fn, *args, **kwargs)

        def shutdown(self, wait=True, *, cancel_futures=False):
            super().shutdown(wait=False, cancel_futures=cancel_futures)
            self.gate.set()

    monkeypatch.setattr(session, "ThreadPoolExecutor", LatePool)
    path = batched_model(tmp_path / "b.onnx")
    out = tmp_path / "run"
    done = in_process(capsys, "--model", str(path), "--config", "tiny", "--out", str(out))
    assert done.returncode == 0, done.stderr
    accuracy = json.loads((out / "report.json").read_text())["accuracy"]
    assert accuracy["sqnr"] and "cosine_vs_fp32" in accuracy, accuracy.keys()

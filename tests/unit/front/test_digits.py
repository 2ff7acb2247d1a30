"""The trained ``digits`` model: the split of scikit-learn's digits, the numpy training
(reproducible, genuinely trained: fp32 held-out top-1 >= 0.9 on onnxruntime), and the held-out
evaluation on the ISA simulator (int8 within 1 point of fp32, every layer bit-exact)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import zoo
from arch.config import PRESETS
from compiler.compile import compile_model
from sim.app.evaluate import evaluate_held_out
from sim.quality.dataset_accuracy import dataset_accuracy
from sim.runtime.batch import run_batch
from sim.runtime.run import run
from zoo import digits_train
from zoo.digits import calibration_set, digits
from zoo.digits_data import HELD_OUT, load


def test_split_is_fixed_disjoint_and_complete() -> None:
    from sklearn.datasets import load_digits

    train, held = load()
    assert (len(train.y), len(held.y)) == (1797 - HELD_OUT, HELD_OUT)
    assert train.x.shape[1:] == held.x.shape[1:] == (1, 8, 8)
    assert train.x.min() >= 0.0 and train.x.max() <= 1.0
    assert set(np.bincount(held.y, minlength=10) > 20) == {True}  # every class held out
    # Every image of the data set is in exactly one split (rows as bytes, with label).
    ref = load_digits()
    want = sorted(
        (row.tobytes(), int(y)) for row, y in zip(ref.images / 16.0, ref.target, strict=True)
    )
    got = sorted(
        (row[0].astype(np.float64).tobytes(), int(y))
        for split in (train, held)
        for row, y in zip(split.x, split.y, strict=True)
    )
    assert got == want
    again_train, again_held = load()
    np.testing.assert_array_equal(again_held.x, held.x)
    np.testing.assert_array_equal(again_train.y, train.y)
    # Calibration images come from the training split, never the held-out one.
    held_rows = {row.tobytes() for row in held.x}
    assert not any(c[0].tobytes() in held_rows for c in calibration_set())


def test_training_is_reproducible_and_learns() -> None:
    """Two trainings with seed 0 give identical weights; another seed others; the model
    built from them scores >= 0.9 top-1 on the held-out images on onnxruntime (fp32), and
    onnxruntime agrees with the numpy network it was trained as."""
    train, held = load()
    first = digits_train.train(train, seed=0)
    second = digits_train.train(train, seed=0)
    assert first.keys() == second.keys() == digits_train.SHAPES.keys()
    for name, value in first.items():
        np.testing.assert_array_equal(value, second[name], err_msg=name)
    other = digits_train.train(train, seed=1, epochs=1)
    assert not np.array_equal(other["conv1.weight"], first["conv1.weight"])
    model = digits(seed=0)
    assert model.SerializeToString() == zoo.build("digits").SerializeToString()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    logits = np.concatenate([session.run(None, {"input": x[None]})[0] for x in held.x])
    top1 = float(np.mean(logits.argmax(1) == held.y))
    assert top1 >= 0.9, top1
    np.testing.assert_allclose(logits, digits_train.predict(first, held.x), rtol=1e-4, atol=1e-4)


def test_dataset_accuracy_hand_computed() -> None:
    labels = np.array([0, 1, 2, 1, 0])
    fp32 = np.array([[3, 1, 0], [0, 2, 1], [0, 1, 5], [1, 0, 0], [2, 1, 0]], float)
    int8 = np.array([[3, 1, 0], [0, 2, 1], [0, 6, 5], [0, 2, 0], [2, 1, 0]], float)
    # fp32 top-1: 0 1 2 0 0 -> right 4 of 5; int8: 0 1 1 1 0 -> right 4 of 5; agree on 3 of 5.
    got = dataset_accuracy("toy", labels, fp32, int8)
    assert got == {"name": "toy", "n": 5, "top1_fp32": 0.8, "top1_int8": 0.8, "agreement": 0.6}


@pytest.mark.parametrize("config", ["default", "tiny"])
def test_held_out_split_on_the_isa_simulator(config: str) -> None:
    """The whole held-out split (a subset on tiny, where the ISA simulator is slower): int8
    top-1 within 1 point of fp32, every layer of every image bit-exact."""
    compiled = compile_model("digits", PRESETS[config])
    limit = None if config == "default" else 60
    result = evaluate_held_out("digits", compiled.executable, compiled.source, "isa", limit=limit)
    assert result is not None and result["bit_exact"]
    assert result["n"] == (HELD_OUT if limit is None else limit)
    assert result["top1_fp32"] >= 0.9
    assert abs(result["top1_int8"] - result["top1_fp32"]) <= 0.01
    assert result["agreement"] >= 0.98


def test_batch_equals_single_runs() -> None:
    """run_batch gives each input what a run of that input alone gives."""
    exe = compile_model("digits", PRESETS["default"]).executable
    held = zoo.held_out("digits")
    assert held is not None
    xs = [held.x[i : i + 1] for i in (5, 0, 17)]
    batch = run_batch(exe, xs, "isa")
    for x, outputs, cycles in zip(xs, batch.outputs, batch.cycles, strict=True):
        single = run(exe, x, "isa")
        np.testing.assert_array_equal(outputs["logits"], single.outputs["logits"])
        assert cycles == single.cycles
    assert not np.array_equal(batch.outputs[0]["logits"], batch.outputs[1]["logits"])


def test_models_without_a_data_set_have_no_evaluation() -> None:
    compiled = compile_model("mlp", PRESETS["tiny"])
    assert zoo.held_out("mlp") is None and zoo.calibration("mlp") is None
    assert evaluate_held_out("mlp", compiled.executable, compiled.source, "isa") is None


def test_cli_reports_the_held_out_split(tmp_path, capsys) -> None:
    """``make sim MODEL=digits``: report.json has ``accuracy.dataset`` with the contract's
    keys; the default input is held-out image 0 (no calibration sample); a bad --eval is
    one error line, exit code 2."""
    import json

    from sim.app.cli import main
    from tests.unit.run.test_cli_errors import assert_usage_error, in_process

    out = tmp_path / "run"
    code = main(["--model", "digits", "--backend", "isa", "--eval", "12", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    assert "held-out digits: n=12" in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    dataset = report["accuracy"]["dataset"]
    assert {"name", "n", "top1_fp32", "top1_int8", "agreement"} <= dataset.keys()
    assert dataset["name"] == "digits" and dataset["n"] == 12 and dataset["bit_exact"] is True
    assert report["accuracy"]["top1_agree_fp32"] is True
    line = assert_usage_error(in_process(capsys, "--model", "digits", "--eval", "-1"))
    assert "--eval must be a non-negative integer, not -1" in line
    line = assert_usage_error(in_process(capsys, "--model", "digits", "--image-size", "16"))
    assert "takes no image size" in line

"""``python -m sim.app.cli`` as a user runs it: every bad input ends with exit code 2 and exactly
one
``error:`` line naming what is wrong (never a traceback), and a good run writes the report the
design brief promises."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sim.app.cli import RUNS_ROOT, main

REPO = Path(__file__).resolve().parents[3]


def cli(
    *args: str, out: Path, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sim.app.cli", "--backend", "isa", "--out", str(out), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), **(extra_env or {})},
    )


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def one_op_model(op: str, name: str, path: Path) -> Path:
    node = helper.make_node(op, ["x"], ["y"], name=name)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
    )
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def lstm_model(path: Path) -> Path:
    rng = np.random.default_rng(3)
    inits = {
        "W": rng.normal(0, 0.1, (1, 32, 4)).astype(np.float32),
        "R": rng.normal(0, 0.1, (1, 32, 8)).astype(np.float32),
    }
    node = helper.make_node("LSTM", ["x", "W", "R"], ["y"], name="encoder_lstm", hidden_size=8)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def assert_usage_error(result: subprocess.CompletedProcess[str], *names: str) -> str:
    """Exit code 2, one ``error:`` line naming ``names``, no traceback; returns that line."""
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, (result.returncode, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    for name in names:
        assert name in errors[0], (name, errors[0])
    return errors[0]


def test_unknown_model_name(tmp_path: Path) -> None:
    line = assert_usage_error(cli("--model", "resnet19", out=tmp_path / "o"), "'resnet19'")
    assert "mlp" in line  # says what exists
    assert not (tmp_path / "o").exists()  # nothing written for a failed compile


def test_missing_onnx_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "model.onnx"
    line = assert_usage_error(cli("--model", str(path), out=tmp_path / "o"), str(path))
    assert "does not exist" in line


def test_file_that_is_not_onnx(tmp_path: Path) -> None:
    path = tmp_path / "noise.onnx"
    path.write_bytes(np.random.default_rng(1).integers(0, 256, 512, dtype=np.uint8).tobytes())
    line = assert_usage_error(cli("--model", str(path), out=tmp_path / "o"), "noise.onnx")
    assert "not an ONNX model" in line


def test_unsupported_op_names_the_node(tmp_path: Path) -> None:
    path = one_op_model("Hardmax", "pick", tmp_path / "hardmax.onnx")
    line = assert_usage_error(cli("--model", str(path), out=tmp_path / "o"), "pick", "Hardmax")
    assert "no node runs on the accelerator" in line


def test_bad_config_json_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({"rows": 4, "cols": 4, "systolic_magic": 3}))
    line = assert_usage_error(
        cli("--model", "mlp", "--config", str(path), out=tmp_path / "o"), "systolic_magic"
    )
    assert "unknown config field" in line


def test_unknown_preset(tmp_path: Path) -> None:
    line = assert_usage_error(
        cli("--model", "mlp", "--config", "huge", out=tmp_path / "o"), "'huge'"
    )
    assert "tiny" in line and "default" in line


def test_missing_image_file(tmp_path: Path) -> None:
    path = tmp_path / "cat.npy"
    line = assert_usage_error(
        cli("--model", "mlp", "--image", str(path), out=tmp_path / "o"), str(path)
    )
    assert "does not exist" in line


def test_wrong_shape_image(tmp_path: Path) -> None:
    path = tmp_path / "img.npy"
    np.save(path, np.random.default_rng(2).standard_normal((3, 5)).astype(np.float32))
    line = assert_usage_error(
        cli("--model", "mlp", "--image", str(path), out=tmp_path / "o"), str(path), "(3, 5)"
    )
    assert "(1, 64)" in line  # the shape the model takes


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess:
    """``sim.app.cli.main`` in this process (no interpreter start-up): the same contract."""
    code = main(["--backend", "isa", *args])
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, captured.out, captured.err)


def test_more_bad_inputs_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Inputs that once escaped as tracebacks (exit 1), plus config and ONNX variants."""
    out = str(tmp_path / "o")
    rng = np.random.default_rng(4)
    garbage = rng.integers(0, 256, 300, dtype=np.uint8).tobytes()
    npy, png, cfg = tmp_path / "bad.npy", tmp_path / "bad.png", tmp_path / "bad.json"
    npy.write_bytes(b"\x93NUMPY" + garbage)
    png.write_bytes(b"\x89PNG\r\n" + garbage)
    cfg.write_bytes(b"\xff\xfe" + garbage)
    cases = [
        (("--model", "mlp", "--image", str(npy)), (str(npy),)),
        (("--model", "cnn", "--image-size", "8", "--image", str(png)), (str(png),)),
        (("--model", "mlp", "--config", str(cfg)), (str(cfg),)),
        (("--model", "mlp", "--image-size", "8"), ("mlp", "image")),
        (("--model", "cnn", "--image-size", "2"), ("cnn", "image_size", "2")),
        (("--model", "mlp", "--seed", "-1"), ("--seed", "-1")),
        (("--model", "mlp", "--image", str(tmp_path / "x.txt")), ("x.txt",)),
        (("--model", str(lstm_model(tmp_path / "l.onnx"))), ("'x'", "batch 5")),
    ]
    (tmp_path / "x.txt").write_text("1 2 3")
    cfg3 = tmp_path / "rows3.json"
    cfg3.write_text(json.dumps({"rows": 3, "cols": 3}))
    cases.append((("--model", "mlp", "--config", str(cfg3)), ("rows", "3")))
    for args, names in cases:
        assert_usage_error(in_process(capsys, *args, "--out", out), *names)
    assert not (tmp_path / "o").exists()


def test_mlp_run_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "run"
    latest = RUNS_ROOT / "latest"
    before = os.readlink(latest) if latest.is_symlink() else None
    try:
        result = cli("--model", "mlp", "--config", "tiny", out=out)
    finally:  # the CLI points build/runs/latest at the run; do not leave it at a tmp dir
        if latest.is_symlink() and Path(os.readlink(latest)) == out.resolve():
            latest.unlink()
            if before is not None:
                latest.symlink_to(before)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stderr
    assert not [line for line in result.stderr.splitlines() if line.startswith("error:")]

    report = json.loads((out / "report.json").read_text())
    assert {"model", "config", "backend", "layers", "total", "accuracy", "waves"} <= set(report)
    assert (report["model"], report["backend"]) == ("mlp", "isa")
    assert report["config"]["rows"] == report["config"]["cols"] == 4
    assert report["waves"] is None or isinstance(report["waves"], str)
    layer_fields = {
        "name": str,
        "op": str,
        "macs": int,
        "cycles": int,
        "utilization": float,
        "dram_read_bytes": int,
        "dram_write_bytes": int,
        "bit_exact": bool,
    }
    assert [layer["name"] for layer in report["layers"]] == ["fc1", "fc2.matmul", "fc"]
    for layer in report["layers"]:
        for key, kind in layer_fields.items():
            assert isinstance(layer[key], kind) and not (kind is int and layer[key] is True), key
        assert layer["op"] == "gemm" and layer["bit_exact"] is True
        assert (
            layer["cycles"] > 0 and layer["dram_read_bytes"] > 0 and layer["dram_write_bytes"] > 0
        )
        assert layer["utilization"] == pytest.approx(
            layer["macs"] / (16 * layer["cycles"]), abs=1e-4
        )
    assert [layer["macs"] for layer in report["layers"]] == [64 * 128, 128 * 64, 64 * 10]

    total = report["total"]
    for key, kind in {
        "macs": int,
        "cycles": int,
        "utilization": float,
        "bit_exact": bool,
        "sim_wall_s": float,
        "sim_cycles_per_s": (int, float),
    }.items():
        assert isinstance(total[key], kind), key
    assert total["bit_exact"] is True
    assert total["macs"] == sum(layer["macs"] for layer in report["layers"])
    assert total["cycles"] >= max(layer["cycles"] for layer in report["layers"]) > 0
    assert total["utilization"] == pytest.approx(total["macs"] / (16 * total["cycles"]), abs=1e-4)
    # The rate is derived from the reported wall time (how fast is for `make bench`, not tests).
    # sim_wall_s is rounded to 1 ms, so the rate lies within what that rounding allows.
    wall, rate = total["sim_wall_s"], total["sim_cycles_per_s"]
    if wall > 0.0005:
        assert (
            total["cycles"] / (wall + 0.0005) - 1 <= rate <= total["cycles"] / (wall - 0.0005) + 1
        )

    accuracy = report["accuracy"]
    assert isinstance(accuracy["top1_agree_fp32"], bool)
    assert isinstance(accuracy["cosine_vs_fp32"], float)
    assert 0.99 < accuracy["cosine_vs_fp32"] <= 1.0 + 1e-9
    twin = accuracy["twin_agreement"]  # every layer against the fake-quantized twin
    assert twin["outside_rule"] == 0 and twin["max_code_diff"] <= 1 and twin["layers"]
    assert twin["equal"] == pytest.approx(
        sum(e["equal"] * e["count"] for e in twin["layers"])
        / sum(e["count"] for e in twin["layers"])
    )

    with open(out / "report.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [row["name"] for row in rows] == [layer["name"] for layer in report["layers"]]
    assert [int(row["cycles"]) for row in rows] == [layer["cycles"] for layer in report["layers"]]
    png = (out / "utilization.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 1000
    listing = (out / "listing.txt").read_text()
    assert listing.startswith("; model mlp, config 4x4_") and "<- fc1 (gemm)" in listing
    assert report["executable"] == str(out / "mlp.cosim") and (out / "mlp.cosim").is_file()

    # the saved executable runs again without the model: same layers, cycles and listing
    again = cli("--bundle", str(out / "mlp.cosim"), "--config", "tiny", out=tmp_path / "again")
    assert again.returncode == 0, again.stderr
    rerun = json.loads((tmp_path / "again" / "report.json").read_text())
    assert rerun["executable"] == report["executable"] and rerun["total"]["bit_exact"]
    assert [(la["name"], la["cycles"]) for la in rerun["layers"]] == [
        (la["name"], la["cycles"]) for la in report["layers"]
    ]
    assert (tmp_path / "again" / "listing.txt").read_text() == listing
    assert rerun["accuracy"] == {}  # an executable holds no fp32 model
    assert "accuracy vs fp32: not measured" in again.stdout


def test_bad_executables_exit_2_naming_what_is_wrong(tmp_path: Path) -> None:
    first = cli("--model", "mlp", "--config", "tiny", out=tmp_path / "first")
    assert first.returncode == 0, first.stderr
    saved = tmp_path / "first" / "mlp.cosim"
    broken = tmp_path / "broken.cosim"
    broken.write_bytes(saved.read_bytes()[:1000])
    cases = [
        (["--bundle", str(saved), "--config", "default"], "was compiled for config 4x4_"),
        (["--bundle", str(broken)], "broken.cosim"),
        (["--bundle", str(tmp_path / "none.cosim")], "none.cosim does not exist"),
        (["--bundle", str(saved), "--image-size", "32"], "--image-size applies"),
        (["--bundle", str(saved), "--model", "mlp"], "not allowed with argument"),
    ]
    for args, message in cases:
        result = cli(*args, out=tmp_path / "out")
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr, result.stderr


# --- saved executables that loaded but crashed the run; internal errors; names with markup ---


@pytest.fixture(scope="module")
def mlp_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from arch import executable
    from arch.config import PRESETS
    from compiler.compile import compile_model

    compiled = compile_model("mlp", PRESETS["tiny"])
    return executable.save(compiled.executable, tmp_path_factory.mktemp("mlp") / "mlp.cosim")


def changed_bundle(src: Path, dst: Path, change) -> Path:
    """A copy of the executable ``src`` with its manifest changed by ``change`` and its
    digests recomputed (the edit a user who knows the format can make)."""
    from tests.executable_files import with_manifest

    return with_manifest(src, dst, change)


def _ref_tensor(info: dict, name: str) -> dict:
    return info["reference"]["tensors"][name]


def _fc1(info: dict) -> dict:
    return next(n for n in info["reference"]["nodes"] if n["name"] == "fc1")


@pytest.mark.parametrize(
    ("change", "names"),
    [
        # each of these loaded, then stopped the run with a traceback (exit 1, like a mismatch)
        (lambda i: i["steps"][0]["layers"][0].update(tiling={"a": 1}), ("tiling", "rows_per_tile")),
        (lambda i: i["steps"][0]["tensors"]["input"].update(channels=16), ("'input'", "channels")),
        (lambda i: i["steps"][0]["tensors"]["logits"].update(addr=60000), ("'logits'", "60000")),
        (lambda i: _ref_tensor(i, "input").update(shape=[1, 32]), ("'fc1'", "weight")),
        (lambda i: _ref_tensor(i, "input").update(shape=[1, 8, 8]), ("'input'", "(1, 8, 8)")),
        (lambda i: _ref_tensor(i, "input").update(shape=[]), ("'input'", "shape")),
        (lambda i: _ref_tensor(i, "input").update(shape=[-1, 64]), ("'input'", "[-1, 64]")),
        (lambda i: _fc1(i)["params"].pop("weight"), ("'fc1'", "weight")),
        (lambda i: _fc1(i)["params"].update(weight=_fc1(i)["params"]["bias"]), ("'fc1'", "int8")),
        # ... or ran to a wrong "bit-exact" (the output shape) or wrote outside the run directory
        (lambda i: _ref_tensor(i, "logits").update(shape=[1, 5]), ("'logits'", "(1, 5)")),
        (lambda i: i["steps"][0]["layers"][1].update(output="act1.out"), ("act1.out", "twice")),
        (lambda i: i.update(model="../../escaped"), ("'model'", "../../escaped")),
        (lambda i: i["steps"][0].update(name="../../evil"), ("'name'", "../../evil")),
    ],
)  # fmt: skip
def test_bundles_the_run_crashed_on_exit_2(
    mlp_bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], change, names
) -> None:
    path = changed_bundle(mlp_bundle, tmp_path / "bad.cosim", change)
    out = tmp_path / "o"
    line = assert_usage_error(in_process(capsys, "--bundle", str(path), "--out", str(out)), *names)
    assert str(path) in line and not out.exists()
    assert not (tmp_path.parent / "escaped").exists()


def test_markup_in_names_is_shown_as_is(
    mlp_bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Layer names are data: '[/x]' once crashed the summary table (rich markup)."""

    def change(info: dict) -> None:
        layers = info["steps"][0]["layers"]
        layers[0]["name"], layers[1]["name"] = "[/x]", "[bold]y"

    path = changed_bundle(mlp_bundle, tmp_path / "markup.cosim", change)
    result = in_process(capsys, "--bundle", str(path), "--out", str(tmp_path / "o"))
    assert result.returncode == 0, result.stderr
    assert "[/x]" in result.stdout and "[bold]y" in result.stdout


def test_summary_table_escapes_markup() -> None:
    from rich.console import Console

    from sim.app.report import summary_table

    layer = {"name": "[/x]", "op": "[red]op", "macs": 1, "cycles": 2, "utilization": 0.5,
             "bit_exact": True, "limiter": "[i]l"}  # fmt: skip
    total = {"macs": 1, "cycles": 2, "utilization": 0.5, "bit_exact": True, "sim_wall_s": 0.1,
             "sim_cycles_per_s": 20}  # fmt: skip
    report = {"model": "[m]", "config": {"name": "[/c]"}, "backend": "isa", "layers": [layer],
              "total": total}  # fmt: skip
    console = Console(record=True, width=200)
    console.print(summary_table(report))
    text = console.export_text()
    for shown in ("[/x]", "[red]op", "[i]l", "[m] on [/c] (isa)"):
        assert shown in text, text


def test_internal_errors_exit_4_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An exception nothing expects is a bug: exit 4 (never 1, a mismatch), one line naming it;
    COSIM_DEBUG=1 adds the traceback."""
    import sim.app.session

    def broken(*args, **kwargs):
        raise ZeroDivisionError("boom\nsecond line")

    out = str(tmp_path / "o")
    monkeypatch.delenv("COSIM_DEBUG", raising=False)
    for target in ("load_executable", "run"):  # before the run, and during it
        with monkeypatch.context() as patch:
            patch.setattr(sim.app.session, target, broken)
            result = in_process(capsys, "--model", "mlp", "--config", "tiny", "--out", out)
        assert result.returncode == 4, (target, result.stderr)
        assert "Traceback" not in result.stderr
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert errors == [
            "error: internal error: ZeroDivisionError: boom second line (please report)"
        ], result.stderr
    monkeypatch.setenv("COSIM_DEBUG", "1")
    monkeypatch.setattr(sim.app.session, "load_executable", broken)
    result = in_process(capsys, "--model", "mlp", "--out", out)
    assert result.returncode == 4 and "Traceback" in result.stderr
    assert "ZeroDivisionError: boom" in result.stderr


def test_exit_codes_are_documented(capsys: pytest.CaptureFixture[str]) -> None:
    from sim.app.cli import parse

    with pytest.raises(SystemExit):
        parse(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "3 simulator build failure or accelerator error, 4 internal error" in text
    assert "COSIM_DEBUG=1" in text
    guide = " ".join((REPO / "docs" / "running.md").read_text().split())
    assert "accelerator error (error code and instruction), 4 an internal error" in guide

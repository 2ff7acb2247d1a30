"""report.json says what a run ran on and when (seed, input, commit, tool versions, times), and
``build/runs`` keeps only the newest runs (``COSIM_KEEP_RUNS``), never one still running."""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

import sim.app.cli
import sim.app.session
from sim.app import prune
from tests.unit.run.test_cli_errors import assert_usage_error, in_process

REPO = Path(__file__).resolve().parents[3]


def _time(text: str) -> datetime.datetime:
    assert text.endswith("Z"), text
    return datetime.datetime.fromisoformat(text[:-1])


def test_report_records_seed_input_versions_and_times(tmp_path, capsys):
    rng = np.random.default_rng(11)
    image = tmp_path / "x.npy"
    x = rng.standard_normal((1, 64)).astype(np.float32)
    np.save(image, x)
    out = tmp_path / "run"
    args = ("--model", "mlp", "--config", "tiny", "--seed", "5", "--out", str(out))
    assert in_process(capsys, *args, "--image", str(image)).returncode == 0
    record = json.loads((out / "report.json").read_text())["provenance"]
    assert record["seed"] == 5 and record["backend"] == "isa"
    assert record["input"]["kind"] == "file" and record["input"]["path"] == str(image)
    assert record["input"]["file_sha256"] == hashlib.sha256(image.read_bytes()).hexdigest()
    assert record["input"]["sha256"] == hashlib.sha256(x.tobytes()).hexdigest()
    versions = record["versions"]
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert versions["project_commit"].removesuffix("+dirty") == head
    for package in ("amaranth", "onnx", "onnxruntime"):
        assert versions[package] == metadata.version(package)
    assert versions["verilator"] is None  # the ISA simulator uses none
    assert _time(record["started"]) <= _time(record["finished"])


def test_seeded_noise_input_is_identified_by_its_seed_and_hash(tmp_path, capsys):
    out = tmp_path / "run"
    args = ("--model", "mlp", "--config", "tiny", "--seed", "7", "--out", str(out))
    assert in_process(capsys, *args).returncode == 0
    record = json.loads((out / "report.json").read_text())["provenance"]["input"]
    # the documented stream of the default input: [seed, 1] (not a calibration sample)
    noise = np.random.default_rng([7, 1]).standard_normal((1, 64)).astype(np.float32)
    assert record == {
        "kind": "seeded noise",
        "seed": 7,
        "shape": [1, 64],
        "sha256": hashlib.sha256(noise.tobytes()).hexdigest(),
    }


def test_verilator_version_is_the_toolchains():
    from sim.app.provenance import verilator_version
    from sim.verilate.toolchain import find_toolchain

    tc = find_toolchain()
    text = verilator_version()
    assert text is not None and re.fullmatch(r"\d+\.\d{3} \((system|pypi-wheel)\)", text)
    assert text.startswith(f"{tc.version[0]}.")


def _runs(root: Path, stamps: list[str]) -> list[Path]:
    made = []
    for stamp in stamps:
        path = root / f"cnn-tiny-isa-{stamp}"
        path.mkdir(parents=True)
        (path / "report.json").write_text("{}")
        made.append(path)
    return made


def test_prune_keeps_the_newest_by_the_time_in_their_names(tmp_path):
    stamps = ["20260101-120000", "20260101-120000-2", "20251231-235959", "20260102-000000"]
    stamps += ["20260101-120000-10", "20260101-115959"]
    _runs(tmp_path, stamps)
    (tmp_path / "notes").mkdir()  # not a run directory: never removed
    (tmp_path / "latest").symlink_to(tmp_path / "cnn-tiny-isa-20260102-000000")
    removed = prune.prune(tmp_path, 3)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [
        "cnn-tiny-isa-20260101-120000-10",
        "cnn-tiny-isa-20260101-120000-2",
        "cnn-tiny-isa-20260102-000000",
        "latest",
        "notes",
    ]
    assert len(removed) == 3
    assert prune.prune(tmp_path, 0) == []  # 0 keeps all


def test_a_run_in_progress_is_never_removed(tmp_path):
    old, _new = _runs(tmp_path, ["20250101-000000", "20260101-000000"])
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from sim.app import prune; "
            f"prune.hold(Path({str(old)!r})); print('held', flush=True); sys.stdin.read()",
        ],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert prune.prune(tmp_path, 1) == [] and old.is_dir()
    finally:
        holder.communicate("")
    assert prune.prune(tmp_path, 1) == [old]  # the process ended: its lock went with it


def test_cli_prunes_build_runs_and_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sim.app.session, "RUNS_ROOT", tmp_path)
    monkeypatch.setenv("COSIM_KEEP_RUNS", "2")
    _runs(tmp_path, ["20240101-000000", "20240102-000000"])
    result = in_process(capsys, "--model", "mlp", "--config", "tiny")
    assert result.returncode == 0, result.stderr
    runs = sorted(p.name for p in tmp_path.iterdir() if p.name != "latest")
    assert len(runs) == 2 and runs[0] == "cnn-tiny-isa-20240102-000000"
    assert (tmp_path / "latest").resolve().name == runs[1]
    assert "removed 1 old run(s)" in result.stdout and "COSIM_KEEP_RUNS" in result.stdout


@pytest.mark.parametrize("value", ["-1", "ten", "2.5"])
def test_bad_keep_runs_is_one_line(value, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COSIM_KEEP_RUNS", value)
    out = str(tmp_path / "o")
    assert_usage_error(
        in_process(capsys, "--model", "mlp", "--config", "tiny", "--out", out), "COSIM_KEEP_RUNS"
    )

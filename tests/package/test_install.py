"""Packaging: ``pip install .`` (not editable) into a fresh virtual environment, outside the
checkout, gives a working ``cosim`` command that compiles a model, builds the Verilator model
from the installed sources and runs it on the RTL bit-exact; its executable runs again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.simulator


def sh(*cmd: str | Path, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=1500
    )


@pytest.mark.timeout(3600)  # pip install, a cold build and runs of up to 1500 s each
def test_pip_install_gives_a_working_cosim_command(tmp_path: Path) -> None:
    venv, work = tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "COSIM_ASSERT")  # a user's plain build (conftest.py)
    env = {k: v for k, v in os.environ.items() if k not in drop}
    made = sh(sys.executable, "-m", "venv", venv, cwd=tmp_path, env=env)
    assert made.returncode == 0, made.stderr
    pip = sh(
        venv / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
        "-c", REPO / "requirements.lock", REPO,
        cwd=work, env=env,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-3000:]
    cosim = venv / "bin" / "cosim"
    shown = sh(venv / "bin" / "python", "-c", "import sim; print(sim.__file__)", cwd=work, env=env)
    assert str(venv) in shown.stdout, shown  # the installed package, not the checkout

    first = sh(
        cosim, "sim", "--model", "cnn", "--config", "tiny", "--backend", "rtl",
        "--image-size", "16", "--out", work / "run1",
        cwd=work, env=env,
    )  # fmt: skip
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    report = json.loads((work / "run1" / "report.json").read_text())
    assert report["total"]["bit_exact"] and report["backend"] == "rtl"
    assert all(layer["bit_exact"] and layer["cycles"] > 0 for layer in report["layers"])
    assert (work / "build" / "verilator").is_dir()  # outputs in the working directory
    site = next((venv / "lib").glob("python*/site-packages"))
    assert not (site / "build").exists() and not (site / "waves").exists()

    again = sh(
        cosim, "sim", "--bundle", report["executable"], "--backend", "isa", "--out",
        work / "run2", cwd=work, env=env,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    rerun = json.loads((work / "run2" / "report.json").read_text())
    assert rerun["total"]["bit_exact"]
    assert [la["name"] for la in rerun["layers"]] == [la["name"] for la in report["layers"]]

    bad = sh(cosim, "sim", "--model", "no-such-model", cwd=work, env=env)
    assert bad.returncode == 2 and "unknown model 'no-such-model'" in bad.stderr
    assert sh(cosim, "frobnicate", cwd=work, env=env).returncode == 2

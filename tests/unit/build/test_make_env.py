"""``make sim``: its variables reach Python as command-line options, never as environment
variables (cocotb reads ``WAVES`` from the environment as a yes/no flag)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
VARIABLES = ["MODEL", "CONFIG", "BACKEND", "SEED", "IMAGE", "IMAGE_SIZE", "WAVES", "WAVE_LAYER"]
VARIABLES += [
    "WAVE_INSN",
    "WAVE_CYCLES",
    "WAVE_SIGNALS",
    "BUNDLE",
    "PYTEST_ARGS",
    "JOBS",
    "CONFIGS",
    "VENV",
]
VARIABLES += ["CALIB", "CALIB_METHOD", "PREPROCESS", "EVAL"]
VARIABLES += ["HOOKS", "DRAM_STALL", "COVERAGE_DIR", "COVERAGE_TESTS"]


@pytest.fixture
def fake_venv(tmp_path) -> Path:
    """A venv whose python records its arguments and environment instead of running."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"open({str(tmp_path / 'call.json')!r}, 'w').write("
        "json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ)}))\n"
    )
    python.chmod(0o755)
    (venv / ".cosim-installed").touch()  # newer than pyproject.toml: nothing to install
    return venv


def test_readme_wave_example_passes_options_not_environment(fake_venv, tmp_path):
    args = ["MODEL=mlp", "CONFIG=tiny", "WAVE_CYCLES=1000:3000", "WAVES=vcd", f"VENV={fake_venv}"]
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    done = subprocess.run(
        ["make", "-s", "-C", str(REPO), "sim", *args], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    call = json.loads((tmp_path / "call.json").read_text())
    argv = " ".join(call["argv"])
    assert "--waves vcd" in argv and "--wave-cycles 1000:3000" in argv
    assert "--model mlp --config tiny" in argv
    leaked = sorted(set(call["env"]) & set(VARIABLES))
    assert not leaked, f"make exported {leaked} to the simulator's environment"


def test_values_with_quotes_reach_python_whole(fake_venv, tmp_path):
    model = str(tmp_path / 'it\'s a "model" (v2).onnx')
    done = subprocess.run(
        ["make", "-s", "-C", str(REPO), "sim", f"MODEL={model}", f"VENV={fake_venv}"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    argv = json.loads((tmp_path / "call.json").read_text())["argv"]
    assert argv[argv.index("--model") + 1] == model


def test_calibration_and_preprocess_variables_are_options(fake_venv, tmp_path):
    args = ["MODEL=digits", "CALIB=c.npy", "CALIB_METHOD=entropy", "PREPROCESS=unit", "EVAL=7"]
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    done = subprocess.run(
        ["make", "-s", "-C", str(REPO), "sim", *args, f"VENV={fake_venv}"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    call = json.loads((tmp_path / "call.json").read_text())
    argv = " ".join(call["argv"])
    for option in ("--calib c.npy", "--calib-method entropy", "--preprocess unit", "--eval 7"):
        assert option in argv, argv
    assert not set(call["env"]) & set(VARIABLES)


def test_dram_stall_is_an_option_of_sim_and_the_knob_of_test(fake_venv, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES and k != "COSIM_DRAM_STALL"}
    for target, value in (("sim", "bursty"), ("test", "heavy:7")):
        done = subprocess.run(
            ["make", "-s", "-C", str(REPO), target, f"DRAM_STALL={value}", f"VENV={fake_venv}"],
            capture_output=True,
            text=True,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        call = json.loads((tmp_path / "call.json").read_text())
        assert not set(call["env"]) & set(VARIABLES)
        if target == "sim":
            assert "--dram-stall bursty" in " ".join(call["argv"])
        else:
            assert call["env"]["COSIM_DRAM_STALL"] == value and "pytest" in call["argv"]

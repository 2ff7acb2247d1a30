"""User hooks (sim/backends/hooks.py): a bad HOOKS value is one line naming what is wrong, exit
code 2,
before anything is built; `make sim HOOKS=` and `make test HOOKS=` hand the modules on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from arch.config import PRESETS
from sim.app import cli as cli_main
from sim.backends import hooks
from sim.backends.base import DeviceRun
from sim.backends.rtl import run_programs
from tests.unit.build.test_make_env import fake_venv  # noqa: F401 (fixture)
from tests.unit.run.test_cli_errors import assert_usage_error

REPO = Path(__file__).resolve().parents[3]


def cli(*args: str, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "sim.app.cli",
            "--model",
            "mlp",
            "--config",
            "tiny",
            "--out",
            str(out),
        ]
        + list(args),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def test_missing_hook_module_is_named(tmp_path):
    assert_usage_error(cli("--hooks", "my_pkg.my_monitor", out=tmp_path / "o"), "'my_pkg'")


def test_module_without_a_hook_coroutine_is_named(tmp_path):
    line = assert_usage_error(
        cli("--hooks", "sim.backends.hooks", out=tmp_path / "o"), "'sim.backends.hooks'"
    )
    assert "async def hook(dut, ctx)" in line


def test_hooks_need_the_cocotb_backend(tmp_path):
    result = cli("--backend", "isa", "--hooks", "sim.hook_examples.dram_bursts", out=tmp_path / "o")
    assert_usage_error(result, "--backend rtl", "isa")


def test_module_that_fails_to_import_is_one_line(tmp_path):
    (tmp_path / "broken_hook.py").write_text("raise RuntimeError('oops')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(hooks.HookError, match="importing 'broken_hook' failed: RuntimeError"):
            hooks.load(["broken_hook"])
    finally:
        sys.path.remove(str(tmp_path))


def test_a_hook_module_that_is_no_regular_file_is_said_to_be_one(tmp_path, monkeypatch, capsys):
    """A FIFO or a device as ``<module>.py``: Python's import skips it (as if missing); the
    error says what it is, through the command line with exit code 2, and never opens it."""
    os.mkfifo(tmp_path / "fifo_hook.py")
    (tmp_path / "device_hook.py").symlink_to("/dev/zero")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("fifo_hook", "device_hook"):
        code = cli_main.main(["--backend", "rtl", "--model", "mlp", "--hooks", name])
        line = assert_usage_error(
            subprocess.CompletedProcess([], code, "", capsys.readouterr().err), repr(name)
        )
        assert f"{tmp_path / name}.py is not a regular file" in line, line
    with pytest.raises(hooks.HookError, match="no module named 'absent_hook'"):
        hooks.load(["absent_hook"])


def test_bad_hooks_fail_the_rtl_backend_before_any_build(monkeypatch, tmp_path):
    monkeypatch.setenv(hooks.ENV, "sim.hook_examples.dram_bursts,no_such_hook")
    run = DeviceRun(np.zeros(64, np.uint8), launch=None)  # type: ignore[arg-type]
    with pytest.raises(hooks.HookError, match="no module named 'no_such_hook'"):
        run_programs(PRESETS["tiny"], [run], tmp_path)
    assert not list(tmp_path.iterdir())  # nothing written: no job, no build


def test_names_split_on_commas():
    assert hooks.names(" a.b , c ,") == ["a.b", "c"]
    assert hooks.names("") == []


def test_make_passes_hooks_to_sim_and_test(fake_venv, tmp_path):  # noqa: F811
    env = {k: v for k, v in os.environ.items() if k not in ("HOOKS", hooks.ENV)}
    for target, check in (
        ("sim", lambda call: "--hooks pkg.mon" in " ".join(call["argv"])),
        ("test", lambda call: call["env"].get(hooks.ENV) == "pkg.mon"),
    ):
        done = subprocess.run(
            ["make", "-s", "-C", str(REPO), target, "HOOKS=pkg.mon", f"VENV={fake_venv}"],
            capture_output=True,
            text=True,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        call = json.loads((tmp_path / "call.json").read_text())
        assert check(call), (target, call["argv"])
        assert "HOOKS" not in call["env"]


def test_an_on_report_that_raises_names_the_hook_exit_3(tmp_path, capsys, monkeypatch):
    """A bug of the hook (not a finding about the report) is one line naming it, exit code 3;
    a :class:`hooks.HookCheckFailed` stays a finding (exit code 1)."""
    (tmp_path / "crashing_hook.py").write_text(
        "async def hook(dut, ctx):\n    pass\n\n"
        "def on_report(report):\n    return report['no such key']\n"
    )
    (tmp_path / "strict_hook.py").write_text(
        "from sim.backends.hooks import HookCheckFailed\n"
        "async def hook(dut, ctx):\n    pass\n\n"
        "def on_report(report):\n    raise HookCheckFailed('too slow')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(hooks.HookFailed) as caught:
        hooks.check_report({"hooks": {"crashing_hook": []}})
    message = str(caught.value)
    assert message == "hook crashing_hook: on_report raised KeyError: 'no such key'"
    assert cli_main.exit_code(caught.value) == (3, f"error: {message}")
    with pytest.raises(hooks.HookCheckFailed, match="too slow") as found:
        hooks.check_report({"hooks": {"strict_hook": []}})
    assert cli_main.exit_code(found.value)[0] == 1

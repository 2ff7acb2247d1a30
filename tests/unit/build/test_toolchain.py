"""The toolchain module: finds Verilator, and names what is missing when it cannot."""

import os
import subprocess
import sys

import pytest

from sim.verilate import toolchain


@pytest.fixture
def fresh_toolchain():
    toolchain.find_toolchain.cache_clear()
    yield
    toolchain.find_toolchain.cache_clear()


def test_finds_verilator_new_enough_for_cocotb(fresh_toolchain):
    tc = toolchain.find_toolchain()
    assert tc.version >= toolchain.MIN_VERILATOR
    assert tc.verilator.exists()


def _path_without(tmp_path, missing: str) -> str:
    """A PATH holding links to every tool on the current PATH except ``missing``."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for name in os.listdir(directory):
            target = os.path.join(directory, name)
            if name != missing and not (bindir / name).exists() and os.access(target, os.X_OK):
                (bindir / name).symlink_to(target)
    return str(bindir)


def test_missing_gxx_is_one_actionable_line(tmp_path):
    env = {**os.environ, "PATH": _path_without(tmp_path, "g++")}
    out = subprocess.run(
        [sys.executable, "-m", "sim.verilate.toolchain"], capture_output=True, text=True, env=env
    )
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "g++" in lines[0] and "apt-get install" in lines[0]


def test_version_parsing():
    assert toolchain._parse_version("Verilator 5.006 2023-01-22 rev (Debian 5.006-3)") == (5, 6)
    assert toolchain._parse_version(" rev vUNKNOWN-built20260516-4e853d8") is None

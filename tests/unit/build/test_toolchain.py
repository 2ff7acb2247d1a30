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


def test_fst_needs_lz4_and_zlib_to_link(fresh_toolchain, tmp_path, monkeypatch):
    # A compiler that cannot find lz4.h (a machine without liblz4-dev): FST is off.
    fake = tmp_path / "c++"
    fake.write_text("#!/bin/sh\necho 'fatal error: lz4.h: No such file or directory' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    assert not toolchain.find_toolchain().fst_ok
    # The real compiler agrees with the preprocessor on whether the headers are there.
    monkeypatch.delenv("CXX")
    toolchain.find_toolchain.cache_clear()
    include = subprocess.run(
        ["c++", "-E", "-x", "c++", "-"],
        input="#include <lz4.h>\n#include <zlib.h>\n",
        capture_output=True,
        text=True,
    )
    if include.returncode != 0:
        assert not toolchain.find_toolchain().fst_ok


def test_fst_hint_names_variables_that_exist():
    message = toolchain.fst_missing_message()
    assert "WAVES=vcd" in message and "WAVE_FORMAT" not in message
    makefile = (toolchain.Path(__file__).parents[3] / "Makefile").read_text()
    assert "WAVES   ?=" in makefile

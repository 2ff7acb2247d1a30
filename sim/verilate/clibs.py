"""The C libraries FST tracing links (lz4 and zlib), built from the copies the project ships.

Verilator's FST writer includes ``<lz4.h>`` and ``<zlib.h>`` and its ``verilated.mk`` links
``-llz4 -lz``. Neither Debian's ``liblz4-dev`` nor ``zlib1g-dev`` is needed: the project ships
both libraries' sources (``sim/csrc/lz4``, ``sim/csrc/zlib``; versions, licenses and checksums in
their READMEs) and builds each once into a static library under ``build/clibs/``. An FST build
puts those folders first on its include and library paths (:func:`fst_args`), so the linker
takes these archives before any system library of the same name.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sim import knobs
from sim.verilate.toolchain import ToolchainError

__all__ = ["FST_LIBRARIES", "LZ4", "ZLIB", "ClibBuildError", "VendoredLibrary", "build", "fst_args"]

CSRC = Path(__file__).resolve().parents[1] / "csrc"


@dataclass(frozen=True)
class VendoredLibrary:
    """A C library the project ships as source: ``name`` gives ``lib<name>.a``."""

    name: str
    folder: Path  # the sources, unmodified, with their LICENSE and README
    sources: tuple[str, ...]  # the .c files compiled into the archive
    headers: tuple[str, ...]  # the headers a user of the library includes
    defines: tuple[str, ...] = ()  # what the library's own configure script would define

    def files(self) -> list[Path]:
        return [self.folder / name for name in sorted({*self.sources, *self.headers})]


LZ4 = VendoredLibrary("lz4", CSRC / "lz4", ("lz4.c",), ("lz4.h",))
#: zlib's library sources (the gz* files too: older Verilators' fstapi.c writes through them).
ZLIB = VendoredLibrary(
    "z",
    CSRC / "zlib",
    (
        *("adler32.c", "compress.c", "crc32.c", "deflate.c", "gzclose.c", "gzlib.c", "gzread.c"),
        *("gzwrite.c", "infback.c", "inffast.c", "inflate.c", "inftrees.c", "trees.c"),
        *("uncompr.c", "zutil.c"),
    ),
    ("zlib.h", "zconf.h"),
    ("-DZ_HAVE_UNISTD_H",),  # as zlib's ./configure writes into zconf.h on POSIX (gz* I/O)
)
FST_LIBRARIES = (LZ4, ZLIB)


class ClibBuildError(ToolchainError):
    """A vendored library did not compile (the message has the compiler's first error line)."""


def _key(lib: VendoredLibrary, cc: str) -> str:
    h = hashlib.sha256(" ".join([cc, *lib.defines]).encode())
    for path in lib.files():
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def _run(cmd: list[str], cwd: Path, lib: VendoredLibrary) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=cwd)
        first = (done.stderr.strip().splitlines() or ["no output"])[0]
    except (OSError, subprocess.TimeoutExpired) as exc:
        done, first = None, str(exc)
    if done is None or done.returncode != 0:
        raise ClibBuildError(
            f"building the vendored {lib.folder.name} for FST tracing failed: {first} "
            "(or ask for VCD: WAVES=vcd with make, waves='vcd' in Python)"
        )


def build(lib: VendoredLibrary, root: Path) -> Path:
    """The folder under ``root`` holding ``lib<name>.a`` and the library's headers, built on
    first use and kept per source and compiler; safe when several processes build it at once."""
    cc = knobs.CXX.get()
    out = root / f"{lib.folder.name}-{_key(lib, cc)}"
    archive = f"lib{lib.name}.a"
    if (out / archive).is_file():
        return out
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{lib.folder.name}-", dir=root))
    try:
        for header in lib.headers:
            shutil.copy(lib.folder / header, tmp / header)
        objects = []
        for source in lib.sources:
            obj = f"{Path(source).stem}.o"
            # -x c: the C++ compiler (CXX) compiles these as C; zlib's own headers by -I.
            cmd = [cc, "-x", "c", "-O2", "-fPIC", *lib.defines, f"-I{lib.folder}"]
            _run([*cmd, "-c", str(lib.folder / source), "-o", obj], tmp, lib)
            objects.append(obj)
        _run(["ar", "rcs", archive, *objects], tmp, lib)
        for obj in objects:
            (tmp / obj).unlink()
        try:
            os.replace(tmp, out)
        except OSError:  # another process put it there first
            if not (out / archive).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def fst_args(root: Path) -> list[str]:
    """Verilator arguments that compile and link FST tracing against the vendored libraries."""
    folders = [build(lib, root) for lib in FST_LIBRARIES]
    return [
        "-CFLAGS",
        " ".join(f"-I{folder}" for folder in folders),
        "-LDFLAGS",
        " ".join(f"-L{folder}" for folder in folders),
    ]

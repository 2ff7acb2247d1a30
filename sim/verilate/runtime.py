"""A shared cache of the compiled Verilator runtime (verilated.o, verilated_vpi.o, ...).

Every Verilator build compiles the same runtime library sources next to the design; for the
accelerator that is about half of the C++ compile time (~50 CPU-seconds of ~100). These objects
depend only on the toolchain and the compile flags, so :mod:`sim.verilate.build` runs

    python sim/verilate/runtime.py restore BUILD_DIR CACHE_DIR MAKE_ARGS...   (after verilator)
    make ...
    python sim/verilate/runtime.py save BUILD_DIR CACHE_DIR MAKE_ARGS...      (after make)

(standard library only, run as a script).

The key is a hash of the exact compile commands make would run for the runtime objects
(``make -n -B``), the compiler's version and the runtime sources' sizes and times, so a change of
flags, defines, compiler or Verilator never reuses a stale object. Restored copies are newer than
the generated makefile, so make sees them up to date and does not compile them.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sim import knobs

PREFIX = "Vtop"


def runtime_objects(build_dir: Path) -> list[str]:
    """The runtime objects of a verilated model (VM_GLOBAL_FAST/SLOW of Vtop_classes.mk)."""
    text = (build_dir / f"{PREFIX}_classes.mk").read_text()
    names: list[str] = []
    for block in re.findall(r"^VM_GLOBAL_(?:FAST|SLOW) \+= \\\n((?:[ \t]+\S+ \\\n)*)", text, re.M):
        names += [line.strip().rstrip("\\").strip() for line in block.splitlines()]
    return [f"{name}.o" for name in names if name]


def runtime_key(build_dir: Path, make_args: list[str]) -> str:
    objects = runtime_objects(build_dir)
    dry = subprocess.run(
        ["make", "-n", "-B", "-C", str(build_dir), "-f", f"{PREFIX}.mk", *make_args, *objects],
        capture_output=True,
        text=True,
        check=True,
    )
    commands = [
        line
        for line in dry.stdout.splitlines()
        if any(f"-o {obj}" in line for obj in objects) or line.startswith(("c++", "g++"))
    ]
    h = hashlib.sha256("\n".join(sorted(set(commands))).encode())
    cxx = knobs.CXX.get()
    h.update(subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.encode())
    root = knobs.VERILATOR_ROOT.get()
    if root:
        include = Path(root) / "include"
        for path in sorted(include.rglob("*")):
            if path.is_file():
                st = path.stat()
                h.update(f"{path.relative_to(include)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    h.update(" ".join(objects).encode())
    return h.hexdigest()[:16]


def restore(build_dir: Path, cache_root: Path, make_args: list[str]) -> int:
    """Copy cached runtime objects into ``build_dir``; returns how many were restored."""
    objects = runtime_objects(build_dir)
    cached = cache_root / runtime_key(build_dir, make_args)
    if not all((cached / obj).is_file() for obj in objects):
        return 0
    for obj in objects:
        shutil.copyfile(cached / obj, build_dir / obj)  # a new file: newer than Vtop.mk
    return len(objects)


def save(build_dir: Path, cache_root: Path, make_args: list[str]) -> int:
    """Store ``build_dir``'s runtime objects in the cache (atomically, once per key)."""
    objects = runtime_objects(build_dir)
    cached = cache_root / runtime_key(build_dir, make_args)
    cached.mkdir(parents=True, exist_ok=True)
    stored = 0
    for obj in objects:
        target = cached / obj
        if target.is_file() or not (build_dir / obj).is_file():
            continue
        fd, tmp = tempfile.mkstemp(dir=cached, prefix=f".{obj}.")
        os.close(fd)
        shutil.copyfile(build_dir / obj, tmp)
        os.replace(tmp, target)
        stored += 1
    return stored


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in ("restore", "save"):
        print(
            "usage: verilator_runtime.py restore|save BUILD_DIR CACHE_DIR [MAKE_ARGS...]",
            file=sys.stderr,
        )
        return 2
    action, build_dir, cache_root, make_args = argv[0], Path(argv[1]), Path(argv[2]), argv[3:]
    try:
        if action == "restore":
            count = restore(build_dir, cache_root, make_args)
            print(f"verilator runtime: {count} objects restored from {cache_root}")
        else:
            count = save(build_dir, cache_root, make_args)
            print(f"verilator runtime: {count} objects saved to {cache_root}")
    except (OSError, subprocess.CalledProcessError) as exc:
        # The cache is an optimisation: never fail a build because of it.
        print(f"verilator runtime cache not used: {exc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

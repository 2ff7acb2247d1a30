"""Progress of a Verilator build, read from its build directory while it runs: verilating,
then compiling C++ (share of the source bytes whose object file exists, with an ETA), then
linking. Reported on the ``cosim.build`` logger (the CLI prints it on stderr)."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sim import knobs

log = logging.getLogger("cosim.build")

#: Seconds between two progress lines (a phase change is reported at once).
EVERY_S = 5.0


_LIST = re.compile(r"^(VM_(?:CLASSES|SUPPORT|GLOBAL)_\w+|VM_USER_CLASSES)\s*\+?=(.*)$")
_RULE = re.compile(r"^(\w+)\.o:\s*(\S+\.cpp)")
GUESS_BYTES = 50_000  # a unit whose source is not found (a system Verilator's runtime)


def units(build_dir: Path) -> dict[str, int]:
    """The C++ units the verilated makefiles compile (model, harness, Verilator runtime), each
    with its source size in bytes as its weight."""
    names: list[str] = []
    for mk in ("Vtop_classes.mk", "Vtop.mk"):
        listing = False
        for text in (build_dir / mk).read_text().splitlines():
            match = _LIST.match(text)
            if match:
                listing, text = True, match.group(2)
            elif not listing:
                continue
            names += [word for word in text.replace("\\", " ").split() if word.isidentifier()]
            listing = text.rstrip().endswith("\\")
    rules = {}
    for text in (build_dir / "Vtop.mk").read_text().splitlines():
        match = _RULE.match(text)
        if match:
            rules[match.group(1)] = Path(match.group(2))
    include = Path(knobs.VERILATOR_ROOT.get() or "/nonexistent") / "include"
    sizes = {}
    for name in names:
        for source in (build_dir / f"{name}.cpp", rules.get(name), include / f"{name}.cpp"):
            if source is not None and source.is_file():
                sizes[name] = source.stat().st_size
                break
        else:
            sizes[name] = GUESS_BYTES
    return sizes


def state(build_dir: Path) -> tuple[str, float]:
    """The build's phase and the fraction of its C++ (by source bytes) compiled so far.

    Phases: ``verilating`` (no makefile yet), ``compiling C++`` (some object files missing),
    ``linking`` (all there)."""
    if not (build_dir / "Vtop_classes.mk").exists() or not (build_dir / "Vtop.mk").exists():
        return "verilating", 0.0
    sizes = units(build_dir)
    total = sum(sizes.values())
    done = sum(size for name, size in sizes.items() if (build_dir / f"{name}.o").exists())
    if total == 0 or done < total:
        return "compiling C++", done / total if total else 0.0
    return "linking", 1.0


def line(phase: str, fraction: float, elapsed: float, compile_s: float) -> str:
    """One progress line; the ETA extrapolates the compile so far (``compile_s`` seconds in)."""
    text = f"  {phase}"
    if phase == "compiling C++":
        text += f" {fraction:.0%}"
        if fraction >= 0.2 and compile_s > 0:
            text += f", ETA {compile_s * (1 - fraction) / fraction:.0f} s"
    return text + f" ({elapsed:.0f} s so far)"


@contextmanager
def watch(build_dir: Path, poll_s: float = 1.0) -> Iterator[None]:
    """Log the progress of the build in ``build_dir`` while the body runs."""
    stop = threading.Event()
    started = time.perf_counter()

    def loop() -> None:
        last_phase, last_said, compile_from = "", 0.0, 0.0
        while not stop.wait(poll_s):
            try:
                phase, fraction = state(build_dir)
            except OSError:  # a file went away while listing: look again
                continue
            now = time.perf_counter() - started
            if phase == "compiling C++" and not compile_from:
                compile_from = now
            if phase != last_phase or now - last_said >= EVERY_S:
                compile_s = now - compile_from if compile_from else 0.0
                log.info(line(phase, fraction, now, compile_s))
                last_phase, last_said = phase, now

    thread = threading.Thread(target=loop, name="build-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()

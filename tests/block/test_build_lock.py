"""A build killed with SIGKILL (``kill -9`` of ``make sim``) leaves nothing behind: its make
and compilers run in a process group their lifeline wrapper ends when the build's process dies
(SIGTERM, then SIGKILL; sim/verilate/lifeline.py), so make removes what it was writing; the
build lock (held by the commands while they live) then lets the next build of the same model
start, and the model it builds works (a SIGKILLed compiler once left a truncated precompiled
header: `PCH files were found, but they were invalid`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hdl_gen.emit import write_by_content
from hdl_gen.pe import ProcessingElement
from sim.verilate.build import BuildSpec, build, cache_key, run_cocotb
from tests.block.harness import port_names
from tests.unit.build.test_lifeline import gone

REPO = Path(__file__).resolve().parents[2]
#: SIGTERM, a second for make to clean up, then SIGKILL: the group is gone within this
GRACE_S = 3.0


def pe_spec(directory: Path) -> BuildSpec:
    component = ProcessingElement()
    path, digest = write_by_content(component, "pe", directory)
    public = tuple(f'public_flat_rw -module "pe" -var "{port}"' for port in port_names(component))
    return BuildSpec("pe", digest, (path,), "pe", public)


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _make_under(pid: int) -> int | None:
    """The compiling `make -j` descended from ``pid`` (not the runtime cache's `make -n`)."""
    tree, todo = _children(), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            try:
                argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if Path(argv[0].decode()).name == "make" and b"-j" in argv:
                return child
            todo.append(child)
    return None


def _descendants(pid: int) -> list[int]:
    tree, todo, found = _children(), [pid], []
    while todo:
        children = tree.get(todo.pop(), [])
        found += children
        todo += children
    return found


@pytest.mark.simulator
def test_a_killed_first_build_leaves_nothing_and_the_next_one_works(tmp_path):
    root = tmp_path / "build" / "verilator"
    gen = root / "gen"  # where the lint waivers expect generated Verilog
    spec = pe_spec(gen)
    code = (
        "from pathlib import Path; from sim.verilate.build import build; "
        "from tests.block.test_build_lock import pe_spec; "
        f"build(pe_spec(Path({str(gen)!r})), Path({str(root)!r}))"
    )
    first = subprocess.Popen([sys.executable, "-c", code], cwd=REPO)
    make, compilers = None, []
    try:
        for _ in range(600):  # until the first build's make runs a compiler (seconds to a minute)
            make = _make_under(first.pid)
            compilers = [] if make is None else _descendants(make)
            if compilers or first.poll() is not None:
                break
            time.sleep(0.2)
        assert compilers, "the first build never reached its compilers"
        os.kill(first.pid, signal.SIGKILL)  # only the Python process, as `kill -9` of make sim
        first.wait()
        left = [pid for pid in compilers if not gone(pid, within_s=GRACE_S)]
        assert not left, f"{len(left)} compiler(s) of the killed build outlived it by {GRACE_S} s"
        model = build(spec, root)
    finally:
        if first.poll() is None:
            first.kill()
    assert not model.cached and model.build_dir.name.endswith(cache_key(spec))
    run_cocotb(model, "tests.block.cocotb_pe", tmp_path / "run", extra_env={"PE_SEED": "3"})

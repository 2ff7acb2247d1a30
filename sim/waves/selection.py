"""``WAVE_SIGNALS``: which signals a traced run writes.

- ``default`` (or empty): the rows of the save file (:mod:`sim.waves.signals`: the units' state,
  handshakes, instruction indices and counters, the array's edge), not every register;
- ``all``: every signal the traced build has (the PE array's inside is never traced: the build
  turns it off, ``sim/backends/accelerator.py``);
- patterns: comma-separated globs over hierarchical names, with or without the leading
  ``tb_top.`` (``dut.accel.load.*,dut.perf.*``); a pattern that matches nothing is refused.

The selection is made at run time - the harness hands it to the trace object's
``dumpvars(level, scope)`` before the file is opened (``sim/csrc/cocotb_main.cpp``,
``--trace-select``) - so one traced build serves every selection. The names a selection is
matched against are the build's own: the header of a dump the harness writes without running
(``--trace-names``), kept in the build directory.
"""

from __future__ import annotations

import fnmatch
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

from sim.waves.dump import Dump
from sim.waves.signals import TOP, all_traces, full_name
from sim.waves.window import WaveError

DEFAULT = "default"
ALL = "all"
#: Always written: the dump's time span and layer markers are read from the clock.
ALWAYS = (f"{TOP}.clk",)
NAMES_FILE = "signals.json"


def signal_table(header: Path) -> dict[str, int]:
    """Every signal of a traced build, name -> bits, from its dump header
    (:func:`sim.verilate.trace_header.trace_header`); cached beside it."""
    return _read(header)[0]


def dotted_names(header: Path) -> dict[str, str]:
    """The signals whose own name holds a dot (Amaranth's flattened fields:
    ``dram_req__payload.addr`` in module ``dut``), name -> the scope that holds them."""
    return _read(header)[1]


def _read(header: Path) -> tuple[dict[str, int], dict[str, str]]:
    cache = header.with_name(NAMES_FILE)
    try:
        data = json.loads(cache.read_text())
        return dict(data["bits"]), dict(data["scopes"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    bits, scopes = {}, {}
    for var in Dump(header).wave.all_vars():
        bits[var.full_name] = var.bitwidth
        if "." in var.name:
            scopes[var.full_name] = var.full_name[: -len(var.name) - 1]
    try:
        cache.write_text(json.dumps({"bits": bits, "scopes": scopes}, indent=0, sort_keys=True))
    except OSError:
        pass  # a read-only build directory reads the header each time
    return bits, scopes


def choose(text: str | None, table: Mapping[str, int]) -> list[str] | None:
    """The names ``text`` selects from ``table`` (sorted); ``None`` for ``all``. A pattern
    that matches no signal is a :class:`WaveError` naming it and what names look like."""
    text = (text or DEFAULT).strip()
    if text == ALL:
        return None
    if text == DEFAULT:
        wanted = {full_name(trace) for trace in all_traces()} | set(ALWAYS)
        return sorted(name for name in table if name in wanted)
    chosen = set(ALWAYS) & set(table)
    for pattern in (item.strip() for item in text.split(",")):
        hits = {name for name in table if _matches(name, pattern)}
        if not hits:
            raise WaveError(
                f"WAVE_SIGNALS pattern {pattern!r} matches none of the {len(table):,} signals "
                f"of the traced build (names look like {TOP}.dut.accel.load.index; globs such "
                "as dut.accel.load.* or *state*, `default` or `all`)"
            )
        chosen |= hits
    return sorted(chosen)


def _matches(name: str, pattern: str) -> bool:
    short = name.removeprefix(f"{TOP}.")
    return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(short, pattern)


def _scope_of(name: str, dotted: Mapping[str, str]) -> str:
    return dotted.get(name) or name.rpartition(".")[0]


def _scopes(name: str, dotted: Mapping[str, str]) -> list[str]:
    """The scopes holding ``name``, outermost first: ``a.b.c`` -> ``a``, ``a.b``."""
    parts = _scope_of(name, dotted).split(".")
    return [".".join(parts[:n]) for n in range(1, len(parts) + 1)]


def dumpvars_lines(
    chosen: Iterable[str], table: Iterable[str], dotted: Mapping[str, str] | None = None
) -> list[str]:
    """``LEVEL NAME`` lines for the harness's ``dumpvars``: a scope whose every signal is
    chosen is one line (all levels below it), any other chosen signal a line of its own (level
    1). Verilator reads every dot of a line as a scope separator, so a signal with a dot in its
    own name (``dotted``) is written with the other signals of its scope (level 1 there)."""
    dotted = dotted or {}
    chosen = sorted(set(chosen))
    total: Counter[str] = Counter(scope for name in table for scope in _scopes(name, dotted))
    picked: Counter[str] = Counter(scope for name in chosen for scope in _scopes(name, dotted))
    lines: dict[str, str] = {}
    for name in chosen:
        whole = next((s for s in _scopes(name, dotted) if picked[s] == total[s]), None)
        if whole is not None:
            lines.setdefault(whole, f"99 {whole}")
        elif name in dotted:
            lines.setdefault(dotted[name], f"1 {dotted[name]}")
        else:
            lines.setdefault(name, f"1 {name}")
    return list(lines.values())


def written(lines: Iterable[str], table: Iterable[str], dotted: Mapping[str, str]) -> list[str]:
    """The signals the harness writes for ``lines``: Verilator's ``dumpvars`` match (the
    line's words a prefix of the signal's, ending at a word, no more levels below than given);
    a packed array's elements (``a.[0]``) come with a line naming a scope above the array, not
    with one naming the array itself."""
    items: list[tuple[int, str]] = []
    for line in lines:
        level_text, name = line.split(" ", 1)
        items.append((int(level_text), name.replace(".", " ")))
    out = []
    for full in table:
        scope = _scope_of(full, dotted)
        leaf = full[len(scope) + 1 :]
        element = leaf.startswith("[")  # a packed array's: written with a scope line only
        if element:
            scope, _, leaf = scope.rpartition(".")
        declared = f"{scope.replace('.', ' ')} {leaf}"
        for levels, item in items:
            rest = declared[len(item) :]
            if declared.startswith(item) and (not rest or rest[0] == " "):
                if rest.count(" ") <= levels and not (element and not rest):
                    out.append(full)
                    break
    return sorted(out)


def selected_bits(chosen: list[str] | None, table: Mapping[str, int]) -> int:
    """Bits written per sample: the chosen signals' widths (``None``: every signal)."""
    names = table if chosen is None else chosen
    return sum(table[name] for name in names)


def write_select(lines: list[str] | None, path: Path) -> Path | None:
    """Write the harness's selection file (``None`` for ``all``: no file, every signal)."""
    if lines is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def resolve(
    text: str | None, header: Path
) -> tuple[list[str] | None, list[str] | None, int, int]:
    """What ``text`` writes on the build of ``header``: (dumpvars lines or None for all, the
    signals written or None for all, their count, their bits)."""
    table, dotted = signal_table(header), dotted_names(header)
    chosen = choose(text, table)
    if chosen is None:
        return None, None, len(table), selected_bits(None, table)
    lines = dumpvars_lines(chosen, table, dotted)
    names = written(lines, table, dotted)
    return lines, names, len(names), selected_bits(names, table)

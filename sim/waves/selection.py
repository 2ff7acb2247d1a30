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
    cache = header.with_name(NAMES_FILE)
    try:
        return {str(k): int(v) for k, v in json.loads(cache.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        pass
    table = Dump(header).widths()
    try:
        cache.write_text(json.dumps(table, indent=0, sort_keys=True))
    except OSError:
        pass  # a read-only build directory reads the header each time
    return table


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


def _scopes(name: str) -> list[str]:
    """The scopes holding ``name``, outermost first: ``a.b.c`` -> ``a``, ``a.b``."""
    parts = name.split(".")
    return [".".join(parts[:n]) for n in range(1, len(parts))]


def dumpvars_lines(chosen: Iterable[str], table: Iterable[str]) -> list[str]:
    """``LEVEL NAME`` lines for the harness's ``dumpvars``: a scope whose every signal is
    chosen is one line (all levels below it), any other chosen signal a line of its own."""
    chosen = sorted(set(chosen))
    total: Counter[str] = Counter(scope for name in table for scope in _scopes(name))
    picked: Counter[str] = Counter(scope for name in chosen for scope in _scopes(name))
    lines: dict[str, str] = {}
    for name in chosen:
        whole = next((s for s in _scopes(name) if picked[s] == total[s]), None)
        key = whole or name
        lines.setdefault(key, f"{99 if whole else 1} {key}")
    return list(lines.values())


def selected_bits(chosen: list[str] | None, table: Mapping[str, int]) -> int:
    """Bits written per sample: the chosen signals' widths (``None``: every signal)."""
    names = table if chosen is None else chosen
    return sum(table[name] for name in names)


def write_select(chosen: list[str] | None, table: Mapping[str, int], path: Path) -> Path | None:
    """Write the harness's selection file (``None`` for ``all``: no file, every signal)."""
    if chosen is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(dumpvars_lines(chosen, table)) + "\n")
    return path

"""GTKWave save files (``.gtkw``) for accelerator dumps, and the translate-filter files that show
opcodes, error codes and FSM states as names.

The filters come from the definitions, never from hand-kept lists: opcodes and error codes from
:mod:`arch.isa`, FSM state names from ``rtl/<config>/fsm_states.json`` (``make rtl``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from vcd.gtkw import GTKWSave, make_translation_filter

from arch import isa
from sim.waves.dump import Dump
from sim.waves.signals import GROUPS, TOP, Trace, all_traces, full_name, label

MARKER_LETTERS = "abcdefghijklmnopqrstuvwxyz"
VIEW_PIXELS = 900  # width of GTKWave's wave pane the zoom is chosen for
OTHER_ROWS = 400  # signals of a WAVE_SIGNALS pattern shown beyond the groups


def fsm_state_names(rtl_dir: Path) -> dict[str, dict[int, str]]:
    """``{"accel.load.frame_state": {0: "IDLE", ...}}`` for the RTL in ``rtl_dir``."""
    path = rtl_dir / "fsm_states.json"
    if not path.exists():
        return {}
    return {
        fsm: {int(value): name for value, name in states.items()}
        for fsm, states in json.loads(path.read_text()).items()
    }


def write_filters(directory: Path, rtl_dir: Path) -> dict[str, Path]:
    """Write one filter file per named value set; returns ``{key: file}`` where the key is
    "opcode", "error_code" or the FSM path below the DUT (``accel.load.frame_state``)."""
    directory.mkdir(parents=True, exist_ok=True)
    tables: dict[str, tuple[dict[int, str], int]] = {}
    for enum in (isa.Opcode, isa.ErrorCode):
        key = "opcode" if enum is isa.Opcode else "error_code"
        tables[key] = ({m.value: m.name for m in enum}, enum.as_shape().width)
    for fsm, states in fsm_state_names(rtl_dir).items():
        tables[fsm] = (states, max(1, max(states).bit_length()))
    files = {}
    for key, (names, width) in tables.items():
        path = directory / f"{key.replace('.', '_')}.txt"
        path.write_text(make_translation_filter(sorted(names.items()), "hex", width) + "\n")
        files[key] = path
    return files


def _filter_key(trace: Trace) -> str | None:
    if trace.names == "fsm":
        assert trace.path.startswith("dut.")
        return trace.path.removeprefix("dut.")
    return trace.names


def zoom_for(span: int) -> float:
    """GTKWave's zoom level that shows ``span`` time units across a default-sized window
    (measured with GTKWave 3.3: zoom z shows about 0.0056 * 2**-z units per pixel)."""
    per_pixel = max(span, 1) / VIEW_PIXELS
    return -(math.log2(per_pixel) + 7.49)


def write_savefile(
    dump: Path,
    rtl_dir: Path,
    markers: list[tuple[int, str]],
    title: str,
    span: tuple[int, int] = (0, 0),
    widths: Mapping[str, int] | None = None,
) -> Path:
    """Write ``<dump>.gtkw`` next to ``dump``: the signal groups of :mod:`sim.waves.signals`
    with names translated and unique row labels (:func:`sim.waves.signals.label`),
    ``markers`` ((time, label), at most 26: GTKWave's named markers A-Z, with their labels as
    marker names and in the file's comments), zoomed to ``span`` (first, last time). GTKWave
    names vectors with their bit range: ``widths`` (signal -> bits) default to the dump's, and
    then only the rows the dump holds are written (a ``WAVE_SIGNALS`` selection leaves some
    out), followed by a group of the dump's other signals. Returns its path."""
    present: set[str] | None = None
    if widths is None:
        widths = Dump(dump).widths()
        present = set(widths)
    filters = write_filters(dump.parent / "filters", rtl_dir)
    path = dump.with_suffix(".gtkw")
    markers = markers[: len(MARKER_LETTERS)]
    with path.open("w") as fh:
        save = GTKWSave(fh)
        save.comment(
            title,
            "written by sim/waves/savefile.py; open with `make waves`",
            *(
                f"marker {MARKER_LETTERS[n].upper()}: {label}"
                for n, (_t, label) in enumerate(markers)
            ),
        )
        save.dumpfile(str(dump))
        save.savefile(str(path))
        save.timestart(span[0])
        named = {MARKER_LETTERS[n]: time for n, (time, _label) in enumerate(markers)}
        zoom = zoom_for(span[1] - span[0])
        save.zoom_markers(zoom, markers[0][0] if markers else -1, **named)  # type: ignore[arg-type]
        for n, (_time, text) in enumerate(markers):  # GTKWave shows these names on the ruler
            fh.write(f"[markername] {MARKER_LETTERS[n].upper()}{text}\n")
        save.size(1600, 1000)
        save.signals_width(300)
        save.sst_expanded(True)
        save.treeopen(f"{TOP}.")
        save.treeopen(f"{TOP}.dut.accel.")
        for group, traces in GROUPS:
            shown = [t for t in traces if present is None or full_name(t) in present]
            if not shown:
                continue
            with save.group(group):
                for trace in shown:
                    key = _filter_key(trace)
                    names = filters.get(key) if key else None
                    name = full_name(trace)
                    bits = widths.get(name, 1)
                    save.trace(
                        f"{name}[{bits - 1}:0]" if bits > 1 else name,
                        alias=label(trace),
                        datafmt=trace.fmt if names is None else "hex",
                        translate_filter_file=str(names) if names else None,
                    )
        _other_signals(save, present, widths)
    return path


def _other_signals(save: GTKWSave, present: set[str] | None, widths: Mapping[str, int]) -> None:
    """A group of the dump's signals that no group above shows (a ``WAVE_SIGNALS`` pattern's),
    when there are at most :data:`OTHER_ROWS` of them (``all``: GTKWave's tree shows them)."""
    if present is None:
        return
    grouped = {full_name(trace) for trace in all_traces()} | {f"{TOP}.clk"}
    other = sorted(present - grouped)
    if not other or len(other) > OTHER_ROWS:
        return
    with save.group("other selected signals"):
        for name in other:
            bits = widths.get(name, 1)
            save.trace(f"{name}[{bits - 1}:0]" if bits > 1 else name, datafmt="hex")

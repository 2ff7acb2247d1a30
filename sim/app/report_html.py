"""report.html: one self-contained page per run, from report.json and the plots beside it.

The page holds the totals, accuracy, the layer table (where each layer ran and why, its cycles,
utilization, DRAM traffic, SQNR), the utilization and SQNR plots inlined as base64 PNG, the
provenance (config, executable digest, input, versions) and relative links to the listing, the
timeline, the waveform and the raw reports - only to files that exist. CSS is inline; nothing is
fetched. Every text from the report is escaped (:func:`html.escape`): layer names come from
user models.
"""

from __future__ import annotations

import base64
import hashlib
import html
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["render", "write"]

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .5em 0; }
th, td { border: 1px solid #ccc; padding: 2px 8px; }
th { background: #f0f0f0; text-align: left; } td.n { text-align: right; }
tr.host td { background: #fff8e6; } td.bad { color: #b00; font-weight: bold; }
img { max-width: 100%; border: 1px solid #ddd; } code { font-size: 90%; }
"""

#: The run directory's files the page links to, with their captions (when they exist).
LINKED_FILES = (
    ("listing.txt", "listing (disassembly, descriptors, memory map)"),
    ("timeline.json", "timeline (open in ui.perfetto.dev or chrome://tracing)"),
    ("report.json", "report.json"),
    ("report.csv", "report.csv"),
)
PLOTS = (("utilization.png", "cycles and utilization per layer"), ("sqnr.png", "SQNR vs fp32"))


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(value: Any, digits: int = 4) -> str:
    """Plain text of a value: thousands separated, floats to ``digits`` digits, yes/no, -."""
    if isinstance(value, bool) or value is None:
        return "-" if value is None else ("yes" if value else "no")
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _table(header: Iterable[str], rows: Iterable[tuple[list[str], str]]) -> str:
    """A table of ``rows`` = (cells as HTML, the row's CSS class or "")."""
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    head = f"<tr>{head}</tr>" if head else ""
    body = "".join(
        (f'<tr class="{css}">' if css else "<tr>") + "".join(cells) + "</tr>" for cells, css in rows
    )
    return f"<table>{head}{body}</table>"


def _cell(value: Any, numeric: bool = False, bad: bool = False) -> str:
    """One escaped cell; numbers right-aligned."""
    css = " ".join(c for c, on in (("n", numeric), ("bad", bad)) if on)
    text = _e(_num(value))
    return f'<td class="{css}">{text}</td>' if css else f"<td>{text}</td>"


def _pairs(items: Iterable[tuple[str, Any]]) -> str:
    """A two-column table of (label, value) as plain text."""
    return _table((), (([f"<th>{_e(k)}</th>", _cell(v)], "") for k, v in items))


def where_and_why(layer: dict[str, Any]) -> tuple[str, str]:
    """Where a layer ran and why, in words: the placement's reason for a host layer."""
    if layer["device"] == "host":
        return "host", layer.get("host_reason") or "no accelerator op for it"
    return "accelerator", f"the accelerator runs {layer['op']}"


def layer_table(report: dict[str, Any]) -> str:
    sqnr = {e["layer"]: e["sqnr_db"] for e in report.get("accuracy", {}).get("sqnr", [])}
    header = ("layer", "op", "ran on", "why", "MACs", "cycles", "ideal cycles", "utilization",
              "DRAM read B", "DRAM write B", "bit-exact", "limited by", "SQNR dB",
              "roofline bound", "x bound")  # fmt: skip
    rows = []
    for layer in report["layers"]:
        where, why = where_and_why(layer)
        name = layer["name"]
        db = ("exact" if sqnr[name] is None else sqnr[name]) if name in sqnr else None
        cells = [
            _cell(layer["name"]),
            _cell(layer["op"]),
            _cell(where),
            _cell(why),
            *(
                _cell(layer.get(key), numeric=True)
                for key in ("macs", "cycles", "ideal_cycles", "utilization")
            ),
            _cell(layer["dram_read_bytes"], numeric=True),
            _cell(layer["dram_write_bytes"], numeric=True),
            _cell(layer["bit_exact"], bad=not layer["bit_exact"]),
            _cell(layer.get("limiter", "")),
            _cell(db, numeric=True),
            *_roofline_cells(layer.get("roofline")),
        ]
        rows.append((cells, "host" if where == "host" else ""))
    return _table(header, rows)


def _roofline_cells(line: dict[str, Any] | None) -> list[str]:
    """A device layer's roofline bound (cycles, and which: compute or DRAM) and its cycles over
    it (:mod:`arch.roofline`); empty cells for a host layer."""
    if not line:
        return [_cell(None), _cell(None)]
    bound = f"{_num(line['bound_cycles'])} ({line['limited_by']}, {line['unit']})"
    return [_cell(bound), _cell(line["achieved_over_bound"], numeric=True)]


def _totals(report: dict[str, Any]) -> str:
    t = report["total"]
    return _pairs(
        [
            ("cycles", t["cycles"]),
            ("utilization", t["utilization"]),
            ("MACs on the accelerator", f"{_num(t['macs'])} ({t['accel_mac_fraction']:.1%})"),
            ("bit-exact", t["bit_exact"]),
            ("host time", f"{t.get('host_s', 0)} s"),
            ("simulation", f"{t['sim_wall_s']} s, {_num(t['sim_cycles_per_s'])} cycles/s"),
            ("shards", t["shards"]),
        ]
    )


def _accuracy(report: dict[str, Any]) -> str:
    a = report.get("accuracy") or {}
    items = [
        ("top-1 agrees with fp32", a.get("top1_agree_fp32")),
        ("cosine vs fp32", _num(a.get("cosine_vs_fp32"), 6)),
    ]
    dataset = a.get("dataset")
    if dataset:
        items.append(
            (
                f"data set {dataset.get('name')} (n={dataset.get('n')})",
                f"top-1 fp32 {_num(dataset.get('top1_fp32'))}, int8 "
                f"{_num(dataset.get('top1_int8'))}, agreement {_num(dataset.get('agreement'))}",
            )
        )
    twin = a.get("twin_agreement")
    if twin:
        items.append(
            (
                "codes equal to the fake-quantized twin",
                f"{_num(twin.get('equal'), 5)} (worst {twin.get('worst_layer')}: "
                f"{_num(twin.get('worst_equal'), 5)})",
            )
        )
    return _pairs(items)


def file_sha256(path: Path) -> str | None:
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _provenance(report: dict[str, Any]) -> str:
    p = report.get("provenance") or {}
    given = p.get("input") or {}
    exe = report.get("executable")
    config = report["config"]
    calibration = report.get("calibration") or {}
    items = [
        ("model", report["model"]),
        ("backend", report["backend"]),
        ("config", config["name"]),
        ("executable", Path(exe).name if exe else None),
        ("executable sha256", file_sha256(Path(exe)) if exe else None),
        ("input", given.get("kind") or (report.get("input") or {}).get("source")),
        ("input sha256", given.get("sha256")),
        ("calibration", ", ".join(f"{k} {v}" for k, v in calibration.items()) or None),
        ("seed", p.get("seed")),
        ("started", p.get("started")),
        ("finished", p.get("finished")),
        *((f"version of {k}", v) for k, v in (p.get("versions") or {}).items()),
    ]
    fields = ", ".join(f"{k}={v}" for k, v in config.items() if k != "name")
    return _pairs(items) + f"<p><code>{_e(fields)}</code></p>"


def _links(report: dict[str, Any], directory: Path) -> str:
    links = [(directory / name, caption) for name, caption in LINKED_FILES]
    if report.get("waves"):
        links.append((Path(report["waves"]), "waveform (make waves opens it in GTKWave)"))
    if report.get("executable"):
        links.append((Path(report["executable"]), "executable (make sim BUNDLE=... reruns it)"))
    items = []
    for path, caption in links:
        full = path if path.is_absolute() else directory / path
        if full.is_file():
            href = Path(os.path.relpath(full, directory)).as_posix()
            items.append(f'<li><a href="{_e(href)}">{_e(href)}</a>: {_e(caption)}</li>')
    return f"<ul>{''.join(items)}</ul>" if items else "<p>-</p>"


def _plots(directory: Path) -> str:
    parts = []
    for name, caption in PLOTS:
        path = directory / name
        if path.is_file():
            data = base64.b64encode(path.read_bytes()).decode("ascii")
            parts.append(
                f'<figure><img alt="{_e(caption)}" src="data:image/png;base64,{data}">'
                f"<figcaption>{_e(caption)}</figcaption></figure>"
            )
    return "".join(parts) or "<p>no plot</p>"


def render(report: dict[str, Any], directory: Path) -> str:
    """The page of ``report`` (as written to report.json) whose files are in ``directory``."""
    title = f"{report['model']} on {report['config']['name']} ({report['backend']})"
    verdict = "bit-exact" if report["total"]["bit_exact"] else "NOT bit-exact"
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{_e(title)}: {verdict}</h1>"
        f"<h2>Totals</h2>{_totals(report)}"
        f"<h2>Accuracy</h2>{_accuracy(report)}"
        f"<h2>Layers</h2>{layer_table(report)}"
        f"<h2>Plots</h2>{_plots(directory)}"
        f"<h2>Files</h2>{_links(report, directory)}"
        f"<h2>Provenance</h2>{_provenance(report)}"
        "</body></html>\n"
    )


def write(report: dict[str, Any], directory: Path) -> Path:
    """``directory``/report.html (see the module docstring)."""
    path = directory / "report.html"
    path.write_text(render(report, directory), encoding="utf-8")
    return path

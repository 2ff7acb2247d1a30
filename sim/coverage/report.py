"""``make coverage``'s last step: merge the runs' counts and write the report.

``python -m sim.coverage.report DIR`` reads ``DIR/dat/*.dat`` (Verilator code coverage) and
``DIR/functional/*.xml`` (functional coverage, sim/coverage/functional.py) and writes, in DIR:
``coverage.info`` (lcov), ``coverage.xml`` (Cobertura, by lcov-cobertura), ``html/index.html``
(the per-module table, the functional coverpoints and their holes, and pycobertura's annotated
source), ``summary.json``; it prints the per-module table. Exit 2 with one line when there is
nothing to report.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from pathlib import Path

from sim.coverage import code, functional
from sim.verilate.build import REPO_ROOT


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:5.1f}%"


def table(rows: dict[tuple[str, str], code.Tally]) -> list[str]:
    """The per-module table as text lines (simulation-only modules marked)."""
    lines = [f"{'config':8} {'module':44} {'line':>16} {'toggle':>18}"]
    for (config, module), t in rows.items():
        note = "  (simulation-only, not counted)" if code.SIM_ONLY.match(module) else ""
        line = f"{t.line[1]}/{t.line[0]} {_pct(t.percent(t.line))}"
        toggle = f"{t.toggle[1]}/{t.toggle[0]} {_pct(t.percent(t.toggle))}"
        lines.append(f"{config:8} {module:44} {line:>16} {toggle:>18}{note}")
    return lines


def summary(rows: dict[tuple[str, str], code.Tally]) -> dict:
    totals = code.totals(rows)
    return {
        "modules": [
            {
                "config": config,
                "module": module,
                "sim_only": bool(code.SIM_ONLY.match(module)),
                "line": list(t.line),
                "toggle": list(t.toggle),
            }
            for (config, module), t in rows.items()
        ],
        "accelerator": {
            config: {
                "line_percent": t.percent(t.line),
                "toggle_percent": t.percent(t.toggle),
            }
            for config, t in totals.items()
        },
    }


def _html_page(text_table: list[str], holes: list[str], func_html: str, annotated: str) -> str:
    esc = html.escape
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>RTL coverage</title>"
        "<style>body{font-family:sans-serif} pre{font-size:12px}</style></head><body>"
        "<h1>RTL coverage</h1><h2>Code coverage per module (Verilator line + toggle)</h2>"
        f"<pre>{esc(chr(10).join(text_table))}</pre>"
        "<h3>Holes: line points never reached (first ones), toggles by signal</h3>"
        f"<pre>{esc(chr(10).join(holes))}</pre>"
        f"<h2>Functional coverage</h2>{func_html}"
        f"<h2>Annotated RTL (pycobertura)</h2>{annotated}</body></html>"
    )


def write(out: Path) -> tuple[dict, list[str]]:
    """Merge, write every output into ``out``; returns the summary and the per-module table."""
    dat_files = sorted((out / "dat").glob("*.dat"))
    func = functional.load(sorted((out / "functional").glob("*.xml")))
    if not dat_files and not func:
        raise FileNotFoundError(
            f"no coverage data in {out}/dat or {out}/functional: run `make coverage` "
            "(instrumented runs write it there)"
        )
    counts = code.merge(dat_files)
    rows = code.by_module(counts)
    info, xml = out / "coverage.info", out / "coverage.xml"
    code.write_lcov(counts, info, REPO_ROOT)
    from lcov_cobertura import LcovCobertura

    xml.write_text(LcovCobertura(info.read_text(), base_dir=str(REPO_ROOT)).convert())
    from pycobertura import Cobertura
    from pycobertura.filesystem import filesystem_factory
    from pycobertura.reporters import HtmlReporter

    cobertura = Cobertura(str(xml), filesystem=filesystem_factory(str(REPO_ROOT)))
    annotated = HtmlReporter(cobertura).generate() if counts else ""
    text = table(rows)
    holes = [
        f"{Path(p.file).name}:{p.line} {p.module} {p.what}" for p in code.holes(counts, "line")
    ]
    (out / "html").mkdir(parents=True, exist_ok=True)
    (out / "html" / "index.html").write_text(
        _html_page(text, holes, functional.to_html(func), annotated)
    )
    result = {
        **summary(rows),
        "excluded_yosys_guards": code.excluded(counts),
        "toggle_holes": code.toggle_holes(counts),
        "functional": functional.summary(func),
        "runs": len(dat_files),
    }
    (out / "summary.json").write_text(json.dumps(result, indent=2))
    return result, text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.coverage.report", description=__doc__)
    parser.add_argument("dir", type=Path, help="coverage directory (build/coverage)")
    args = parser.parse_args(argv)
    try:
        result, text = write(args.dir)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(text))
    print(
        f"not counted: {result['excluded_yosys_guards']} line points of Yosys initialisation guards"
    )
    for config, module, signal, n in result["toggle_holes"][:5]:
        print(f"toggle hole: {n} bit transitions of {signal} in {module} ({config})")
    for config, t in result["accelerator"].items():
        print(
            f"accelerator RTL ({config}): line {_pct(t['line_percent'])}, "
            f"toggle {_pct(t['toggle_percent'])} ({result['runs']} simulator runs merged)"
        )
    for name, cp in result["functional"].items():
        print(f"functional {name}: {cp['hit']}/{cp['bins']} bins ({cp['percent']:.1f}%)")
    print(f"report: {args.dir / 'html' / 'index.html'}, {args.dir / 'coverage.info'} (lcov), ")
    print(f"        {args.dir / 'coverage.xml'} (Cobertura)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

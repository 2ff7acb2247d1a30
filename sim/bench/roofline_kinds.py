"""Where a network stands against its roofline, per kind of layer, from a run's report.json:

    .venv/bin/python -m sim.bench.roofline_kinds build/runs/latest/report.json [...]

prints, per model, the utilization and per kind of device layer (its op and the unit that runs
it) the layers, their share of the cycles, the cycles over the sum of their bounds (1.00: at
the roofline) and how many of them are limited by DRAM.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any


def kinds(report: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per ``op/unit``: layers, cycles, bound cycles and DRAM-limited layers."""
    out: dict[str, dict[str, int]] = defaultdict(
        lambda: {"layers": 0, "cycles": 0, "bound": 0, "dram": 0}
    )
    for layer in report["layers"]:
        line = layer.get("roofline")
        if line is None:
            continue
        row = out[f"{layer['op']}/{line['unit']}"]
        row["layers"] += 1
        row["cycles"] += layer["cycles"]
        row["bound"] += line["bound_cycles"]
        row["dram"] += line["limited_by"] == "dram"
    return dict(out)


def table(report: dict[str, Any]) -> str:
    total = report["total"]
    host = sum(layer["device"] == "host" for layer in report["layers"])
    lines = [
        f"{report['model']} ({report['backend']}): {total['cycles']:,} cycles, utilization "
        f"{total['utilization']:.3f}, {host} host steps",
        f"  {'kind':<28} {'layers':>6} {'cycles':>7} {'x bound':>8} {'DRAM-bound':>10}",
    ]
    rows = sorted(kinds(report).items(), key=lambda item: -item[1]["cycles"])
    for kind, row in rows:
        share = row["cycles"] / total["cycles"] if total["cycles"] else 0.0
        ratio = row["cycles"] / row["bound"] if row["bound"] else float("nan")
        lines.append(
            f"  {kind:<28} {row['layers']:>6} {share:>7.1%} {ratio:>8.2f} {row['dram']:>10}"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for path in argv:
        try:
            report = json.loads(Path(path).read_text())
        except (OSError, ValueError) as error:
            print(f"error: cannot read report {path}: {error}", file=sys.stderr)
            return 2
        print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

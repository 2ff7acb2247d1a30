"""Run reports: report.json (the contract in the design brief), report.csv, utilization.png,
and the summary table printed on the terminal."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from arch.config import AccelConfig
from arch.roofline import Bounds
from sim.runtime.run import LayerResult, RunResult


def limiter(layer: LayerResult, deltas: dict[str, int], macs_per_cycle: int) -> str:
    """Where a layer's cycles went, from its counter deltas: a short label for the table."""
    if layer.device == "host":
        return f"host {layer.host_s * 1e3:.1f} ms"
    if layer.macs == 0:
        return "no MACs (pool, add, copy)"
    cycles = max(layer.cycles, 1)
    active = deltas.get("array_active", 0)
    waiting = deltas.get("compute_token_wait", 0)
    if (active or layer.op == "conv") and waiting > 0.1 * cycles:
        return f"DMA-bound {waiting / cycles:.0%}"
    if not active:
        # no row entered the array: a depthwise conv on the window unit (DWCONV)
        busy = deltas.get("compute_busy", 0)
        return f"window unit {busy / cycles:.0%}" if busy else "-"
    rows_ideal = layer.macs / macs_per_cycle
    if active > 1.05 * rows_ideal:
        return f"padding {active / rows_ideal - 1:.0%}"
    busy = deltas.get("compute_busy", 0)
    if busy - active > 0.1 * cycles:
        return f"fill/drain+post {(busy - active) / cycles:.0%}"
    return "compute-bound"


def roofline(layer: LayerResult, bounds: Bounds | None) -> dict[str, Any] | None:
    """A device layer's roofline (:mod:`arch.roofline`: both bounds from the program and the
    config), the bound that limits it and ``achieved_over_bound`` = its cycles / the higher
    bound (1.0: at the bound; 2.0: twice as slow). None for a host layer or without bounds."""
    if layer.device != "accel" or bounds is None:
        return None
    return {
        "unit": bounds.unit,
        "compute_bound_cycles": bounds.compute_cycles,
        "dram_bound_cycles": bounds.dram_cycles,
        "dram_load_bytes": bounds.load_bytes,
        "dram_store_bytes": bounds.store_bytes,
        "bound_cycles": bounds.cycles,
        "limited_by": bounds.limited_by,
        "achieved_over_bound": round(layer.cycles / bounds.cycles, 4) if bounds.cycles else None,
    }


def build(
    model: str,
    config: AccelConfig,
    result: RunResult,
    accuracy: dict[str, Any],
    layer_counters: list[dict[str, int]],
    ideal: list[int] | None = None,
    executable: str | Path | None = None,
    bounds: dict[str, Bounds] | None = None,
) -> dict[str, Any]:
    """report.json's content (the design brief's contract, and more); ``bounds`` are the device
    layers' rooflines by name (:func:`arch.roofline.program_bounds`)."""
    per_cycle = config.rows * config.cols
    ideal_of_accel = iter(ideal or [])  # the ISA simulator's cycles of each accelerator layer
    layers, bound_cycles = [], 0
    for index, layer in enumerate(result.layers):
        deltas = layer_counters[index] if index < len(layer_counters) else {}
        entry = {
            "name": layer.name,
            "op": layer.op,
            "device": layer.device,
            "macs": layer.macs,
            "cycles": layer.cycles,
            "utilization": round(layer.utilization(per_cycle), 4),
            "dram_read_bytes": layer.dram_read_bytes,
            "dram_write_bytes": layer.dram_write_bytes,
            "bit_exact": layer.bit_exact,
            "cycle_window": list(layer.cycle_window),
            "instructions": list(layer.insn_range),
            "tiling": layer.tiling,
            "limiter": limiter(layer, deltas, per_cycle),
            "counters": deltas,
        }
        line = roofline(layer, (bounds or {}).get(layer.name))
        if line is not None:
            entry["roofline"] = line
            bound_cycles += line["bound_cycles"]
        if ideal is not None and layer.device == "accel":
            entry["ideal_cycles"] = next(ideal_of_accel)
        if layer.mismatch:
            entry["mismatch"] = layer.mismatch
        if layer.note:
            entry["host_reason"] = layer.note
        layers.append(entry)
    macs = sum(layer.macs for layer in result.layers if layer.device == "accel")
    all_macs = sum(layer.macs for layer in result.layers)
    total = {
        "macs": macs,
        "accel_mac_fraction": round(macs / all_macs, 4) if all_macs else 1.0,
        "host_s": round(sum(layer.host_s for layer in result.layers), 3),
        "cycles": result.cycles,
        "utilization": round(macs / (per_cycle * result.cycles), 4) if result.cycles else 0.0,
        "bit_exact": result.bit_exact,
        "shards": max(
            1, len(result.shards)
        ),  # layer shards run in parallel (sim/scaleout/shards.py)
        "sim_wall_s": round(result.sim_wall_s, 3),
        "sim_cycles_per_s": round(result.cycles / result.sim_wall_s) if result.sim_wall_s else 0,
    }
    if ideal is not None:
        total["ideal_cycles"] = sum(ideal)
    if bound_cycles:  # the device layers' bounds, summed: a lower bound on their cycles
        total["roofline_bound_cycles"] = bound_cycles
    return {
        "model": model,
        "config": {"name": config.name, **config.to_dict()},
        "backend": result.backend,
        "executable": str(executable) if executable is not None else None,
        "layers": layers,
        "total": total,
        "accuracy": accuracy,
        # The dump's path (the contract), and its window, save file and size (sim/waves/).
        "waves": result.waves["file"] if result.waves else None,
        "wave_window": result.waves,
        **({"shard_runs": result.shards} if result.shards else {}),
        **({"hooks": result.hooks} if result.hooks else {}),  # user hooks (sim/backends/hooks.py)
        # RTL runs: the testbench DRAM's stall profile, seed and pauses (sim/backends/dram_stall.py)
        **({"dram_stall": result.dram_stall} if result.dram_stall else {}),
    }


def plain_json(value: Any) -> Any:
    """``value`` with every NaN or infinite float as ``None`` (JSON has no NaN: ``null``)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: plain_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_json(v) for v in value]
    return value


#: report.csv's roofline columns (each device layer's ``roofline`` fields).
ROOFLINE_COLUMNS = (
    "unit",
    "compute_bound_cycles",
    "dram_bound_cycles",
    "dram_load_bytes",
    "dram_store_bytes",
    "bound_cycles",
    "limited_by",
    "achieved_over_bound",
)


def write(report: dict[str, Any], directory: Path) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": directory / "report.json",
        "csv": directory / "report.csv",
        "png": directory / "utilization.png",
    }
    paths["json"].write_text(json.dumps(plain_json(report), indent=1, allow_nan=False) + "\n")
    columns = [
        "name",
        "op",
        "macs",
        "cycles",
        "utilization",
        "dram_read_bytes",
        "dram_write_bytes",
        "bit_exact",
        "ideal_cycles",
        "limiter",
        "tiling",
        *ROOFLINE_COLUMNS,
    ]
    with open(paths["csv"], "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({**layer, **layer.get("roofline", {})} for layer in report["layers"])
    _plot(report, paths["png"])
    return paths


def _plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = report["layers"]
    names = [layer["name"] for layer in layers]
    cycles = [layer["cycles"] for layer in layers]
    utilization = [layer["utilization"] for layer in layers]
    fig, (ax, over) = plt.subplots(
        2,
        1,
        figsize=(max(8, 0.35 * len(layers)), 8),
        sharex=True,
        gridspec_kw={"height_ratios": [3, 2]},
    )
    ax.bar(range(len(layers)), cycles, color="#4c72b0", label="cycles (RTL counters)")
    with_ideal = [i for i, layer in enumerate(layers) if "ideal_cycles" in layer]
    if with_ideal:
        ax.plot(
            with_ideal,
            [layers[i]["ideal_cycles"] for i in with_ideal],
            "k_",
            markersize=12,
            label="ideal (ISA simulator)",
        )
    for kind, color in BOUND_COLOURS.items():
        at = [
            i
            for i, layer in enumerate(layers)
            if layer.get("roofline", {}).get("limited_by") == kind
        ]
        if at:
            bound = [layers[i]["roofline"][f"{kind}_bound_cycles"] for i in at]
            ax.plot(at, bound, "v", color=color, label=f"{kind} bound (roofline)")
    ax.set_ylabel("cycles")
    _plot_roofline(over, layers)
    over.set_xticks(range(len(layers)))
    over.set_xticklabels(names, rotation=90, fontsize=7)
    twin = ax.twinx()
    twin.plot(range(len(layers)), utilization, "o-", color="#dd8452", label="utilization")
    twin.set_ylim(0, 1.05)
    twin.set_ylabel("utilization = macs / (rows*cols*cycles)")
    total = report["total"]
    ax.set_title(
        f"{report['model']} on {report['config']['name']} ({report['backend']})\n"
        f"{total['cycles']:,} cycles, utilization {total['utilization']:.3f}",
        fontsize=10,
    )
    ax.legend(loc="upper left", fontsize=8)
    twin.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


#: Colours of the limiting bound in the plots.
BOUND_COLOURS = {"compute": "#2ca02c", "dram": "#d62728"}


def _plot_roofline(ax: Any, layers: list[dict[str, Any]]) -> None:
    """Each device layer's cycles / its roofline bound, on a log axis, coloured by the bound
    that limits it: the layers far above 1 are the ones far from their bound."""
    for kind, colour in BOUND_COLOURS.items():
        at = [
            i
            for i, layer in enumerate(layers)
            if layer.get("roofline", {}).get("limited_by") == kind
            and layer["roofline"]["achieved_over_bound"]
        ]
        ratios = [layers[i]["roofline"]["achieved_over_bound"] for i in at]
        ax.bar(at, ratios, color=colour, label=f"{kind}-bound layer")
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.axhline(1.1, color="k", linewidth=0.6, linestyle="--", label="10 % above the bound")
    ax.set_yscale("log")
    ax.set_ylabel("cycles / roofline bound")
    ax.legend(loc="upper left", fontsize=8)


def summary_table(report: dict[str, Any]) -> Any:
    """The terminal summary (a rich Table); names are shown as they are, never read as markup."""
    from rich.markup import escape
    from rich.table import Table

    title = f"{report['model']} on {report['config']['name']} ({report['backend']})"
    table = Table(title=escape(title))
    numeric = ("MACs", "cycles", "ideal", "util", "bound", "x bound")
    columns = ("layer", "op", "MACs", "cycles", "ideal", "util", "bound", "x bound", "exact")
    for column in (*columns, "limited by"):
        table.add_column(column, justify="right" if column in numeric else "left")
    for layer in report["layers"]:
        table.add_row(
            escape(layer["name"]),
            escape(layer["op"]),
            f"{layer['macs']:,}",
            f"{layer['cycles']:,}",
            f"{layer.get('ideal_cycles', 0):,}" if "ideal_cycles" in layer else "-",
            f"{layer['utilization']:.3f}",
            *_bound_cells(layer.get("roofline")),
            "yes" if layer["bit_exact"] else "[red]NO[/red]",
            escape(layer["limiter"]),
        )
    total = report["total"]
    table.add_section()
    table.add_row(
        "total",
        "",
        f"{total['macs']:,}",
        f"{total['cycles']:,}",
        f"{total.get('ideal_cycles', 0):,}" if "ideal_cycles" in total else "-",
        f"{total['utilization']:.3f}",
        *_total_bound_cells(total),
        "yes" if total["bit_exact"] else "[red]NO[/red]",
        f"{total['sim_wall_s']:.1f} s, {total['sim_cycles_per_s']:,} cycles/s",
    )
    return table


def _bound_cells(line: dict[str, Any] | None) -> tuple[str, str]:
    """The layer table's roofline cells: the bound (``c`` compute, ``d`` DRAM) and cycles over
    it."""
    if not line:
        return "-", "-"
    ratio = line["achieved_over_bound"]
    return (
        f"{line['bound_cycles']:,} {line['limited_by'][0]}",
        f"{ratio:.2f}" if ratio is not None else "-",
    )


def _total_bound_cells(total: dict[str, Any]) -> tuple[str, str]:
    """The summary's total row: the summed bounds and the run's cycles over them."""
    bound = total.get("roofline_bound_cycles")
    if not bound:
        return "", ""
    return f"{bound:,}", f"{total['cycles'] / bound:.2f}"

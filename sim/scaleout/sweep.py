"""``make sweep`` (``python -m sim.scaleout.sweep``): a models x configs grid on Dask, one cell per
task.

Each cell compiles a model for a config, runs it on a backend (the sequential run, checked layer
by layer) and gives a row of ``build/sweep/sweep.json``: model, config, cycles, utilization,
DRAM bytes, area (Yosys cells of ``make synth``: ``rtl/<preset>/area.json``, or synthesized for
a config of the command line and cached in ``build/sweep/area/``), wall time. A cell is cached
by content (``build/sweep/cells/<key>.json``): the key hashes the model (its name and seed, or
the .onnx file's bytes), the config, the backend, and the sources of arch/, compiler/, hdl_gen/
and sim/, so a second sweep reruns only what changed. ``build/sweep/pareto.png`` plots cycles
against area per model, the Pareto front joined.

Configs: comma-separated items, each ``+``-joined parts: a preset (``tiny``, ``default``), a
config .json, or ``field=value`` set on what comes before it (the default config if nothing
does); ``rows=N`` alone also sets ``cols`` (arrays are square). E.g. ``tiny,rows=8,tiny+
dram_bytes_per_cycle=4``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from arch.config import PRESETS, AccelConfig, ConfigError, load_config
from sim.scaleout import cluster
from sim.verilate.build import REPO_ROOT, WORK_ROOT

SWEEP_ROOT = WORK_ROOT / "build" / "sweep"
SOURCES = ("arch", "compiler", "hdl_gen", "sim")


class SweepError(ValueError):
    """A bad model or config of the grid (exit code 2)."""


def parse_config(item: str) -> AccelConfig:
    """One ``CONFIGS`` item (see the module docstring)."""
    config = PRESETS["default"]
    fields = {f.name: f for f in dataclasses.fields(AccelConfig)}
    for part in item.split("+"):
        if "=" not in part:
            config = load_config(part)
            continue
        name, _, text = part.partition("=")
        if name not in fields:
            raise ConfigError(f"config {item!r}: unknown field {name!r}; known: {sorted(fields)}")
        value: Any = text if name == "dataflow" else _int(item, name, text)
        changes = {name: value}
        if name == "rows" and "cols=" not in item:
            changes["cols"] = value
        config = dataclasses.replace(config, **changes)
    return config


def _int(item: str, name: str, text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise ConfigError(f"config {item!r}: {name} must be an integer, not {text!r}") from None


def source_hash() -> str:
    """The content of every source file a cell's result depends on."""
    h = hashlib.sha256()
    for folder in SOURCES:
        for path in sorted((REPO_ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".v", ".vlt", ".cpp") and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(REPO_ROOT)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def cell_key(model: str, config: AccelConfig, backend: str, seed: int, sources: str) -> str:
    path = Path(model)
    what = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else model
    text = json.dumps([what, config.to_json(), backend, seed, sources])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def area(config: AccelConfig) -> dict[str, int]:
    """The whole accelerator's synthesis estimate (``make synth``; cached per config)."""
    for name, preset in PRESETS.items():
        path = REPO_ROOT / "rtl" / name / "area.json"
        if preset == config and path.is_file():
            report = json.loads(path.read_text())
            break
    else:
        cached = SWEEP_ROOT / "area" / f"{config.name}.json"
        if cached.is_file():
            report = json.loads(cached.read_text())
        else:
            from hdl_gen.synth import synthesize

            report, _times = synthesize(config)
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps(report))
    whole = report["components"]["Accelerator_flat"]
    return {k: int(whole[k]) for k in ("cells", "ff_bits", "memory_bits", "multipliers")}


def run_cell(model: str, config_json: str, label: str, backend: str, seed: int) -> dict:
    """A worker's task: compile, run, measure one cell; its row of sweep.json (without the
    area, a task of its own per config). A model the compiler refuses gives ``{"refused":
    reason}`` (a task that raised would fill the worker's log with Dask's report of it)."""
    import numpy as np

    from compiler.compile import compile_model
    from compiler.errors import CompileError
    from sim.runtime.run import run

    started = time.perf_counter()
    config = AccelConfig.from_json(config_json)
    try:
        exe = compile_model(model, config, seed=seed).executable
    except (CompileError, ConfigError) as exc:
        return {"refused": f"model {model!r} does not compile for config {label!r}: {exc}"}
    x = np.random.default_rng(seed).standard_normal(exe.input.shape).astype(np.float32)
    result = run(exe, x, backend)
    accel = [layer for layer in result.layers if layer.device == "accel"]
    macs = sum(layer.macs for layer in accel)
    return {
        "model": exe.model,
        "config": label,
        "config_name": config.name,
        "backend": backend,
        "cycles": result.cycles,
        "utilization": round(macs / (config.macs_per_cycle * result.cycles), 4)
        if result.cycles
        else 0.0,
        "dram_read_bytes": sum(layer.dram_read_bytes for layer in accel),
        "dram_write_bytes": sum(layer.dram_write_bytes for layer in accel),
        "macs": macs,
        "bit_exact": result.bit_exact,
        "wall_s": round(time.perf_counter() - started, 3),
    }


def sweep(
    models: list[str],
    configs: list[str],
    backend: str = "isa",
    seed: int = 0,
    out: Path = SWEEP_ROOT,
    log: Any = print,
) -> dict[str, Any]:
    """Run the grid (cached cells skipped) on Dask and write sweep.json and pareto.png."""
    import zoo

    parsed = {item: parse_config(item) for item in configs}
    for model in models:
        if model not in zoo.MODELS and not (model.endswith(".onnx") and Path(model).is_file()):
            raise SweepError(
                f"model {model!r} is neither a zoo model ({', '.join(zoo.MODELS)}) "
                "nor an existing .onnx file"
            )
    sources = source_hash()
    cells = [(m, item) for m in models for item in configs]
    keys = {cell: cell_key(cell[0], parsed[cell[1]], backend, seed, sources) for cell in cells}
    cache = out / "cells"
    rows: dict[tuple[str, str], dict] = {}
    todo = []
    for cell in cells:
        path = cache / f"{keys[cell]}.json"
        if path.is_file():
            rows[cell] = {**json.loads(path.read_text()), "cached": True}
        else:
            todo.append(cell)
    log(f"sweep: {len(cells)} cells, {len(cells) - len(todo)} cached, {len(todo)} to run")
    if todo:
        for item in {item for _m, item in todo}:
            cluster.build_key(backend, parsed[item])  # one Verilator build at a time, here
        with cluster.open_client(len(todo)) as client:
            # one synthesis per config, as its own task
            areas = {
                item: client.submit(area, parsed[item], key=f"area-{parsed[item].name}")
                for item in {item for _m, item in todo}
            }
            futures = {
                cell: cluster.Task(
                    f"cell {cell[0]} x {cell[1]}",
                    client.submit(
                        run_cell,
                        cell[0],
                        parsed[cell[1]].to_json(),
                        cell[1],
                        backend,
                        seed,
                        pure=False,
                    ),
                )
                for cell in todo
            }
            for cell, future in futures.items():
                done = future.result()
                if "refused" in done:
                    raise SweepError(done["refused"])
                row = {**done, "area": areas[cell[1]].result()}
                cache.mkdir(parents=True, exist_ok=True)
                (cache / f"{keys[cell]}.json").write_text(json.dumps(row))
                rows[cell] = {**row, "cached": False}
                log(f"  {cell[0]} x {cell[1]}: {row['cycles']:,} cycles, {row['wall_s']} s")
    data = {"backend": backend, "seed": seed, "rows": [rows[cell] for cell in cells]}
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(data, indent=1) + "\n")
    plot([rows[cell] for cell in cells], out / "pareto.png")
    return data


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats in both coordinates (smaller is better)."""
    return [
        i
        for i, (a, c) in enumerate(points)
        if not any(
            (a2 <= a and c2 <= c) and (a2, c2) != (a, c) for j, (a2, c2) in enumerate(points)
        )
    ]


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for model in dict.fromkeys(row["model"] for row in rows):
        mine = [row for row in rows if row["model"] == model]
        points = [(row["area"]["cells"], row["cycles"]) for row in mine]
        dots = ax.scatter(*zip(*points, strict=True), label=model)
        front = sorted(points[i] for i in pareto(points))
        ax.plot(*zip(*front, strict=True), color=dots.get_facecolor()[0], alpha=0.6)
        for row, (x, y) in zip(mine, points, strict=True):
            ax.annotate(
                row["config"], (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points"
            )
    ax.set_xlabel("area (Yosys cells, make synth)")
    ax.set_ylabel("cycles")
    ax.set_yscale("log")
    ax.set_title("cycles vs area (Pareto front joined)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sim.scaleout.sweep",
        description="Run a models x configs grid on Dask (LocalCluster, DASK_SCHEDULER or "
        "DASK_CLUSTER); write build/sweep/sweep.json and pareto.png. Exit codes: 0 every cell "
        "bit-exact, 1 a cell was not, 2 bad arguments, 3 a cell failed.",
    )
    parser.add_argument("--models", required=True, help="comma-separated zoo names or .onnx files")
    parser.add_argument("--configs", default="tiny", help="comma-separated configs (see docs)")
    parser.add_argument("--backend", default="isa", choices=["isa", "rtl", "pyverilator"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=SWEEP_ROOT)
    args = parser.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    configs = [c for c in args.configs.split(",") if c]
    try:
        if not models or not configs:
            raise SweepError("MODELS and CONFIGS must each name at least one item")
        data = sweep(models, configs, args.backend, args.seed, args.out)
    except (SweepError, ConfigError, cluster.ClusterError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (RuntimeError, cluster.WorkerFailed) as exc:
        print(f"error: {' '.join(str(exc).split())[:400]}", file=sys.stderr)
        return 3
    for row in data["rows"]:
        print(
            f"{row['model']:<12} {row['config']:<24} {row['cycles']:>12,} cycles  "
            f"util {row['utilization']:.3f}  {row['area']['cells']:>7} cells  "
            f"{row['wall_s']:>7.1f} s{'  (cached)' if row['cached'] else ''}"
        )
    print(f"sweep: {args.out / 'sweep.json'}  plot: {args.out / 'pareto.png'}")
    return 0 if all(row["bit_exact"] for row in data["rows"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())

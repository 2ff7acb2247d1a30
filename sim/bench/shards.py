"""The shard part of ``make bench``: one network on the RTL, sequential and in 2 shards on 2 Dask
workers, in one run; per-layer equality of the two; and a scaling estimate from the measured
per-layer cycles (``python -m sim.bench.shards`` runs it alone)."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from arch.config import PRESETS
from arch.executable import Executable
from compiler.compile import compile_model
from sim.runtime.run import run
from sim.scaleout import cluster, shards

WORKERS = (16, 64)  # worker counts of the written scaling estimate


def _signature(result: Any) -> list[tuple]:
    return [(la.name, la.cycles, la.counters, la.bit_exact) for la in result.layers]


def scaling(exe: Executable, cycles: list[int], workers: int) -> dict[str, Any]:
    """The best plan over ``workers`` shards by the measured per-layer ``cycles``: its largest
    shard (warm-up layer included) bounds the sharded run; the speedup ignores start-up."""
    plan = shards.plan(exe, workers, costs=cycles)
    largest = max(shard.estimate for shard in plan)
    return {
        "shards": len(plan),
        "largest_shard_cycles": largest,
        "speedup_bound": round(sum(cycles) / largest, 2),
    }


def measure(exe: Executable, x: np.ndarray, workdir: Path) -> dict[str, Any]:
    """Wall time of the sequential rtl run and of ``JOBS=2`` (the reference and the merge
    included) on the same network and input: on a Dask LocalCluster started and warmed up
    before (``sharded_speedup``: as ``make sim JOBS=2`` has it, which starts the cluster while
    it compiles, or an existing cluster), and on one started inside the timing
    (``sharded_speedup_cold_cluster``)."""
    preset = next((name for name, c in PRESETS.items() if c == exe.config), None)
    early = cluster.EarlyClient(2, ("rtl", preset) if preset else None)
    try:
        early.ready()
        started = time.perf_counter()
        sequential = run(exe, x, "rtl", workdir=workdir / "sequential")
        sequential_s = time.perf_counter() - started
        started = time.perf_counter()
        sharded = shards.run(exe, x, "rtl", jobs=2, workdir=workdir / "sharded", client=early)
        sharded_s = time.perf_counter() - started
    finally:
        early.close()
    started = time.perf_counter()
    cold = shards.run(exe, x, "rtl", jobs=2, workdir=workdir / "sharded_cold")
    cold_s = time.perf_counter() - started
    cycles = [layer.cycles for layer in sequential.layers if layer.device == "accel"]
    return {
        "network": exe.model,
        "cycles": sequential.cycles,
        "sequential_wall_s": round(sequential_s, 2),
        "sharded_wall_s": round(sharded_s, 2),
        "sharded_speedup": round(sequential_s / sharded_s, 3),
        "sharded_cold_cluster_wall_s": round(cold_s, 2),
        "sharded_speedup_cold_cluster": round(sequential_s / cold_s, 3),
        "shards": sharded.shards,
        "same_layers": _signature(sharded) == _signature(sequential) == _signature(cold),
        "scaling_estimate": {str(n): scaling(exe, cycles, n) for n in (2, *WORKERS)},
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.bench.shards", description=__doc__)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--config", default="default", choices=sorted(PRESETS))
    parser.add_argument("--image-size", type=int)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    exe = compile_model(args.model, PRESETS[args.config], image_size=args.image_size).executable
    x = np.random.default_rng(0).standard_normal(exe.input.shape).astype(np.float32)
    data = measure(exe, x, Path(tempfile.mkdtemp(prefix="cosim-bench-shards-")))
    text = json.dumps(data, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0 if data["same_layers"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The DRAM-bandwidth part of ``make bench``: utilization of ResNet-18 and ResNet-50 224x224 at
16 and 8 bytes per cycle of DRAM bandwidth (the default config, ``dram_bytes_per_cycle``
changed), on the ISA simulator, whose cycles are the RTL's within 0.15 % on these networks
(its GEMM timing is the RTL's); cycles are deterministic, so one run each (``python -m
sim.bench.bandwidth`` runs it alone)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

import numpy as np

from arch.config import PRESETS
from compiler.compile import compile_model
from sim.runtime.run import run

MODELS = ("resnet18", "resnet50")
BANDWIDTHS = (16, 8)  # bytes per cycle


def measure(models: tuple[str, ...] = MODELS) -> dict[str, Any]:
    """{model: {bytes per cycle: cycles, utilization, DRAM bytes read, bit_exact}}."""
    rows: dict[str, Any] = {}
    for model in models:
        rows[model] = {}
        for bandwidth in BANDWIDTHS:
            config = dataclasses.replace(PRESETS["default"], dram_bytes_per_cycle=bandwidth)
            exe = compile_model(model, config, seed=0).executable
            x = np.random.default_rng(0).standard_normal(exe.input.shape).astype(np.float32)
            result = run(exe, x, "isa")
            accel = [la for la in result.layers if la.device == "accel"]
            macs = sum(la.macs for la in accel)
            rows[model][str(bandwidth)] = {
                "cycles": result.cycles,
                "utilization": round(macs / (config.rows * config.cols * result.cycles), 4),
                "dram_read_bytes": sum(la.dram_read_bytes for la in accel),
                "bit_exact": result.bit_exact,
            }
            print(f"  {model} at {bandwidth} B/cycle: {rows[model][str(bandwidth)]}")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.bench.bandwidth", description=__doc__)
    parser.add_argument("--model", action="append", choices=MODELS)
    args = parser.parse_args()
    print(json.dumps(measure(tuple(args.model or MODELS)), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

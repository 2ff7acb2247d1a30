"""``python -m sim.bench`` (what ``make bench`` runs): how fast the RTL simulation is.

On the default config it builds the accelerator two ways from the same RTL with the same
Verilator and C++ flags - (a) a plain C++ Verilator harness (sim/csrc/bench_main.cpp: clock loop in
C++, DRAM image loaded into the same DPI buffer) and (b) the project's cocotb-driven build
(:func:`sim.backends.rtl.build_accelerator`) - and runs one fixed program (ResNet-18 at a small
image size) on both, alternating, several times, together with (c) the pyverilator backend
(sim/backends/pyverilator.py: the same model as a shared object, clocked in C++ chunks). It checks
that all leave the same DRAM and counters, and reports the median simulated cycles per second of
each and their ratios to raw (the median of the ratios of back-to-back run pairs); pyverilator
ticking the clock from Python is timed on the program's first cycles. It also times a cold
build, a build after an RTL change and a cached build, runs a network sequentially and in 2
layer shards on 2 Dask workers (``sharded_speedup``, on a cluster started and warmed before,
as ``make sim JOBS=2`` has it, and ``sharded_speedup_cold_cluster``; :mod:`sim.bench.shards`:
ResNet-18 at 224x224, or the small program with ``--no-full``), and
(unless ``--no-full`` / ``BENCH_FULL=0``) runs ``python -m sim.app.cli`` on ResNet-18 and ResNet-50
at 224x224 end to end, ResNet-50 also in 2 layer shards (``--jobs 2``,
``resnet50_sharded_speedup``), and measures their utilization at 16 and 8 bytes per cycle of DRAM
bandwidth (:mod:`sim.bench.bandwidth`).

Writes ``build/bench/bench.json`` and prints a table. Rates are measured within one invocation
(the raw, cocotb and pyverilator runs interleaved) because this kind of machine is often shared.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from arch import isa
from arch.config import PRESETS, AccelConfig
from arch.isa import Launch
from arch.reference import quantize_input
from compiler.compile import compile_model
from sim import knobs
from sim.backends import pyverilator as pyverilator_backend
from sim.backends.accelerator import accelerator_spec, build_accelerator
from sim.backends.base import DeviceResult, DeviceRun
from sim.backends.rtl import run_programs
from sim.bench import bandwidth as bench_bandwidth
from sim.bench import shards as bench_shards
from sim.runtime.host import device_image
from sim.verilate.build import (
    MAKE_FLAGS,
    REPO_ROOT,
    SIM_ROOT,
    VERILATOR_FLAGS,
    WORK_ROOT,
    BuildSpec,
    build,
)
from sim.verilate.pyverilator_build import build_pyverilator
from sim.verilate.toolchain import find_toolchain

BENCH_ROOT = WORK_ROOT / "build" / "bench"
BENCH_MAIN = SIM_ROOT / "csrc" / "bench_main.cpp"
#: (report label, model, extra sim.app.cli arguments) of the end-to-end runs
FULL_MODELS = (
    ("resnet18", "resnet", ()),
    ("resnet50", "resnet50", ()),
    ("resnet50_jobs2", "resnet50", ("--jobs", "2")),  # 2 layer shards on 2 Dask workers
)
TICK_CYCLES = 100_000  # pyverilator ticked from Python: rate over this many cycles


def raw_spec(spec: BuildSpec) -> BuildSpec:
    """The same build as ``spec`` (RTL, flags, DPI DRAM) with the plain C++ main instead of
    cocotb's harness; the main drives the clock itself."""
    return dataclasses.replace(spec, design=f"{spec.design}_raw", main=BENCH_MAIN, clock=None)


def machine_info() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    tc = find_toolchain()
    gxx = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "verilator": f"{tc.version[0]}.{tc.version[1]:03d} ({tc.source})",
        "cxx": gxx.splitlines()[0] if gxx else "unknown",
        "loadavg_start": list(os.getloadavg()),
    }


def run_raw(
    exe: Path, image: Path, launch: Launch, dram_bytes: int, dump: Path | None = None
) -> dict[str, Any]:
    """One run of the plain C++ harness (sim/csrc/bench_main.cpp): rates, perf counters, and
    the DRAM written to ``dump`` (as many bytes as the image)."""
    args = [str(exe), "--image", str(image), "--dram-bytes", str(dram_bytes)]
    args += ["--insn-base", str(launch.insn_base), "--desc-base", str(launch.desc_base)]
    args += ["--desc-count", str(launch.desc_count)]
    if dump is not None:
        args += ["--dump", str(dump)]
    started = time.perf_counter()
    out = subprocess.run(args, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if out.returncode not in (0, 1):  # 1: the program ended with an error (reported below)
        raise RuntimeError(f"{exe.name} failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
    line = json.loads(out.stdout.strip().splitlines()[-1])
    perf = isa.decode_record(isa.PERF_RECORD, int(line["perf"], 16))
    return {
        "done": line["done"],
        "error": line["error"],
        "cycles": perf["cycles"],
        "loop_cycles": line["cycles"],
        "loop_s": line["wall_s"],
        "cpu_s": line.get("cpu_s"),
        "process_s": wall,
        "cycles_per_s": line["cycles"] / line["wall_s"] if line["wall_s"] else 0.0,
        "perf": {k: v for k, v in perf.items() if k not in ("tag", "reserved")},
    }


def _cocotb_run(config: Any, image: np.ndarray, launch: Launch, model: Any, workdir: Path) -> dict:
    started = time.perf_counter()
    [result] = run_programs(config, [DeviceRun(image, launch)], workdir, model=model)
    wall = time.perf_counter() - started
    if not result.done:
        raise RuntimeError(f"cocotb run did not finish: {result}")
    return _measured(result, wall)


def _pyverilator_run(
    config: Any, image: np.ndarray, launch: Launch, model: Any, stepping: str = "chunk", **run: Any
) -> dict:
    started = time.perf_counter()
    [result] = pyverilator_backend.run_programs(
        config, [DeviceRun(image, launch, **run)], model=model, stepping=stepping
    )
    wall = time.perf_counter() - started
    if not (result.done or (result.timeout and "max_cycles" in run)):
        raise RuntimeError(f"pyverilator run did not finish: {result}")
    return _measured(result, wall)


def _measured(result: DeviceResult, wall: float) -> dict:
    """One backend run's numbers: cycles, loop/process/CPU time, rate, DRAM and counters."""
    return {
        "cycles": result.cycles,
        "loop_s": result.sim_seconds,
        "process_s": wall,
        "cpu_s": result.sim_cpu_seconds,
        "cycles_per_s": result.cycles / result.sim_seconds,
        "dram": result.dram,
        "perf": result.perf,
    }


def _median(runs: list[dict], key: str) -> float:
    return float(statistics.median(run[key] for run in runs))


def measure_builds(spec: BuildSpec, cold: bool) -> dict[str, Any]:
    """``build_cold_s``: a fresh build root, nothing cached; ``build_new_design_s``: the design
    compiled again in that root, the Verilator runtime objects reused from the first build
    (what an RTL change costs); ``pyverilator_build_cold_s``: the pyverilator build in that root
    (its runtime objects are compiled position-independent: not shared with the cocotb build);
    ``build_cached_s``: a cache hit in the normal build root."""
    out: dict[str, Any] = {}
    if cold:
        BENCH_ROOT.mkdir(parents=True, exist_ok=True)  # also when --out is elsewhere
        root = Path(tempfile.mkdtemp(prefix="cold-", dir=BENCH_ROOT))
        try:
            first = build(spec, root=root)
            out["build_cold_s"] = round(first.seconds, 2)
            shutil.rmtree(first.build_dir)
            out["build_new_design_s"] = round(build(spec, root=root).seconds, 2)
            pyv = build_pyverilator(spec, root=root)
            out["pyverilator_build_cold_s"] = round(pyv.seconds, 2)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    build(spec)
    out["build_cached_s"] = round(build(spec).seconds, 3)
    return out


def run_full(label: str, model: str, log_dir: Path, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """``python -m sim.app.cli --model MODEL --no-ideal [extra]`` end to end, timed; numbers from
    its report."""
    out_dir = log_dir / label
    cmd = [
        sys.executable,
        "-m",
        "sim.app.cli",
        "--model",
        model,
        "--no-ideal",
        "--out",
        str(out_dir),
    ]
    cmd += extra
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO_ROOT)
    wall = time.perf_counter() - started
    (log_dir / f"{label}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        return {"wall_s": round(wall, 1), "exit_code": proc.returncode, "log": f"{label}.log"}
    report = json.loads((out_dir / "report.json").read_text())
    total = report["total"]
    match = re.search(r"compiled in ([0-9.]+) s", proc.stdout)
    compile_s = float(match.group(1)) if match else 0.0
    return {
        "command": " ".join(["python", *cmd[1:]]),
        "wall_s": round(wall, 1),
        "compile_s": compile_s,
        "wall_excl_compile_s": round(wall - compile_s, 1),
        "cycles": total["cycles"],
        "sim_wall_s": total["sim_wall_s"],
        "sim_cycles_per_s": total["sim_cycles_per_s"],
        "bit_exact": total["bit_exact"],
        "exit_code": 0,
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sim.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each harness (median)")
    parser.add_argument("--image-size", type=int, default=64, help="ResNet-18 input size")
    full = knobs.BENCH_FULL.get() not in ("0", "", "no", "false")
    parser.add_argument(
        "--full",
        action=argparse.BooleanOptionalAction,
        default=full,
        help="also run ResNet-18 and ResNet-50 224x224 end to end (default: BENCH_FULL, 1)",
    )
    parser.add_argument(
        "--cold",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time a cold build in a fresh directory (default: yes)",
    )
    parser.add_argument("--out", type=Path, default=BENCH_ROOT, help="output directory")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.runs < 1:
        print("error: --runs must be >= 1", file=sys.stderr)
        return 2
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    config = PRESETS["default"]
    info = machine_info()
    exe = compile_model("resnet18", config, image_size=args.image_size, seed=0).executable
    x = np.random.default_rng(0).standard_normal(exe.input.shape).astype(np.float32)
    data = _speed(args, config, exe, x, info)
    _scale_out(args, config, exe, x, data)
    data["machine"]["loadavg_end"] = list(os.getloadavg())
    (out / "bench.json").write_text(json.dumps(data, indent=2) + "\n")
    print_table(data)
    print(f"written: {out / 'bench.json'}")
    if not data["sharded"]["same_layers"]:
        print("error: the sharded run's layers differ from the sequential run's", file=sys.stderr)
        return 1
    if not data["same_dram_and_cycles"]:
        print(
            "error: the raw, cocotb and pyverilator runs disagree (DRAM or cycles)", file=sys.stderr
        )
        return 1
    return 0


def _speed(
    args: argparse.Namespace, config: AccelConfig, exe: Any, x: np.ndarray, info: dict[str, Any]
) -> dict[str, Any]:
    """Build the three harnesses and run ``exe``'s program on each ``args.runs`` times (and
    the pyverilator one ticked from Python): the speed part of bench.json."""
    out: Path = args.out
    spec = accelerator_spec(config)
    print("building (cold build timed in a fresh directory)..." if args.cold else "building...")
    builds = measure_builds(spec, args.cold)
    model = build_accelerator(config)
    raw_model = build(raw_spec(spec))
    builds["raw_build_s"] = round(raw_model.seconds, 2)
    pyv_model = build_pyverilator(spec)

    [program] = exe.programs
    launch = program.launch
    image = device_image(
        program, {exe.input.name: quantize_input(x, exe.input.scale or 1.0, exe.input.zero_point)}
    )
    image_path = out / "image.bin"
    image.tofile(image_path)

    raw_runs: list[dict] = []
    cocotb_runs: list[dict] = []
    pyv_runs: list[dict] = []
    same_dram = True
    raw_dump = out / "raw_dram.bin"
    for n in range(args.runs):
        raw = run_raw(raw_model.executable, image_path, launch, config.dram_bytes, raw_dump)
        cocotb = _cocotb_run(config, image, launch, model, out / "cocotb")
        pyv = _pyverilator_run(config, image, launch, pyv_model)
        raw_dram = np.fromfile(raw_dump, dtype=np.uint8)
        same_dram &= bool(np.array_equal(raw_dram, cocotb.pop("dram")))
        same_dram &= bool(np.array_equal(raw_dram, pyv.pop("dram")))
        raw_perf = raw.pop("perf")
        same_dram &= raw_perf == cocotb.pop("perf") == pyv.pop("perf") and raw["done"]
        raw_runs.append(raw)
        cocotb_runs.append(cocotb)
        pyv_runs.append(pyv)
        print(
            f"  run {n + 1}/{args.runs}: raw {raw['cycles_per_s']:,.0f} cycles/s, "
            f"cocotb {cocotb['cycles_per_s']:,.0f} cycles/s, "
            f"pyverilator {pyv['cycles_per_s']:,.0f} cycles/s"
        )
    tick_runs = []
    for n in range(min(args.runs, 3)):
        tick = _pyverilator_run(
            config, image, launch, pyv_model, stepping="tick", max_cycles=TICK_CYCLES
        )
        del tick["dram"], tick["perf"]
        tick_runs.append(tick)
        print(f"  pyverilator ticked from Python {n + 1}: {tick['cycles_per_s']:,.0f} cycles/s")
    for path in (image_path, raw_dump):
        path.unlink(missing_ok=True)
    runs = {"raw": raw_runs, "cocotb": cocotb_runs, "pyverilator": pyv_runs, "tick": tick_runs}
    return {
        "config": config.to_dict(),
        "config_name": config.name,
        "program": f"resnet18 {args.image_size}x{args.image_size}, seed 0",
        "cycles": raw_runs[0]["cycles"],
        "runs": args.runs,
        **_speed_summary(runs),
        "same_dram_and_cycles": same_dram,
        "pyverilator_build_s": round(pyv_model.seconds, 2),
        "raw_runs": raw_runs,
        "cocotb_runs": cocotb_runs,
        "pyverilator_runs": pyv_runs,
        "pyverilator_tick_runs": tick_runs,
        **builds,
        "verilator_flags": [*VERILATOR_FLAGS],
        "make_flags": [*MAKE_FLAGS],
        "machine": info,
    }


def _speed_summary(runs: dict[str, list[dict]]) -> dict[str, Any]:
    """Medians and paired ratios of the raw, cocotb and pyverilator runs."""
    raw_runs, cocotb_runs, pyv_runs = runs["raw"], runs["cocotb"], runs["pyverilator"]
    raw_rate = _median(raw_runs, "cycles_per_s")
    cocotb_rate = _median(cocotb_runs, "cycles_per_s")
    cycles = raw_runs[0]["cycles"]
    # Each raw run and the cocotb run right after it saw about the same machine load: the median
    # of these paired ratios is steadier than the ratio of the two medians.
    pairs = [
        c["cycles_per_s"] / r["cycles_per_s"] for r, c in zip(raw_runs, cocotb_runs, strict=True)
    ]
    pyv_pairs = [
        p["cycles_per_s"] / r["cycles_per_s"] for r, p in zip(raw_runs, pyv_runs, strict=True)
    ]
    cpu_pairs = [
        (r["cpu_s"] / r["loop_cycles"]) / (c["cpu_s"] / c["cycles"])
        for r, c in zip(raw_runs, cocotb_runs, strict=True)
        if r.get("cpu_s") and c.get("cpu_s")
    ]
    return {
        "raw_verilator_cycles_per_s": round(raw_rate),
        "cocotb_cycles_per_s": round(cocotb_rate),
        "ratio": round(statistics.median(pairs), 3),
        "ratio_of_medians": round(cocotb_rate / raw_rate, 3),
        "ratio_cpu_time": round(statistics.median(cpu_pairs), 3) if cpu_pairs else None,
        "paired_ratios": [round(p, 3) for p in pairs],
        "raw_end_to_end_cycles_per_s": round(cycles / _median(raw_runs, "process_s")),
        "cocotb_end_to_end_cycles_per_s": round(cycles / _median(cocotb_runs, "process_s")),
        "raw_process_s": round(_median(raw_runs, "process_s"), 2),
        "cocotb_process_s": round(_median(cocotb_runs, "process_s"), 2),
        "pyverilator_cycles_per_s": round(_median(pyv_runs, "cycles_per_s")),
        "pyverilator_ratio": round(statistics.median(pyv_pairs), 3),
        "pyverilator_paired_ratios": [round(p, 3) for p in pyv_pairs],
        "pyverilator_process_s": round(_median(pyv_runs, "process_s"), 2),
        "pyverilator_tick_cycles_per_s": round(_median(runs["tick"], "cycles_per_s")),
        "pyverilator_tick_cycles": TICK_CYCLES,
    }


def _scale_out(
    args: argparse.Namespace, config: AccelConfig, exe: Any, x: np.ndarray, data: dict[str, Any]
) -> None:
    """The shards measurement and, with ``--full``, the 224x224 end-to-end runs and the
    bandwidth sweep, added to ``data``."""
    out: Path = args.out
    shard_exe, shard_x = exe, x
    if args.full:  # ResNet-18 at 224x224: shards of seconds each, not of start-up costs
        shard_exe = compile_model("resnet18", config, seed=0).executable
        rng = np.random.default_rng(0)
        shard_x = rng.standard_normal(shard_exe.input.shape).astype(np.float32)
    print(
        f"running {shard_exe.model} {shard_exe.input.shape} sequentially and in 2 shards on 2 "
        "Dask workers (sim/bench/shards.py)..."
    )
    data["sharded"] = bench_shards.measure(shard_exe, shard_x, out / "shards")
    data["sharded_speedup"] = data["sharded"]["sharded_speedup"]
    if not args.full:
        return
    for label, name, extra in FULL_MODELS:
        command = " ".join(("python -m sim.app.cli --model", name, *extra))
        print(f"running {name} 224x224 end to end ({command})...")
        data[label] = run_full(label, name, out, extra)
    whole, sharded = data["resnet50"], data["resnet50_jobs2"]
    if not whole["exit_code"] and not sharded["exit_code"]:
        data["resnet50_sharded_speedup"] = round(whole["wall_s"] / sharded["wall_s"], 3)
    print("utilization at 16 and 8 bytes/cycle of DRAM bandwidth (sim/bench/bandwidth.py)...")
    data["bandwidth"] = bench_bandwidth.measure()


def print_table(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"make bench: {data['config_name']}, {data['program']}")
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("cycles per run", f"{data['cycles']:,}")
    table.add_row("raw Verilator (C++ main)", f"{data['raw_verilator_cycles_per_s']:,} cycles/s")
    table.add_row("cocotb (run_programs)", f"{data['cocotb_cycles_per_s']:,} cycles/s")
    table.add_row(
        "ratio cocotb / raw (median of paired runs)",
        f"{data['ratio']:.3f}  ({', '.join(f'{p:.2f}' for p in data['paired_ratios'])})",
    )
    table.add_row(
        "ratio of the medians / of CPU time",
        f"{data['ratio_of_medians']:.3f} / "
        f"{data['ratio_cpu_time'] if data['ratio_cpu_time'] is not None else '-'}",
    )
    table.add_row(
        "pyverilator, C++ clock chunks (ratio to raw)",
        f"{data['pyverilator_cycles_per_s']:,} cycles/s ({data['pyverilator_ratio']:.3f})",
    )
    table.add_row(
        f"pyverilator, ticked from Python (first {data['pyverilator_tick_cycles']:,} cycles)",
        f"{data['pyverilator_tick_cycles_per_s']:,} cycles/s",
    )
    table.add_row(
        "end to end incl. start-up (raw / cocotb / pyverilator)",
        f"{data['raw_process_s']:.1f} s / {data['cocotb_process_s']:.1f} s / "
        f"{data['pyverilator_process_s']:.1f} s",
    )
    table.add_row("same DRAM and cycles", "yes" if data["same_dram_and_cycles"] else "NO")
    if "build_cold_s" in data:
        table.add_row("build, cold (nothing cached)", f"{data['build_cold_s']:.1f} s")
        table.add_row("build, new RTL (runtime cached)", f"{data['build_new_design_s']:.1f} s")
        table.add_row(
            "build, pyverilator (own runtime)", f"{data['pyverilator_build_cold_s']:.1f} s"
        )
    table.add_row("build, cached", f"{data['build_cached_s']:.2f} s")
    sharded = data["sharded"]
    same = "equal" if sharded["same_layers"] else "DIFFER"
    table.add_row(
        f"{sharded['network']} ({sharded['cycles']:,} cycles): sequential / 2 shards on 2 warmed "
        "Dask workers (speedup)",
        f"{sharded['sequential_wall_s']:.1f} s / {sharded['sharded_wall_s']:.1f} s "
        f"({sharded['sharded_speedup']:.2f}x, layers {same})",
    )
    table.add_row(
        "  the same, the cluster started inside the timing",
        f"{sharded['sharded_cold_cluster_wall_s']:.1f} s "
        f"({sharded['sharded_speedup_cold_cluster']:.2f}x)",
    )
    for label, _model, extra in FULL_MODELS:
        run = data.get(label)
        if run is None:
            continue
        if run.get("exit_code"):
            table.add_row(f"{label} 224", f"FAILED (exit {run['exit_code']}, see {run['log']})")
            continue
        table.add_row(
            f"{label} 224 end to end (excl. compile){' ' + ' '.join(extra) if extra else ''}",
            f"{run['wall_s']:.1f} s ({run['wall_excl_compile_s']:.1f} s), "
            f"{run['cycles']:,} cycles, {run['sim_cycles_per_s']:,} cycles/s",
        )
    if "resnet50_sharded_speedup" in data:
        table.add_row("resnet50 224: whole / 2 shards", f"{data['resnet50_sharded_speedup']:.2f}x")
    for model, rows in data.get("bandwidth", {}).items():
        table.add_row(
            f"{model} 224 utilization at 16 / 8 B/cycle (ISA)",
            f"{rows['16']['utilization']:.3f} / {rows['8']['utilization']:.3f}",
        )
    Console().print(table)


if __name__ == "__main__":
    raise SystemExit(main())

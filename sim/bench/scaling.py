"""``python -m sim.bench.scaling`` (``make bench-scaling``): the simulator as the array grows.

For each array size (8x8 .. 64x64: the default preset with its memories and DRAM bus scaled
with the array's width, :func:`scaled_config`) it measures, each step in a fresh Python process
so that the operating system's accounting (``os.wait4``) gives that step's CPU time and peak
memory alone:

- ``generate``: the RTL generation (Amaranth -> Verilog), nothing cached;
- ``build``: the Verilator build (Verilator, then the C++ compiler) in a fresh build root;
- ``run``: one network (ResNet-18 at a small image size, compiled for the config) on the RTL
  (cocotb backend): simulated cycles, cycles and MACs per wall-clock second of the simulation
  loop, and whether the DRAM it leaves equals the ISA simulator's (``bit_exact``);
- ``synth`` (``--steps``): the area estimate of ``make synth`` (:mod:`hdl_gen.synth`: Yosys
  cells, FF bits, memory bits, multipliers of the whole accelerator).

Peak memory is the largest resident set of the step's process tree (the generator, the C++
compiler, or Python and the simulator). Writes ``build/bench/scaling.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from arch.config import PRESETS, AccelConfig

BENCH_ROOT = Path(__file__).resolve().parents[2] / "build" / "bench"
SIZES = (8, 16, 32, 64)
STEPS = ("generate", "build", "run", "synth")
DEFAULT_STEPS = ("generate", "build", "run")


def scaled_config(size: int) -> AccelConfig:
    """The default preset with a ``size`` x ``size`` array; ACT, WGT and ACC and the DRAM bus
    grow with the array's width, so each memory holds as many lines as the default's and a line
    of DRAM arrives per cycle as on the default."""
    base = PRESETS["default"]
    scale = size / base.rows
    return dataclasses.replace(
        base,
        rows=size,
        cols=size,
        act_kib=int(base.act_kib * scale),
        wgt_kib=int(base.wgt_kib * scale),
        acc_kib=int(base.acc_kib * scale),
        dram_bytes_per_cycle=min(128, max(4, int(base.dram_bytes_per_cycle * scale))),
    )


def run_step(step: str, size: int, root: Path, image_size: int) -> dict[str, Any]:
    """``step`` for one size, in this process (what the child process runs)."""
    from sim.backends import accelerator

    config = scaled_config(size)
    if step == "synth":
        return _area(config)
    accelerator.BUILD_ROOT = root  # the generated RTL lives in the measurement's own root
    if step == "generate":
        started = time.perf_counter()  # generated even where a preset has committed RTL
        accelerator.generated_rtl(config, checks=False)
        return {"seconds": time.perf_counter() - started}
    from sim.verilate.build import build

    spec = accelerator.accelerator_spec(config)
    if step == "build":
        model = build(spec, root=root)
        return {"seconds": model.seconds}
    return _run_network(config, build(spec, root=root), image_size)


def _area(config: AccelConfig) -> dict[str, Any]:
    from hdl_gen.synth import synthesize

    report, times = synthesize(config)
    whole = report["components"]["Accelerator"]
    keys = ("cells", "ff_bits", "memory_bits", "multipliers")
    return {key: whole[key] for key in keys} | {"seconds": sum(times.values())}


def _run_network(config: AccelConfig, model: Any, image_size: int) -> dict[str, Any]:
    import numpy as np

    from arch import isa
    from arch.reference import quantize_input
    from compiler.compile import compile_model
    from sim.backends.base import DeviceRun, RunOptions
    from sim.backends.isa import IsaBackend
    from sim.backends.rtl import run_programs
    from sim.runtime.host import device_image

    exe = compile_model("resnet18", config, image_size=image_size, seed=0).executable
    [program] = exe.programs
    x = np.random.default_rng(0).standard_normal(exe.input.shape).astype(np.float32)
    codes = quantize_input(x, exe.input.scale or 1.0, exe.input.zero_point)
    image = device_image(program, {exe.input.name: codes})
    run = DeviceRun(image, program.launch, dump_size=image.size)  # both read back the image
    with tempfile.TemporaryDirectory(prefix="scaling-") as workdir:
        [rtl] = run_programs(config, [run], Path(workdir), model=model)
    [reference] = IsaBackend().run(config, [run], RunOptions())
    macs = sum(layer.macs for layer in exe.layers)
    # the PERF records hold cycle counts (the ISA simulator's model, the RTL's real ones):
    # everything else the program leaves in DRAM must be equal
    perf = slice(
        program.perf_base, program.perf_base + len(program.layers) * isa.PERF_RECORD.nbytes
    )
    rtl_dram, isa_dram = rtl.dram.copy(), reference.dram.copy()
    rtl_dram[perf] = isa_dram[perf] = 0
    return {
        "done": rtl.done,
        "bit_exact": bool(rtl.done and np.array_equal(rtl_dram, isa_dram)),
        "cycles": rtl.cycles,
        "macs": macs,
        "utilization": macs / (rtl.cycles * config.macs_per_cycle) if rtl.cycles else 0.0,
        "sim_seconds": rtl.sim_seconds,
        "cycles_per_s": rtl.cycles / rtl.sim_seconds if rtl.sim_seconds else 0.0,
        "macs_per_s": macs / rtl.sim_seconds if rtl.sim_seconds else 0.0,
    }


def measure(step: str, size: int, root: Path, image_size: int) -> dict[str, Any]:
    """Run ``step`` in a child process; its result plus the child tree's CPU time and peak
    resident memory (``os.wait4``)."""
    args = [sys.executable, "-m", "sim.bench.scaling", "--step", step, "--size", str(size)]
    args += ["--root", str(root), "--image-size", str(image_size)]
    started = time.perf_counter()
    child = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    output = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"{size}x{size} {step} failed (exit {child.returncode})")
    result: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    result["wall_s"] = time.perf_counter() - started
    result["cpu_s"] = usage.ru_utime + usage.ru_stime
    result["peak_rss_mib"] = usage.ru_maxrss / 1024  # KiB on Linux
    return result


def measure_size(
    size: int, image_size: int, steps: tuple[str, ...] = DEFAULT_STEPS
) -> dict[str, Any]:
    """``steps`` for one size, in a fresh build root (removed afterwards)."""
    BENCH_ROOT.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=f"scaling-{size}-", dir=BENCH_ROOT))
    root = fresh / "build" / "verilator"  # the path the lint waivers expect (sim/hdl/waivers.vlt)
    try:
        row: dict[str, Any] = {"size": size, "config": scaled_config(size).to_dict()}
        for step in steps:
            print(f"  {size}x{size}: {step}...", flush=True)
            row[step] = measure(step, size, root, image_size)
        return row
    finally:
        shutil.rmtree(fresh, ignore_errors=True)


def table(rows: list[dict[str, Any]]) -> str:
    """The scaling table, one line per size (of the steps measured)."""
    if not all(step in row for row in rows for step in DEFAULT_STEPS):
        return area_table(rows)
    head = (
        f"{'array':>7} {'gen s':>7} {'build s':>8} {'build CPU s':>11} {'build MiB':>9} "
        f"{'cycles':>10} {'cycles/s':>10} {'MACs/s':>10} {'run MiB':>8} {'exact':>5}"
    )
    lines = [head]
    for row in rows:
        gen, bld, run = row["generate"], row["build"], row["run"]
        lines.append(
            f"{row['size']:>3}x{row['size']:<3} {gen['seconds']:>7.1f} {bld['seconds']:>8.1f} "
            f"{bld['cpu_s']:>11.1f} {bld['peak_rss_mib']:>9.0f} {run['cycles']:>10,} "
            f"{run['cycles_per_s']:>10,.0f} {run['macs_per_s']:>10.3g} "
            f"{run['peak_rss_mib']:>8.0f} {'yes' if run['bit_exact'] else 'NO':>5}"
        )
    if all("synth" in row for row in rows):
        lines += ["", area_table(rows)]
    return "\n".join(lines)


def area_table(rows: list[dict[str, Any]]) -> str:
    """The area estimate per size (rows that have a ``synth`` step)."""
    lines = [f"{'array':>7} {'cells':>8} {'FF bits':>9} {'memory bits':>12} {'mults':>6} {'s':>6}"]
    for row in (r for r in rows if "synth" in r):
        a = row["synth"]
        lines.append(
            f"{row['size']:>3}x{row['size']:<3} {a['cells']:>8,} {a['ff_bits']:>9,} "
            f"{a['memory_bits']:>12,} {a['multipliers']:>6,} {a['seconds']:>6.0f}"
        )
    return "\n".join(lines)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sim.bench.scaling", description=__doc__)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="array sizes")
    parser.add_argument("--image-size", type=int, default=64, help="ResNet-18 input size")
    parser.add_argument(
        "--steps", default=",".join(DEFAULT_STEPS), help=f"of {', '.join(STEPS)}, comma-separated"
    )
    parser.add_argument("--out", type=Path, default=BENCH_ROOT, help="output directory")
    parser.add_argument("--step", choices=STEPS, help=argparse.SUPPRESS)  # a child's one step
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.step:
        print(json.dumps(run_step(args.step, args.size, args.root, args.image_size)))
        return 0
    try:
        sizes = [int(text) for text in args.sizes.split(",")]
        for size in sizes:
            scaled_config(size)
    except ValueError as exc:
        print(f"error: --sizes {args.sizes!r}: {exc}", file=sys.stderr)
        return 2
    steps = tuple(args.steps.split(","))
    if not steps or any(step not in STEPS for step in steps):
        print(f"error: --steps {args.steps!r}: each of {', '.join(STEPS)}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "scaling.json"
    rows: list[dict[str, Any]] = []
    for size in sizes:  # written after each size: a 64x64 build can take an hour
        rows.append(measure_size(size, args.image_size, steps))
        path.write_text(json.dumps({"image_size": args.image_size, "rows": rows}, indent=2) + "\n")
    print(table(rows))
    print(f"written: {path}")
    return 0 if all(row["run"]["bit_exact"] for row in rows if "run" in row) else 1


if __name__ == "__main__":
    sys.exit(main())

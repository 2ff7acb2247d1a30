"""``python -m sim.cli`` (what ``make sim`` runs; installed as ``cosim sim``): compile a model - or
load a saved executable - run it on a backend, check every layer bit for bit, and write a report.

Exit codes: 0 bit-exact; 1 a layer mismatched; 2 bad arguments or the model cannot be compiled;
3 the simulator could not be built or the accelerator stopped with an error; 4 an internal error
(a bug: any other exception, said in one line; ``COSIM_DEBUG=1`` shows its traceback); 130
interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnx

import zoo
from arch import executable, listing
from arch.config import PRESETS, AccelConfig, ConfigError, load_config
from arch.executable import Executable, ExecutableError
from compiler.compile import compile_model
from compiler.errors import CompileError
from sim import cluster, hooks, provenance, shards, terminal
from sim import report as reports
from sim.backends.registry import BACKENDS
from sim.background import in_background, lower_priority
from sim.evaluate import evaluate_held_out, evaluate_images
from sim.inputs import InputError
from sim.prune import KeepRunsError, hold, keep_runs, prune
from sim.quality.accuracy import compare_fp32
from sim.quality.qdq_agreement import agreement_report
from sim.quality.sqnr import layer_sqnr
from sim.reference_stream import ReferenceStream
from sim.run import RunError, RunResult, run
from sim.run_inputs import Calibration, calibration, input_summary, run_inputs
from sim.rundir import RunDirError, new_run_dir, point_latest, use_run_dir
from sim.sqnr_plot import sqnr_png
from sim.verilate.build import WORK_ROOT, BuildError, SimulationFailed
from sim.verilate.toolchain import ToolchainError
from sim.waves.size import check_window
from sim.waves.window import FORMATS, WaveError, WaveRequest, resolve

RUNS_ROOT = WORK_ROOT / "build" / "runs"
FAILURE_CYCLES = 4000  # traced before an accelerator error
RTL_BACKENDS = ("rtl", "pyverilator")
SQNR_IMAGES = 100  # held-out images of a trained model the per-layer SQNR is measured on


class UsageError(ValueError):
    """A bad argument (file, image); exit code 2."""


def parse(argv: list[str] | None, prog: str = "python -m sim.cli") -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Compile a model for the accelerator, run it on the ISA simulator or the RTL "
        "(Verilator driven by cocotb, or by pyverilator in this process), check every layer bit "
        "for bit against the integer reference, and "
        "write build/runs/<run>/ (report.json, report.csv, utilization.png, listing, and the "
        "executable, which --bundle runs again). Exit codes: 0 bit-exact, 1 a layer mismatched, "
        "2 bad input (arguments, model, executable), 3 simulator build failure or accelerator "
        "error, 4 internal error (a bug; please report it), 130 interrupted (Ctrl-C).",
        epilog="Environment: COSIM_DEBUG=1 prints the traceback of an internal error (exit code 4) "
        "after its one-line message.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--model",
        help=f"a zoo model ({', '.join(zoo.MODELS)}; resnet = resnet18, the default; digits is "
        "trained on scikit-learn's handwritten digits and evaluated on its held-out split) "
        "or an .onnx file",
    )
    source.add_argument(
        "--bundle",
        type=Path,
        help=f"run a saved executable (a {executable.SUFFIX} file from an earlier run) "
        "instead of compiling a model",
    )
    parser.add_argument(
        "--config",
        help="preset (tiny, default) or a config .json (default: default; with --bundle, the "
        "executable's own config, and a different one is an error)",
    )
    parser.add_argument(
        "--backend",
        default="rtl",
        choices=list(BACKENDS),
        help="; ".join(f"{name}: {doc}" for name, (_m, _c, doc) in BACKENDS.items()),
    )
    parser.add_argument(
        "--image",
        help=".npy (input-shaped float32), an image (png, jpg, bmp, gif, tif, webp; any mode; "
        "resized and center-cropped to the model's input) or a folder of images (each run, "
        "in one batch); default: a trained model's held-out image 0, else seeded noise",
    )
    parser.add_argument(
        "--preprocess",
        help="images (--image, --calib folders): imagenet (x/255, ImageNet mean/std, RGB), "
        "unit (x/255) or none (0..255); default unit for digits and 1-channel models, "
        "else imagenet",
    )
    parser.add_argument(
        "--calib",
        help="calibration inputs: a .npy batch (N, *input shape) or a folder of images; "
        "default: a trained model's training images, else 4 seeded noise inputs",
    )
    parser.add_argument(
        "--calib-method",
        default="minmax",
        help="activation ranges: minmax (default), percentile[:P] (99.99), entropy "
        "(TensorRT's KL) or mse",
    )
    parser.add_argument(
        "--image-size", type=int, help="input height/width of zoo CNNs (default 224, at most 1024)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of weights, calibration and input"
    )
    parser.add_argument(
        "--out", type=Path, help="run directory (default build/runs/<model>-<config>-<time>)"
    )
    parser.add_argument(
        "--eval",
        type=int,
        metavar="N",
        help="models trained on a data set (digits): evaluate the first N held-out images "
        "(default: all of them; 0: none)",
    )
    parser.add_argument("--max-cycles", type=int, default=400_000_000, help="RTL cycle limit")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="split the network into N shards of balanced cycles, each run from the reference's "
        "checkpoint, in parallel on Dask (a LocalCluster, or DASK_SCHEDULER / DASK_CLUSTER); "
        "default 1: the sequential run",
    )
    parser.add_argument(
        "--layers",
        metavar="NAME|A:B",
        help="run only these layers from their checkpoint: a layer name, A:B of names (both "
        "included) or of indices (B excluded)",
    )
    parser.add_argument(
        "--no-ideal", action="store_true", help="skip the ISA simulator's ideal cycles"
    )
    parser.add_argument(
        "--hooks",
        metavar="MODULE[,MODULE]",
        help="rtl backend: attach these modules' cocotb coroutines `hook(dut, ctx)` to the run; "
        "their `on_report(report)` checks the report (sim/hooks.py)",
    )
    waves = parser.add_argument_group(
        "waveforms (rtl backend; dumps and GTKWave save files go to waves/, `make waves` opens)"
    )
    waves.add_argument("--waves", choices=FORMATS, help="trace the run (implied by a window)")
    waves.add_argument("--wave-layer", metavar="NAME", help="trace only this layer")
    waves.add_argument("--wave-insn", metavar="A:B", help="trace only instructions A..B-1")
    waves.add_argument("--wave-cycles", metavar="A:B", help="trace only cycles A..B-1")
    waves.add_argument(
        "--no-failure-waves",
        action="store_true",
        help="on a mismatch or accelerator error, do not re-run the failing window with tracing",
    )
    return parser.parse_args(argv)


def attach_hooks(value: str, backend: str) -> None:
    """Check the user's hook modules (sim/hooks.py) and hand them to the rtl backend."""
    if backend != "rtl":
        raise UsageError(f"--hooks needs --backend rtl (cocotb), not {backend}")
    hooks.load(hooks.names(value))
    os.environ[hooks.ENV] = value


def wave_request(args: argparse.Namespace) -> WaveRequest | None:
    """The waveform request of the command line, or None."""
    window = (args.wave_layer, args.wave_insn, args.wave_cycles)
    if args.waves is None and not any(window):
        return None
    if args.backend != "rtl":
        raise UsageError(f"waveforms need --backend rtl, not {args.backend}")
    return WaveRequest.parse(args.waves, *window)


class Progress:
    """One status line: layer i/N with its name, cycles so far, simulated cycles per second."""

    def __init__(self, exe: Executable) -> None:
        self.names = [layer.name for layer in exe.layers]

    def __call__(self, state: dict[str, Any]) -> None:
        done = state["layers_done"]
        current = self.names[min(done, len(self.names) - 1)]
        rate = state["cycles"] / state["wall_s"] if state["wall_s"] else 0
        print(
            f"\r  layer {min(done + 1, len(self.names))}/{len(self.names)} {current:<28} "
            f"{state['cycles']:>12,} cycles  {rate:>10,.0f} cycles/s",
            end="",
            file=sys.stderr,
            flush=True,
        )


def waves_summary(waves: dict[str, Any]) -> str:
    if waves.get("file") is None:
        return f"waveform: {waves['window']['label']}: {waves.get('note', 'no dump')}"
    first, last = waves["traced_cycles"]
    return (
        f"waveform ({waves['window']['label']}, cycles {first}..{last}, "
        f"{waves['bytes'] / 1e6:.2f} MB): {waves['file']}\n"
        f"  open: make waves   (or gtkwave {waves['file']} {waves['savefile']})"
    )


def failure_cycles(cycle: int) -> tuple[int, int]:
    """The cycle window traced when the accelerator stops with an error at ``cycle``."""
    return max(0, cycle - FAILURE_CYCLES), cycle + 16


def failure_dump(
    args: argparse.Namespace,
    exe: Executable,
    x: np.ndarray,
    out: Path,
    request: WaveRequest,
    layers: list[Any] | None = None,
) -> None:
    """Re-run with tracing over the failing window (unless --no-failure-waves) and say where
    the dump is; otherwise print the command that makes it. ``layers`` (the failed run's) give
    the window's cycles for a size warning."""
    window = resolve(request, exe.programs)
    option = (
        f"WAVE_LAYER={request.layer}"
        if request.layer
        else f"WAVE_CYCLES={window.start}:{window.stop}"
    )
    if args.backend != "rtl" or args.no_failure_waves:
        print(f"to trace the failing window: make sim ... BACKEND=rtl {option}", file=sys.stderr)
        return
    print(f"re-running with tracing over the failing window ({window.label})...", file=sys.stderr)
    if layers:
        check_window(request, exe.programs, layers, exe.config)
    try:
        result = run(
            exe,
            x,
            "rtl",
            workdir=out / "sim-waves",
            max_cycles=args.max_cycles,
            waves=request,
            name=out.name,
        )
        if result.waves is not None:
            print(waves_summary(result.waves), file=sys.stderr)
    except RunError as exc:  # the error again: the dump was written up to it
        print(f"{exc}\n  open: make waves", file=sys.stderr)
    except (ToolchainError, BuildError, SimulationFailed) as exc:
        print(f"could not trace the failing window: {exc}", file=sys.stderr)


def layer_counters(result: RunResult) -> list[dict[str, int]]:
    return [layer.counters for layer in result.layers]


def write_outputs(exe: Executable, exe_path: Path | None, out: Path) -> None:
    """Save ``exe`` to ``exe_path`` (unless None: a loaded bundle) and its listing to ``out``."""
    if exe_path is not None:
        executable.save(exe, exe_path)
    (out / "listing.txt").write_text(listing.render(exe))


def ideal_cycles(
    ideal_run: Future[RunResult] | None, sharded: RunResult | None
) -> list[int] | None:
    """The ISA simulator's cycles of each accelerator layer (of those a sharded run ran)."""
    if ideal_run is None:
        return None
    layers = [layer for layer in ideal_run.result().layers if layer.device == "accel"]
    if sharded is not None:
        ran = {layer.name for layer in sharded.layers}
        layers = [layer for layer in layers if layer.name in ran]
    return [layer.cycles for layer in layers]


def first_failure(
    ideal_run: Future[RunResult] | None, exc: RunError | SimulationFailed
) -> RunError | SimulationFailed:
    """The ISA run's failure if it failed (it ran first when not overlapped), else ``exc``."""
    if ideal_run is not None:
        failed = ideal_run.exception()
        if isinstance(failed, RunError | SimulationFailed):
            return failed
    return exc


def load_executable(
    args: argparse.Namespace, calib: Calibration | None = None
) -> tuple[Executable, AccelConfig, onnx.ModelProto | None, float, int]:
    """The executable to run: compiled from ``--model`` or read from ``--bundle``; the config;
    the fp32 model to measure accuracy against (none for a bundle); the compile time."""
    started = time.perf_counter()
    if args.bundle is not None:
        if args.image_size is not None:
            raise UsageError("--image-size applies when compiling a zoo model, not to --bundle")
        if args.calib is not None or args.calib_method != "minmax":
            raise UsageError("--calib and --calib-method apply when compiling, not to --bundle")
        wanted = load_config(args.config) if args.config else None
        exe = executable.load(args.bundle, wanted)
        return exe, exe.config, None, 0.0, 1
    config = load_config(args.config or "default")
    compiled = compile_model(
        args.model or "resnet",
        config,
        image_size=args.image_size,
        seed=args.seed,
        calibration=calib.inputs if calib else None,
        calib_method=calib.method if calib else "minmax",
    )
    elapsed = time.perf_counter() - started
    return compiled.executable, config, compiled.source, elapsed, compiled.batch


#: Exit code of an unexpected exception: a bug, never to be read as a mismatch (1).
INTERNAL_ERROR = 4
#: Exit code after Ctrl-C (128 + SIGINT, as a shell reports it).
INTERRUPTED = 130


def main(argv: list[str] | None = None, prog: str = "python -m sim.cli") -> int:
    """The command line (see :func:`parse`); returns the exit code. An exception none of the
    steps expects is a bug: one ``error: internal error: ...`` line and exit code 4 (with
    ``COSIM_DEBUG=1`` in the environment, the traceback after it). Ctrl-C: ``interrupted``
    and exit code 130."""
    args = parse(argv, prog)
    terminal.log_to_stderr()  # the build says what it builds and how long it took
    # Shards: the Dask cluster starts on the other core while the model compiles.
    # (and its workers build or find the model: a bundle's config is known only once read)
    warm = None if args.bundle else (args.backend, args.config or "default")
    early = cluster.EarlyClient(args.jobs, warm) if args.jobs > 1 else None
    try:
        return _main(args, early)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return INTERRUPTED
    except Exception as exc:  # the backstop: every known failure has its own code above
        message = " ".join(str(exc).split())
        message = message if len(message) <= 300 else message[:297] + "..."
        print(
            f"\nerror: internal error: {type(exc).__name__}: {message} (please report)",
            file=sys.stderr,
        )
        if os.environ.get("COSIM_DEBUG") == "1":
            traceback.print_exc()
        return INTERNAL_ERROR
    finally:
        if early is not None:
            early.close()


def _main(args: argparse.Namespace, early: cluster.EarlyClient | None = None) -> int:
    started = provenance.now()
    try:
        keep = keep_runs()
        if args.seed < 0:
            raise UsageError(f"--seed must be a non-negative integer, not {args.seed}")
        if args.eval is not None and args.eval < 0:
            raise UsageError(f"--eval must be a non-negative integer, not {args.eval}")
        if args.max_cycles < 1:
            raise UsageError(f"--max-cycles must be a positive integer, not {args.max_cycles}")
        calib = calibration(args.calib, args.calib_method, args.model, args.preprocess, args.seed)
        exe, config, source, compile_s, batch = load_executable(args, calib)
        model = args.model if args.bundle is None else None
        inputs = run_inputs(args.image, model, args.seed, exe.input.shape, args.preprocess, batch)
        x = inputs.xs[0]
        waves = wave_request(args)
        if waves is not None:
            resolve(waves, exe.programs)  # an unknown layer or a bad range fails before the run
        sharded = shards.check_request(exe, args.jobs, args.layers, waves, args.backend)
        if args.hooks is not None:
            attach_hooks(args.hooks, args.backend)
    except (
        ConfigError,
        CompileError,
        ExecutableError,
        UsageError,
        WaveError,
        InputError,
        KeepRunsError,
        shards.ShardError,
        hooks.HookError,
    ) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        print(
            "error: out of memory compiling the model (a smaller --image-size or model?)",
            file=sys.stderr,
        )
        return 2
    config_tag = args.config if args.config in PRESETS else config.name
    try:
        if args.out is not None:
            out = use_run_dir(args.out)
        else:
            out = new_run_dir(RUNS_ROOT, f"{exe.model}-{config_tag}-{args.backend}")
    except RunDirError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    hold(out)  # not pruned by a run that ends while this one runs
    exe_path = args.bundle or out / f"{exe.model}{executable.SUFFIX}"
    # The executable and the listing are written on the other core while the run starts.
    written = in_background("write", write_outputs, exe, None if args.bundle else exe_path, out)
    insns = sum(program.instructions for program in exe.programs)
    how = "loaded" if args.bundle else f"compiled in {compile_s:.1f} s"
    print(f"{exe.model}: {len(exe.layers)} layers, {insns:,} instructions, {how}")
    print(f"executable: {exe_path}")
    print(f"run directory: {out}")

    # The fp32 comparison needs no simulator result: it runs on another core during the run.
    # Shards use every core: then the comparisons take only what the simulators leave.
    pool = ThreadPoolExecutor(  # (shut down after the run; see its `finally`)
        max_workers=4, initializer=lower_priority if sharded else None
    )
    # The integer reference of x, computed once (on the other core) for the run, its checks
    # and the comparisons below.
    reference = ReferenceStream(exe, x) if waves is None or not sharded else None

    def known() -> dict[str, np.ndarray] | None:
        return reference.result() if reference is not None else None

    fp32 = (
        pool.submit(lambda: compare_fp32(source, exe.reference, x, known()))
        if source is not None
        else None
    )
    split = zoo.held_out(args.model) if source is not None else None
    sqnr_xs = [split.x[i : i + 1] for i in range(SQNR_IMAGES)] if split else inputs.xs
    sqnr = (
        pool.submit(lambda: layer_sqnr(source, exe.reference, sqnr_xs, known())) if source else None
    )
    sqnr_plot = (  # drawn on the other core during the run: no plot is drawn before it is done
        pool.submit(sqnr_png, sqnr, f"{exe.model} ({calib.method})")
        if sqnr is not None and calib is not None
        else None
    )
    ort_agree = (
        pool.submit(agreement_report, source, exe.reference, inputs.xs[:4]) if source else None
    )
    ran = False
    try:
        ideal_run: Future[RunResult] | None = None
        computed = reference.future if reference is not None else None
        if args.backend in RTL_BACKENDS and not args.no_ideal:
            if waves is not None or args.backend != "rtl":
                isa_result = run(exe, x, "isa", reference=computed)
                if waves is not None:  # a large dump is announced with its size
                    check_window(waves, exe.programs, isa_result.layers, config)
                ideal_run = Future()
                ideal_run.set_result(isa_result)  # (ran first: its failure is the one said)
            else:  # the ideal cycles are for the report: on the other core, during the run
                ideal_run = in_background("ideal", run, exe, x, "isa", reference=computed)
        if sharded:
            result = shards.run(
                exe,
                x,
                args.backend,
                jobs=args.jobs,
                layers=args.layers,
                workdir=out / "sim",
                max_cycles=args.max_cycles,
                waves=waves,
                name=out.name,
                reference=reference,
                client=early,
            )
        else:
            result = run(
                exe,
                x,
                args.backend,
                workdir=out / "sim",
                max_cycles=args.max_cycles,
                progress=Progress(exe) if args.backend in RTL_BACKENDS else None,
                waves=waves,
                name=out.name,
                reference=computed,
            )
        if args.backend in RTL_BACKENDS and not sharded:
            print(file=sys.stderr)
        ideal = ideal_cycles(ideal_run, result if sharded else None)
        ran = True
    except (ToolchainError, BuildError) as exc:
        print(f"\nerror: cannot build the simulator: {exc}", file=sys.stderr)
        return 3
    except shards.CLUSTER_ERRORS as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, shards.cluster.ClusterError) else 3
    except (RunError, SimulationFailed) as exc:
        exc = first_failure(ideal_run, exc)
        written.result()  # the listing the message names
        print(
            f"\nerror: {exc}\n  listing: {out / 'listing.txt'}"
            + (f"  log: {out / 'sim' / 'sim.log'}" if args.backend == "rtl" else ""),
            file=sys.stderr,
        )
        if isinstance(exc, RunError) and exc.cycle is not None and waves is None:
            failure_dump(args, exe, x, out, WaveRequest(cycles=failure_cycles(exc.cycle)))
        return 3
    finally:
        # Comparisons not started yet are dropped only when the run failed: a run can end before
        # a pool thread has taken its task (a tiny model on a loaded machine), and the report
        # still needs that result.
        pool.shutdown(wait=False, cancel_futures=not ran)
        written.result()  # never exit with a half-written executable
        if not ran and reference is not None:
            reference.stop()  # (pool threads are joined at exit; this one is a daemon)

    accuracy = fp32.result() if fp32 is not None else {}
    accuracy = {k: v for k, v in accuracy.items() if k in ("top1_agree_fp32", "cosine_vs_fp32")}
    dataset = None
    if source is not None and args.eval != 0:
        try:
            dataset = evaluate_held_out(
                args.model, exe, source, args.backend, limit=args.eval, workdir=out / "eval"
            )
        except (RunError, SimulationFailed) as exc:
            print(f"\nerror: held-out evaluation: {exc}", file=sys.stderr)
            return 3
    if dataset is not None:
        accuracy["dataset"] = dataset
    if sqnr is not None:
        accuracy["sqnr"] = sqnr.result()
    if ort_agree is not None and ort_agree.result() is not None:
        accuracy["ort_agreement"] = ort_agree.result()
    images = None
    if len(inputs.xs) > 1:
        try:
            images = evaluate_images(exe, source, inputs, args.backend, out / "images")
        except (RunError, SimulationFailed) as exc:
            print(f"\nerror: images of {args.image}: {exc}", file=sys.stderr)
            return 3
    data = reports.build(
        exe.model, config, result, accuracy, layer_counters(result), ideal, executable=exe_path
    )
    data["provenance"] = provenance.collect(
        seed=args.seed,
        input_=provenance.describe_input(args.image, args.seed, x),
        backend=args.backend,
        started=started,
        rtl=args.backend in RTL_BACKENDS,
    )
    data["input"] = inputs.report | ({"images": images} if images is not None else {})
    if source is not None:
        data["calibration"] = calib.report
    if args.layers or (sharded and waves is not None and waves.layer):
        # only these layers ran, each range from its checkpoint (sim/shards.py)
        data["layers_run"] = args.layers or (waves.layer if waves else None)
    png = sqnr_plot.result() if sqnr_plot is not None and accuracy.get("sqnr") else None
    paths = reports.write(data, out)
    if png is not None:
        (out / "sqnr.png").write_bytes(png)
    terminal.show(reports.summary_table(data))
    if accuracy:
        cosine = accuracy["cosine_vs_fp32"]
        cosine_text = f"{cosine:.5f}" if math.isfinite(cosine) else "undefined (a zero output)"
        print(
            f"accuracy vs fp32 onnxruntime: cosine {cosine_text}, "
            f"top-1 {'agrees' if accuracy['top1_agree_fp32'] else 'differs'}"
        )
    else:
        print("accuracy vs fp32: not measured (an executable holds no fp32 model; use --model)")
    print(input_summary(data["input"], data.get("calibration")))
    if accuracy.get("sqnr"):
        worst = sorted(accuracy["sqnr"], key=lambda e: e["sqnr_db"])[:3]
        print(
            "lowest SQNR vs fp32: "
            + ", ".join(f"{e['layer']} {e['sqnr_db']:.1f} dB" for e in worst)
            + f" (all layers: report.json accuracy.sqnr, {out / 'sqnr.png'})"
        )
    if accuracy.get("ort_agreement"):
        agreement = accuracy["ort_agreement"]
        print(
            f"per-layer agreement with onnxruntime's QDQ execution (same int8 inputs): "
            f"{agreement['equal']:.5f} of codes equal, worst {agreement['worst_layer']} "
            f"{agreement['worst_equal']:.5f}, max difference {agreement['max_code_diff']} code(s)"
        )
    if images is not None:
        agree = sum(1 for i in images if i.get("top1_agree_fp32"))
        exact = all(i["bit_exact"] for i in images)
        print(
            f"{len(images)} images: top-1 agrees with fp32 on {agree}, every layer bit-exact: "
            f"{'yes' if exact else 'NO'}"
        )
    if dataset is not None:
        print(
            f"held-out {dataset['name']}: n={dataset['n']}, top-1 fp32 {dataset['top1_fp32']:.4f}, "
            f"int8 ({args.backend}) {dataset['top1_int8']:.4f}, agreement "
            f"{dataset['agreement']:.4f}, every layer bit-exact: "
            f"{'yes' if dataset['bit_exact'] else 'NO'} ({dataset['wall_s']:.1f} s)"
        )
    print(f"report: {paths['json']}  plot: {paths['png']}  listing: {out / 'listing.txt'}")
    try:
        for line in hooks.check_report(data):
            print(line)
    except hooks.HookCheckFailed as exc:
        print(f"error: hook check failed: {exc}", file=sys.stderr)
        return 1
    if args.out is None:
        point_latest(RUNS_ROOT / "latest", out)
        removed = prune(RUNS_ROOT, keep)
        if removed:
            print(
                f"removed {len(removed)} old run(s) from {RUNS_ROOT}: keeping the newest {keep} "
                f"(COSIM_KEEP_RUNS=N to change, 0 keeps all)"
            )
    if result.waves is not None:
        print(waves_summary(result.waves))
    if images is not None and not all(i["bit_exact"] for i in images):
        bad_image = next(i for i in images if not i["bit_exact"])
        print(
            f"error: image {bad_image['file']} not bit-exact: {bad_image['mismatch']}",
            file=sys.stderr,
        )
        return 1
    if dataset is not None and not dataset["bit_exact"]:
        print(f"error: held-out image not bit-exact: {dataset['first_mismatch']}", file=sys.stderr)
        return 1
    bad = result.first_mismatch
    if bad is not None:
        start, end = bad.cycle_window
        print(
            f"error: layer {bad.name} ({bad.op}) is not bit-exact: {bad.mismatch}; its cycles "
            f"{start}..{end} (instructions {bad.insn_range[0]}..{bad.insn_range[1] - 1})",
            file=sys.stderr,
        )
        if waves is None:
            failure_dump(args, exe, x, out, WaveRequest(layer=bad.name), result.layers)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

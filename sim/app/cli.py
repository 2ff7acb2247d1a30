"""``python -m sim.app.cli`` (what ``make sim`` runs; installed as ``cosim sim``): compile a
model - or load a saved executable - run it on a backend, check every layer bit for bit, and
write a report.

Exit codes: 0 bit-exact; 1 a layer mismatched; 2 bad arguments or the model cannot be compiled;
3 the simulator could not be built or the accelerator stopped with an error; 4 an internal error
(a bug: any other exception, said in one line; ``COSIM_DEBUG=1`` shows its traceback); 130
interrupted (Ctrl-C).
"""

from __future__ import annotations

# isort: off
from sim.app import early_signals  # (first: Ctrl-C while the modules below are imported)

# isort: on
import argparse
import math
import sys
import traceback
from pathlib import Path
from typing import Any

import zoo
from arch import executable
from arch.config import ConfigError
from arch.executable import Executable, ExecutableError
from arch.host_runtime import HostOutputInvalid, HostTimeout
from compiler.errors import CompileError
from sim import knobs
from sim.app import report as reports
from sim.app import stopping, terminal
from sim.app.disk import disk_failure
from sim.app.generate import DECODES
from sim.app.progress import Progress
from sim.app.request_checks import check_early
from sim.app.retrace import failure_dump, waves_summary
from sim.app.run_inputs import input_summary
from sim.app.rundir import RunDirError
from sim.app.session import (
    RUNS_ROOT,
    Outcome,
    OutOfMemory,
    Prepared,
    Request,
    RunFailed,
    Session,
    UsageError,
)
from sim.backends import dram_stall, hooks
from sim.backends.registry import BACKENDS
from sim.runtime.host import apply_time_bound
from sim.runtime.inputs import InputError
from sim.scaleout import cluster, shards
from sim.verilate.build import BuildError
from sim.verilate.toolchain import ToolchainError
from sim.waves.window import FORMATS, WaveError

__all__ = ["EXIT_CODES", "RUNS_ROOT", "main", "parse"]


def parse(argv: list[str] | None, prog: str = "python -m sim.app.cli") -> argparse.Namespace:
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
    _model_options(parser)
    _input_options(parser)
    _run_options(parser)
    _text_options(parser)
    _wave_options(parser)
    return parser.parse_args(argv)


def _model_options(parser: argparse.ArgumentParser) -> None:
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
        help="preset (tiny, default), default_norm (default with the norm unit) or a config "
        ".json (default: default; with --bundle, the executable's own config, and a different "
        "one is an error)",
    )
    parser.add_argument(
        "--backend",
        default="rtl",
        choices=list(BACKENDS),
        help="; ".join(f"{name}: {doc}" for name, (_m, _c, doc) in BACKENDS.items()),
    )


def _input_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--image",
        help=".npy (input-shaped float32), an image (png, jpg, bmp, gif, tif, webp; any mode; "
        "resized and center-cropped to the model's input) or a folder of images (each run, "
        "in one batch); default: a trained model's held-out image 0, else seeded noise",
    )
    parser.add_argument(
        "--tokens",
        help="models of integer token inputs (input_ids, attention_mask): a .npy of ids, (T,) "
        "or (1, T) (a mask is then all ones), or an .npz of one array per input; default: "
        "seeded ids in the vocabulary and a mask of ones with a padded tail; with --generate "
        "and a model of ids alone (no tokenizer: GPT-2 as exported), the prompt: 1 to T ids "
        "(default T // 2 seeded ids)",
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
        "default: a trained model's training images, else 4 seeded noise inputs (16 for "
        "a model with attention)",
    )
    parser.add_argument(
        "--calib-method",
        help="activation ranges: minmax (default), percentile[:P] (99.99), entropy "
        "(TensorRT's KL) or mse",
    )
    parser.add_argument(
        "--image-size", type=int, help="input height/width of zoo CNNs (default 224, at most 1024)"
    )


def _run_options(parser: argparse.ArgumentParser) -> None:
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
        help="models trained on a data set: evaluate the first N held-out images (digits; "
        "default: all of them) or held-out text windows (chargpt; default 16); 0: none",
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
        "--dram-stall",
        choices=dram_stall.NAMES,
        help="RTL backends: the testbench DRAM's back-pressure and extra read latency, seeded "
        "by --seed (sim/backends/dram_stall.py; outputs stay bit-exact, cycles differ)",
    )
    parser.add_argument(
        "--hooks",
        metavar="MODULE[,MODULE]",
        help="rtl backend: attach these modules' cocotb coroutines `hook(dut, ctx)` to the run; "
        "their `on_report(report)` checks the report (sim/backends/hooks.py)",
    )


def _text_options(parser: argparse.ArgumentParser) -> None:
    text = parser.add_argument_group(
        "language models (chargpt, or ids in and logits over them out): generation - a "
        "prefill launch, then one decode launch per token with a KV cache in DRAM - each "
        "launch checked bit for bit"
    )
    text.add_argument(
        "--prompt",
        metavar="TEXT",
        help="the text --generate continues (a model of ids alone takes --tokens instead)",
    )
    text.add_argument(
        "--generate",
        type=int,
        metavar="N",
        help="generate N characters after --prompt (ids after --tokens) on the backend, "
        "printed as they come",
    )
    text.add_argument(
        "--top-k",
        type=int,
        metavar="K",
        help="pick each character by sampling the K likeliest (seeded by --seed); default greedy",
    )
    text.add_argument(
        "--decode",
        choices=DECODES,
        help="kv_cache (default): prefill, then a decode program per character reading the "
        "cache in DRAM; recompute: a full forward pass per character",
    )
    text.add_argument(
        "--batch",
        type=int,
        metavar="B",
        help="with the KV cache: decode B sequences of the prompt together, each weight read "
        "once per step for all B (sequence b samples with seed --seed + b); default 1",
    )


def _wave_options(parser: argparse.ArgumentParser) -> None:
    waves = parser.add_argument_group(
        "waveforms (rtl backend; dumps and GTKWave save files go to waves/, `make waves` opens)"
    )
    waves.add_argument("--waves", choices=FORMATS, help="trace the run (implied by a window)")
    waves.add_argument("--wave-layer", metavar="NAME", help="trace only this layer")
    waves.add_argument("--wave-insn", metavar="A:B", help="trace only instructions A..B-1")
    waves.add_argument("--wave-cycles", metavar="A:B", help="trace only cycles A..B-1")
    waves.add_argument(
        "--wave-signals",
        metavar="SEL",
        help="the signals written: default (units' state, handshakes, counters), all, or "
        "comma-separated globs over hierarchical names (dut.accel.load.*)",
    )
    waves.add_argument(
        "--no-failure-waves",
        action="store_true",
        help="on a mismatch or accelerator error, do not re-run the failing window with tracing",
    )


class Printed:
    """A session's notes on the terminal (:class:`sim.app.notes.Notes`); a progress line
    still drawn is ended before the next note."""

    def __init__(self) -> None:
        self._progress: Progress | None = None

    def say(self, text: str) -> None:
        self._end_progress()
        print(text)

    def warn(self, text: str) -> None:
        self._end_progress()
        print(text, file=sys.stderr)

    def stream(self, text: str) -> None:
        self._end_progress()
        sys.stdout.write(text)
        sys.stdout.flush()

    def progress(self, exe: Executable) -> Progress:
        self._end_progress()
        self._progress = Progress(exe)
        return self._progress

    def _end_progress(self) -> None:
        if self._progress is not None:
            self._progress.close()


#: Exit code of an unexpected exception: a bug, never to be read as a mismatch (1).
INTERNAL_ERROR = 4
#: Exit code after Ctrl-C (128 + SIGINT, as a shell reports it).
INTERRUPTED = stopping.INTERRUPTED
#: Every failure a run expects: exception type -> exit code and the form of its message (the
#: first entry that matches). Any other exception is a bug (:data:`INTERNAL_ERROR`).
EXIT_CODES: tuple[tuple[tuple[type[BaseException], ...], int, str], ...] = (
    (
        (ConfigError, CompileError, ExecutableError, UsageError, WaveError, InputError),
        2,
        "error: {exc}",
    ),
    (
        (knobs.KnobError, shards.ShardError, hooks.HookError, OutOfMemory, RunDirError),
        2,
        "error: {exc}",
    ),
    (
        (HostOutputInvalid,),
        2,
        "error: {exc}",
    ),
    ((ToolchainError, BuildError), 3, "\nerror: cannot build the simulator: {exc}"),
    ((cluster.ClusterError,), 2, "\nerror: {exc}"),
    ((cluster.BuildMismatch, cluster.WorkerFailed, RunFailed), 3, "\nerror: {exc}"),
    ((HostTimeout,), 3, "\nerror: {exc}"),
    ((hooks.HookFailed,), 3, "error: {exc}"),  # (a hook that raised or overstayed)
    ((hooks.HookCheckFailed,), 1, "error: hook check failed: {exc}"),
)
EXPECTED = tuple(kind for kinds, _code, _form in EXIT_CODES for kind in kinds)


def exit_code(exc: BaseException) -> tuple[int, str]:
    """The exit code and message of an expected failure (see :data:`EXIT_CODES`)."""
    code, form = next((c, f) for kinds, c, f in EXIT_CODES if isinstance(exc, kinds))
    return code, form.format(exc=exc)


def main(argv: list[str] | None = None, prog: str = "python -m sim.app.cli") -> int:
    """The command line (see :func:`parse`); returns the exit code. An exception none of the
    steps expects is a bug: one ``error: internal error: ...`` line and exit code 4 (with
    ``COSIM_DEBUG=1`` in the environment, the traceback after it). Ctrl-C: ``interrupted``
    and exit code 130; SIGTERM: ``terminated`` and 143."""
    args = parse(argv, prog)
    request = Request(**vars(args))
    early_signals.release()
    with stopping.sigterm_as_interrupt():  # kill <pid> ends a run as Ctrl-C does
        return _bounded_main(request)


def _bounded_main(request: Request) -> int:
    """:func:`main` after parsing, with SIGTERM raising :class:`~sim.app.stopping.Terminated`:
    the early checks (arguments, files, every environment variable's form) before any cluster,
    build or simulator starts, then the run."""
    try:
        check_early(request)
    except EXPECTED as exc:
        code, message = exit_code(exc)
        print(message.lstrip("\n"), file=sys.stderr)
        return code
    terminal.log_to_stderr()  # the build says what it builds and how long it took
    apply_time_bound()  # before anything runs a host model (its form was checked early)
    # Shards: the Dask cluster starts on the other core while the model compiles.
    # (and its workers build or find the model: a bundle's config is known only once read)
    warm = None if request.bundle else (request.backend, request.config or "default")
    early = cluster.EarlyClient(request.jobs, warm) if request.jobs > 1 else None
    try:
        try:
            return _main(request, early)
        finally:
            if early is not None:
                early.close()  # (a Ctrl-C meanwhile: below, once the cluster is down)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM
        code, line = stopping.ending(exc)
        print(f"\n{line}", file=sys.stderr)
        return code
    except Exception as exc:  # the backstop: every known failure is in EXIT_CODES
        message = " ".join(str(exc).split())
        message = message if len(message) <= 300 else message[:297] + "..."
        print(
            f"\nerror: internal error: {type(exc).__name__}: {message} (please report)",
            file=sys.stderr,
        )
        if knobs.DEBUG.get() == "1":
            traceback.print_exc()
        return INTERNAL_ERROR


def _main(request: Request, early: cluster.EarlyClient | None = None) -> int:
    """One session (:mod:`sim.app.session`), printed; an expected failure is said in the form
    :data:`EXIT_CODES` gives, then a failing window is traced again."""
    notes = Printed()
    session = Session(request, notes, early)
    try:
        prepared = session.prepare()
        out, exe_path = session.open(prepared)
        show_start(prepared, request, out, exe_path)
        outcome = session.run(prepared, out, exe_path)
        show_outcome(outcome, request)
        for line in session.conclude(outcome):
            print(line)
    except EXPECTED as exc:
        code, message = exit_code(exc)
        print(message, file=sys.stderr)
        if isinstance(exc, RunFailed) and exc.retrace is not None:
            failure_dump(request, exc.retrace, notes.warn)
        return code
    except OSError as exc:  # a write the file system refused (a full disk, ...), else a bug
        said = disk_failure(exc, session.out)
        if said is None:
            raise
        print(f"\n{said[1]}", file=sys.stderr)
        return said[0]
    return show_end(session, outcome, notes)


def show_start(prepared: Prepared, request: Request, out: Path, exe_path: Path) -> None:
    """What runs and where its files go."""
    exe = prepared.exe
    insns = sum(program.instructions for program in exe.programs)
    how = "loaded" if request.bundle else f"compiled in {prepared.compile_s:.1f} s"
    print(f"{exe.model}: {len(exe.layers)} layers, {insns:,} instructions, {how}")
    print(f"executable: {exe_path}")
    print(f"run directory: {out}")


def show_outcome(outcome: Outcome, request: Request) -> None:
    """The summary table and one line per measurement."""
    data, out = outcome.report, outcome.out
    accuracy = data["accuracy"]
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
    if accuracy.get("twin_agreement"):
        twin = accuracy["twin_agreement"]
        print(
            f"per-layer agreement with the fake-quantized twin (onnxruntime, same int8 inputs): "
            f"{twin['equal']:.5f} of codes equal, worst {twin['worst_layer']} "
            f"{twin['worst_equal']:.5f}, max difference {twin['max_code_diff']} code(s), "
            f"{twin['outside_rule']} outside the rule"
        )
    show_evaluations(data, request)
    show_generation(data)
    paths = outcome.paths
    timeline = f"  timeline: {paths['timeline']}" if "timeline" in paths else ""
    print(
        f"report: {paths['json']}  plot: {paths['png']}  listing: {out / 'listing.txt'}{timeline}"
    )
    print(f"html report: {paths['html']}")


def show_evaluations(data: dict[str, Any], request: Request) -> None:
    """The lines of an image folder's batch and of the held-out evaluation."""
    images, dataset = data["input"].get("images"), data["accuracy"].get("dataset")
    if images is not None:
        agree = sum(1 for i in images if i.get("top1_agree_fp32"))
        exact = all(i["bit_exact"] for i in images)
        print(
            f"{len(images)} images: top-1 agrees with fp32 on {agree}, every layer bit-exact: "
            f"{'yes' if exact else 'NO'}"
        )
    if dataset is not None and "bits_per_char_fp32" in dataset:
        print(
            f"held-out {dataset['name']}: {dataset['n']} windows ({dataset['characters']:,} "
            f"characters), bits per character fp32 {dataset['bits_per_char_fp32']:.4f}, int8 "
            f"({request.backend}) {dataset['bits_per_char_int8']:.4f} "
            f"(x{dataset['int8_over_fp32']:.4f}; perplexity {dataset['perplexity_fp32']:.3f} / "
            f"{dataset['perplexity_int8']:.3f}), next-character top-1 "
            f"{dataset['top1_fp32']:.4f} / {dataset['top1_int8']:.4f}, every layer bit-exact: "
            f"{'yes' if dataset['bit_exact'] else 'NO'} ({dataset['wall_s']:.1f} s)"
        )
    elif dataset is not None:
        print(
            f"held-out {dataset['name']}: n={dataset['n']}, top-1 fp32 {dataset['top1_fp32']:.4f}, "
            f"int8 ({request.backend}) {dataset['top1_int8']:.4f}, agreement "
            f"{dataset['agreement']:.4f}, every layer bit-exact: "
            f"{'yes' if dataset['bit_exact'] else 'NO'} ({dataset['wall_s']:.1f} s)"
        )


def show_generation(data: dict[str, Any]) -> None:
    """The line after the generated text."""
    gen = data.get("generation")
    if gen is None:
        return
    exact = f"bit-exact: {'yes' if gen['bit_exact'] else 'NO'} ({gen['wall_s']:.1f} s)"
    unit = "characters" if gen["prompt"] is not None else "ids"  # (None: a model of ids alone)
    if gen["mode"] == "kv_cache":
        pre, batch = gen["prefill"], gen.get("batch", 1)
        what, launches = f"{gen['count']} {unit}", ""
        if batch > 1:
            what, launches = f"{batch} x {what}", f" ({batch} launches)"
        print(
            f"generated {what} ({gen['picking']}) with a KV cache: prefill "
            f"of {pre['tokens']} positions {pre['cycles']:,} cycles{launches}, then "
            f"{gen['cycles_per_token']:,.0f} cycles per decode step on {gen['backend']}, every "
            f"launch {exact}"
        )
        own = gen.get("fp32_own_cache")
        if own is not None:
            print(
                f"against onnxruntime (fp32) stepping the model's own exported cache along these "
                f"ids: logits cosine >= {own['cosine_min']:.5f} over {own['launches']} launches"
            )
        return
    print(
        f"generated {gen['count']} {unit} ({gen['picking']}) by recomputation - a full "
        f"forward pass of {gen['context']} positions per {unit[:-1]}: "
        f"{gen['cycles_per_token']:,.0f} cycles per {unit[:-1]} on {gen['backend']}, every step "
        f"{exact}"
    )


def show_end(session: Session, outcome: Outcome, notes: Printed) -> int:
    """Pruning, the waveform, and what was not bit-exact (exit code 1, after tracing it)."""
    if outcome.removed:
        removed, root, keep = len(outcome.removed), outcome.runs_root, outcome.keep
        print(
            f"removed {removed} old run(s) from {root}: keeping the newest {keep} "
            f"(COSIM_KEEP_RUNS=N to change, 0 keeps all)"
        )
    if outcome.result.waves is not None:
        print(waves_summary(outcome.result.waves))
    if outcome.failure is None:
        return 0
    print(f"error: {outcome.failure}", file=sys.stderr)
    if outcome.retrace is not None:
        failure_dump(session.request, outcome.retrace, notes.warn)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())

"""One run of the application, for the command line and the API: a :class:`Request` in, an
:class:`Outcome` out, printing apart.

The command line (:mod:`sim.app.cli`) goes through the phases in order and prints between them:
:meth:`Session.prepare` (check the request, compile the model or load the executable, read the
inputs), :meth:`Session.open` (the run directory), :meth:`Session.run` (the side measurements,
the simulation, the held-out evaluation, the report) and :meth:`Session.conclude` (the hooks'
checks, the ``latest`` link, pruning). The API (:mod:`sim.app.api`) calls :meth:`Session.check`.
Failures are exceptions (the command line maps them to exit codes with one table); what the
session has to say on the way goes to a :class:`Notes`.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from arch import executable, listing
from arch.config import AccelConfig, config_names, load_config
from arch.executable import Executable
from arch.executable.kv import KvExecutable
from arch.roofline import program_bounds
from compiler.compile import compile_model
from compiler.onnx.token_inputs import TOKENS_INPUT, token_inputs_of
from sim import knobs
from sim.app import provenance, report_html
from sim.app import report as reports
from sim.app.evaluate import evaluate_held_out, evaluate_images
from sim.app.generate import Generation, generate_in_run, generation_of
from sim.app.generate_kv import kv_for
from sim.app.notes import Notes, Quiet
from sim.app.own_cache import OwnCache
from sim.app.prune import hold, keep_runs, prune
from sim.app.request_checks import check_early
from sim.app.retrace import Retrace, failure_cycles
from sim.app.run_inputs import (
    Calibration,
    RunInputs,
    calibration,
    run_inputs,
    seeded_calibration_words,
)
from sim.app.rundir import new_run_dir, point_latest, use_run_dir
from sim.app.side_work import SideWork, api_accuracy
from sim.app.token_run_inputs import token_run_inputs
from sim.backends import dram_stall, hooks
from sim.backends.base import Backend
from sim.runtime import timeline as timelines
from sim.runtime.background import in_background, lower_priority
from sim.runtime.inputs import InputError, check_input
from sim.runtime.reference_stream import ReferenceStream
from sim.runtime.run import RunError, RunResult, backend_of, run, wave_bits
from sim.scaleout import cluster, shards
from sim.verilate.build import WORK_ROOT, SimulationFailed
from sim.waves.size import check_window
from sim.waves.window import WaveRequest, resolve

RUNS_ROOT = WORK_ROOT / "build" / "runs"


class UsageError(ValueError):
    """A bad argument (file, image); exit code 2."""


class OutOfMemory(RuntimeError):
    """The model did not fit in memory while it was compiled; exit code 2."""


class RunFailed(RuntimeError):
    """The accelerator stopped with an error (in the run, the held-out evaluation or the
    images); exit code 3. ``retrace``: the window to trace, once the error is said."""

    def __init__(self, message: str, retrace: Retrace | None = None) -> None:
        super().__init__(message)
        self.retrace = retrace


@dataclass(frozen=True)
class Request:
    """What to run: the command line's options (``--help`` says what each means)."""

    model: str | None = None
    bundle: Path | None = None
    config: str | None = None
    backend: str = "rtl"
    image: str | None = None
    tokens: str | None = None
    preprocess: str | None = None
    calib: str | None = None
    calib_method: str | None = None  # (minmax)
    image_size: int | None = None
    seed: int = 0
    out: Path | None = None
    eval: int | None = None
    prompt: str | None = None
    generate: int | None = None
    top_k: int | None = None
    decode: str | None = None  # (kv_cache)
    batch: int | None = None  # (1) sequences decoded together with the KV cache
    max_cycles: int = 400_000_000
    jobs: int = 1
    layers: str | None = None
    no_ideal: bool = False
    hooks: str | None = None
    dram_stall: str | None = None  # RTL backends: a profile of sim/backends/dram_stall.py
    waves: str | None = None
    wave_layer: str | None = None
    wave_insn: str | None = None
    wave_cycles: str | None = None
    wave_signals: str | None = None
    no_failure_waves: bool = False


def _inputs(
    r: Request,
    model: str | None,
    exe: Executable,
    source: onnx.ModelProto | None,
    batch: int,
    gen: Generation | None = None,
) -> RunInputs:
    """The run's inputs: token ids for a model of token inputs (``TOKENS=``), else images."""
    spec = token_inputs_of(source) if source is not None else None
    if spec is None and exe.input.name == TOKENS_INPUT:
        raise InputError(
            "this executable takes token inputs, whose vocabulary a bundle does not keep: "
            "run its model with --model"
        )
    if spec is None and r.tokens is not None:
        raise InputError("--tokens is for models of integer token inputs; this one takes --image")
    if spec is None:
        return run_inputs(r.image, model, r.seed, exe.input.shape, r.preprocess, batch)
    if r.image is not None or r.calib is not None:
        option = "--image" if r.image is not None else "--calib"
        raise InputError(
            f"{option} is for image models; this one takes token inputs ({spec.describe()}): "
            "use --tokens (calibration: seeded token inputs)"
        )
    inputs = token_run_inputs(r.tokens, spec, r.seed, model, gen.ids_prompt if gen else None)
    inputs.xs = [check_input(x, exe.input.shape, "tokens") for x in inputs.xs]  # (1, k, 1, T)
    return inputs


@dataclass
class Prepared:
    """A checked request: the executable, what it was compiled from, and the inputs."""

    exe: Executable
    config: AccelConfig
    source: onnx.ModelProto | None  # the fp32 model (none for a loaded executable)
    compile_s: float
    calib: Calibration | None
    inputs: RunInputs
    waves: WaveRequest | None
    sharded: bool  # shards, a layer range or a one-layer waveform run (sim/scaleout/shards.py)
    keep: int  # run directories kept
    generation: Generation | None = None  # --generate: characters to generate after --prompt
    wave_bits: int = 0  # bits the waveform's signal selection writes per sample
    kv: KvExecutable | None = None  # --generate with the KV cache: prefill and decode

    @property
    def x(self) -> np.ndarray:
        return self.inputs.xs[0]


@dataclass
class Outcome:
    """A finished run: its result and report (written to ``paths``), and what failed after
    the run - a layer, an image or a held-out image not bit-exact (``failure``, exit code 1;
    ``retrace``: the window to trace)."""

    result: RunResult
    report: dict[str, Any]
    paths: dict[str, Path]
    out: Path
    failure: str | None = None
    retrace: Retrace | None = None
    removed: list[Path] = field(default_factory=list)  # old run directories pruned (of runs_root)
    runs_root: Path = RUNS_ROOT
    keep: int = 0  # run directories kept


def wave_request(request: Request) -> WaveRequest | None:
    """The waveform request of ``request``, or None."""
    window = (request.wave_layer, request.wave_insn, request.wave_cycles)
    if request.waves is None and not any(window) and request.wave_signals is None:
        return None
    if not backend_of(request.backend).traces:
        raise UsageError(f"waveforms need --backend rtl, not {request.backend}")
    return WaveRequest.parse(request.waves, *window, signals=request.wave_signals)


def attach_hooks(value: str, backend: Backend) -> None:
    """Check the user's hook modules (sim/backends/hooks.py) and hand them to the rtl backend."""
    if not backend.hooks:
        raise UsageError(f"--hooks needs --backend rtl (cocotb), not {backend.name}")
    hooks.load(hooks.names(value))
    os.environ[hooks.ENV] = value


def load_executable(
    request: Request, calib: Calibration | None = None
) -> tuple[Executable, AccelConfig, onnx.ModelProto | None, float, int]:
    """The executable to run: compiled from ``model`` or read from ``bundle``; the config;
    the fp32 model to measure accuracy against (none for a bundle); the compile time; the
    model's batch."""
    started = time.perf_counter()
    if request.bundle is not None:
        wanted = load_config(request.config) if request.config else None
        exe = executable.load(request.bundle, wanted)
        return exe, exe.config, None, 0.0, 1
    config = load_config(request.config or "default")
    compiled = compile_model(
        request.model or "resnet",
        config,
        image_size=request.image_size,
        seed=request.seed,
        calibration=calib.inputs if calib else None,
        calib_method=calib.method if calib else "minmax",
    )
    elapsed = time.perf_counter() - started
    return compiled.executable, config, compiled.source, elapsed, compiled.batch


def write_outputs(exe: Executable, exe_path: Path | None, out: Path) -> None:
    """Save ``exe`` to ``exe_path`` (unless None: a loaded bundle) and its listing to ``out``."""
    if exe_path is not None:
        executable.save(exe, exe_path)
    (out / "listing.txt").write_text(listing.render(exe))


def first_failure(
    ideal_run: Future[RunResult] | None, exc: RunError | SimulationFailed
) -> RunError | SimulationFailed:
    """The ISA run's failure if it failed (it ran first when not overlapped), else ``exc``."""
    if ideal_run is not None:
        failed = ideal_run.exception()
        if isinstance(failed, RunError | SimulationFailed):
            return failed
    return exc


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


class Session:
    """One run of ``request``; see the module docstring. ``early``: a Dask client started
    while the model compiles (shards)."""

    def __init__(
        self,
        request: Request,
        notes: Notes | None = None,
        early: cluster.EarlyClient | None = None,
    ) -> None:
        self.request = request
        self.notes: Notes = notes or Quiet()
        self.early = early
        self.started = provenance.now()
        self.backend = backend_of(request.backend)
        self._written: Future[None] = Future()  # the executable and listing (see open)
        self.out: Path | None = None  # the run directory, once open

    def prepare(self) -> Prepared:
        """Check the request, compile the model or load the executable, read the inputs.
        Memory running out on the way is :class:`OutOfMemory`."""
        try:
            return self._prepare()
        except MemoryError:
            raise OutOfMemory(
                "out of memory compiling the model (a smaller --image-size or model?)"
            ) from None

    def _prepare(self) -> Prepared:
        r = self.request
        check_early(r)  # (the command line did already, before any cluster started)
        keep = keep_runs()
        method = r.calib_method or "minmax"
        calib = calibration(r.calib, method, r.model, r.preprocess, r.seed)
        exe, config, source, compile_s, batch = load_executable(r, calib)
        model = r.model if r.bundle is None else None
        gen = generation_of(r, model, source)
        inputs = _inputs(r, model, exe, source, batch, gen)
        seeded_calibration_words(calib, source, "tokens" in inputs.report, r.seed)
        waves, bits = wave_request(r), 0
        if waves is not None:
            resolve(waves, exe.programs)  # an unknown layer or a bad range fails before the run
            bits = wave_bits(waves, config, self.backend)  # and a pattern matching nothing
        sharded = shards.check_request(exe, r.jobs, r.layers, waves, r.backend)
        if r.hooks is not None:
            attach_hooks(r.hooks, self.backend)
        if r.dram_stall is not None:  # the backends read it (the cocotb job through its file)
            os.environ[knobs.DRAM_STALL.name] = str(dram_stall.parse(f"{r.dram_stall}:{r.seed}"))
        kv = None  # (compiled before the run: a --batch too large is refused at once)
        if gen is not None and gen.decode == "kv_cache":
            kv = kv_for(r.model or "chargpt", r.seed, config, calib, gen.batch)
        return Prepared(
            exe, config, source, compile_s, calib, inputs, waves, sharded, keep, gen, bits, kv
        )

    def open(self, prepared: Prepared) -> tuple[Path, Path]:
        """The run directory (held: not pruned while this run runs) and where the executable
        is; the executable and its listing are written there on the other core."""
        r, exe = self.request, prepared.exe
        config_tag = r.config if r.config in config_names() else prepared.config.name
        if r.out is not None:
            out = use_run_dir(r.out)
        else:
            out = new_run_dir(RUNS_ROOT, f"{exe.model}-{config_tag}-{r.backend}")
        self.out = out
        hold(out)  # not pruned by a run that ends while this one runs
        exe_path = r.bundle or out / f"{exe.model}{executable.SUFFIX}"
        # The executable and the listing are written on the other core while the run starts.
        self._written = in_background(
            "write", write_outputs, exe, None if r.bundle else exe_path, out
        )
        return out, exe_path

    def run(self, prepared: Prepared, out: Path, exe_path: Path) -> Outcome:
        """Simulate with the side measurements beside it, evaluate, and write the report."""
        # Shards use every core: then the comparisons take only what the simulators leave.
        pool = ThreadPoolExecutor(  # (shut down after the run; see _simulate's `finally`)
            max_workers=4, initializer=lower_priority if prepared.sharded else None
        )
        # The integer reference of x, computed once (on the other core) for the run, its
        # checks and the comparisons.
        reference = (
            ReferenceStream(prepared.exe, prepared.x)
            if prepared.waves is None or not prepared.sharded
            else None
        )
        calib = prepared.calib
        title = f"{prepared.exe.model} ({calib.method})" if calib is not None else None
        side = SideWork.start(
            pool,
            prepared.exe,
            prepared.source,
            self.request.model,
            prepared.inputs.xs,
            reference,
            title,
        )
        result, ideal = self._simulate(prepared, out, pool, reference)
        dataset = self._held_out(prepared, out)
        accuracy = side.accuracy(dataset)
        images = self._images(prepared, out)
        generated, generation_failure = self._generate(prepared, out)
        data = self._report(prepared, result, accuracy, ideal, images, exe_path)
        data |= {"generation": generated} if generated is not None else {}
        png = side.plot(accuracy)
        paths = reports.write(data, out)
        timeline = timelines.write(result.timeline, out / "timeline.json")
        if timeline is not None:
            paths["timeline"] = timeline
        if png is not None:
            (out / "sqnr.png").write_bytes(png)
        paths["html"] = report_html.write(reports.plain_json(data), out)  # links the files above
        outcome = Outcome(result, data, paths, out, keep=prepared.keep)
        self._failure(prepared, outcome, images, dataset)
        if outcome.failure is None and generation_failure is not None:
            outcome.failure = generation_failure
        return outcome

    def _simulate(
        self, prepared: Prepared, out: Path, pool: Any, reference: ReferenceStream | None
    ) -> tuple[RunResult, list[int] | None]:
        """The run (sequential or sharded) and the ISA simulator's ideal cycles beside it."""
        ran = False
        ideal_run: Future[RunResult] | None = None
        try:
            ideal_run = self._ideal(prepared, reference)
            result = self._main_run(prepared, out, reference)
            ideal = ideal_cycles(ideal_run, result if prepared.sharded else None)
            ran = True
        except (RunError, SimulationFailed) as exc:
            raise self._run_failed(prepared, out, first_failure(ideal_run, exc)) from exc
        finally:
            # Comparisons not started yet are dropped only when the run failed: a run can end
            # before a pool thread has taken its task (a tiny model on a loaded machine), and
            # the report still needs that result.
            pool.shutdown(wait=False, cancel_futures=not ran)
            self._written.result()  # never exit with a half-written executable
            if not ran and reference is not None:
                reference.stop()  # (pool threads are joined at exit; this one is a daemon)
        return result, ideal

    def _ideal(
        self, prepared: Prepared, reference: ReferenceStream | None
    ) -> Future[RunResult] | None:
        """The ISA simulator's run for the ideal cycles of an RTL run, if asked for."""
        if not self.backend.runs_rtl or self.request.no_ideal:
            return None
        exe, x, waves = prepared.exe, prepared.x, prepared.waves
        computed = reference.future if reference is not None else None
        if waves is None and self.backend.own_process:
            # the ideal cycles are for the report: on the other core, during the run
            return in_background("ideal", run, exe, x, "isa", reference=computed)
        isa_result = run(exe, x, "isa", reference=computed)
        if waves is not None:  # a large dump is announced with its size
            bits = prepared.wave_bits
            check_window(waves, exe.programs, isa_result.layers, prepared.config, bits)
        ideal_run: Future[RunResult] = Future()
        ideal_run.set_result(isa_result)  # (ran first: its failure is the one said)
        return ideal_run

    def _main_run(
        self, prepared: Prepared, out: Path, reference: ReferenceStream | None
    ) -> RunResult:
        r, exe, x = self.request, prepared.exe, prepared.x
        if prepared.sharded:
            return shards.run(
                exe,
                x,
                r.backend,
                jobs=r.jobs,
                layers=r.layers,
                workdir=out / "sim",
                max_cycles=r.max_cycles,
                waves=prepared.waves,
                name=out.name,
                reference=reference,
                client=self.early,
            )
        return run(
            exe,
            x,
            r.backend,
            workdir=out / "sim",
            max_cycles=r.max_cycles,
            progress=self.notes.progress(exe) if self.backend.runs_rtl else None,
            waves=prepared.waves,
            name=out.name,
            reference=reference.future if reference is not None else None,
        )

    def _run_failed(
        self, prepared: Prepared, out: Path, exc: RunError | SimulationFailed
    ) -> RunFailed:
        """The run's failure, with where its listing and log are and the window to trace."""
        self._written.result()  # the listing the message names
        log = f"  log: {out / 'sim' / 'sim.log'}" if self.backend.writes_log else ""
        retrace = None
        if isinstance(exc, RunError) and exc.cycle is not None and prepared.waves is None:
            window = WaveRequest(cycles=failure_cycles(exc.cycle))
            retrace = Retrace(prepared.exe, prepared.x, out, window)
        return RunFailed(f"{exc}\n  listing: {out / 'listing.txt'}{log}", retrace)

    def _held_out(self, prepared: Prepared, out: Path) -> dict[str, Any] | None:
        """The held-out evaluation of a model trained on a data set (``--eval``)."""
        r = self.request
        if prepared.source is None or r.eval == 0 or r.model is None:
            return None
        exe, source = prepared.exe, prepared.source
        try:
            return evaluate_held_out(
                r.model, exe, source, r.backend, limit=r.eval, workdir=out / "eval"
            )
        except (RunError, SimulationFailed) as exc:
            raise RunFailed(f"held-out evaluation: {exc}") from exc

    def _generate(self, prepared: Prepared, out: Path) -> tuple[dict[str, Any] | None, str | None]:
        """``--generate``: the report's ``generation`` and, if a step was not bit-exact, the
        failure (exit code 1)."""
        if prepared.generation is None or prepared.source is None:
            return None, None
        try:
            run = (prepared.exe, prepared.source, prepared.generation, self.request.backend)
            own = OwnCache.of(self.request.model, prepared.source)
            return generate_in_run(*run, self.notes.stream, out / "generate", prepared.kv, own)
        except (RunError, SimulationFailed) as exc:
            raise RunFailed(f"generation: {exc}") from exc

    def _images(self, prepared: Prepared, out: Path) -> list[dict[str, Any]] | None:
        """Every image of an ``--image`` folder, in one batch."""
        inputs = prepared.inputs
        if len(inputs.xs) <= 1:
            return None
        try:
            exe, source, backend = prepared.exe, prepared.source, self.request.backend
            return evaluate_images(exe, source, inputs, backend, out / "images")
        except (RunError, SimulationFailed) as exc:
            raise RunFailed(f"images of {self.request.image}: {exc}") from exc

    def _report(
        self,
        prepared: Prepared,
        result: RunResult,
        accuracy: dict[str, Any],
        ideal: list[int] | None,
        images: list[dict[str, Any]] | None,
        exe_path: Path,
    ) -> dict[str, Any]:
        r, waves = self.request, prepared.waves
        data = build_report(prepared.exe, result, accuracy, ideal, exe_path, prepared.config)
        data["provenance"] = provenance.collect(
            seed=r.seed,
            input_=provenance.describe_input(r.image, r.seed, prepared.x),
            backend=r.backend,
            started=self.started,
            rtl=self.backend.runs_rtl,
        )
        data["input"] = prepared.inputs.report | ({"images": images} if images is not None else {})
        if prepared.source is not None and prepared.calib is not None:
            data["calibration"] = prepared.calib.report
        if r.layers or (prepared.sharded and waves is not None and waves.layer):
            # only these layers ran, each range from its checkpoint (sim/scaleout/shards.py)
            data["layers_run"] = r.layers or (waves.layer if waves else None)
        return data

    def _failure(
        self,
        prepared: Prepared,
        outcome: Outcome,
        images: list[dict[str, Any]] | None,
        dataset: dict[str, Any] | None,
    ) -> None:
        """What was not bit-exact, first an image's, then a held-out image's, then a layer's."""
        bad_image = next((i for i in images or [] if not i["bit_exact"]), None)
        bad = outcome.result.first_mismatch
        if bad_image is not None:
            outcome.failure = f"image {bad_image['file']} not bit-exact: {bad_image['mismatch']}"
        elif dataset is not None and not dataset["bit_exact"]:
            outcome.failure = f"held-out image not bit-exact: {dataset['first_mismatch']}"
        elif bad is not None:
            start, end = bad.cycle_window
            outcome.failure = (
                f"layer {bad.name} ({bad.op}) is not bit-exact: {bad.mismatch}; its cycles "
                f"{start}..{end} (instructions {bad.insn_range[0]}..{bad.insn_range[1] - 1})"
            )
            if prepared.waves is None:
                window = WaveRequest(layer=bad.name)
                layers = outcome.result.layers
                outcome.retrace = Retrace(prepared.exe, prepared.x, outcome.out, window, layers)

    def conclude(self, outcome: Outcome) -> list[str]:
        """The hooks' checks of the report (their lines; a failed one is
        :class:`sim.backends.hooks.HookCheckFailed`), then the ``latest`` link and pruning of a run
        in
        ``build/runs`` (``outcome.removed``)."""
        lines = hooks.check_report(outcome.report)
        if self.request.out is None:
            point_latest(RUNS_ROOT / "latest", outcome.out)
            outcome.runs_root = RUNS_ROOT
            outcome.removed = prune(RUNS_ROOT, outcome.keep)
        return lines

    def check(
        self,
        exe: Executable,
        x: np.ndarray,
        *,
        workdir: Path | None = None,
        fp32_model: onnx.ModelProto | str | Path | None = None,
        path: Path | None = None,
    ) -> tuple[RunResult, dict[str, Any]]:
        """The API's run: ``exe`` on ``x``, the accuracy vs ``fp32_model`` if given, the report
        and the hooks' checks of it (:class:`sim.backends.hooks.HookCheckFailed`)."""
        result = run(exe, x, self.request.backend, workdir=workdir)
        accuracy: dict[str, Any] = {}
        if fp32_model is not None:
            accuracy = api_accuracy(fp32_model, exe.reference, x)
        report = build_report(exe, result, accuracy, None, path, exe.config)
        hooks.check_report(report)  # user hooks' checks (sim/backends/hooks.py): HookCheckFailed
        return result, report


def build_report(
    exe: Executable,
    result: RunResult,
    accuracy: dict[str, Any],
    ideal: list[int] | None,
    path: Path | None,
    config: AccelConfig,
) -> dict[str, Any]:
    """The report of ``result`` (:mod:`sim.app.report`), with each layer's counters."""
    counters = [layer.counters for layer in result.layers]
    bounds = {
        name: layer_bounds
        for program in exe.programs
        for name, layer_bounds in program_bounds(program, config).items()
    }
    return reports.build(
        exe.model, config, result, accuracy, counters, ideal, executable=path, bounds=bounds
    )

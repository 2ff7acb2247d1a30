"""Layer shards and layer ranges: run a network's layers from their checkpoints, in parallel.

``JOBS=N`` (:func:`plan`) cuts the device layers into ``N`` contiguous shards of balanced
estimated cycles (the compiler's per-layer estimate, plus the loads of the warm-up layer a shard
that starts inside a program runs first; :mod:`sim.runtime.checkpoint`). ``LAYERS=name`` or ``a:b``
(:func:`select`) runs only those layers. :func:`run_pieces` runs the shards - on Dask
(:mod:`sim.scaleout.cluster`) when there is more than one, else in this process - and merges them
into one
:class:`sim.runtime.run.RunResult`, the layers in program order with the cycle windows the
sequential run
has; host steps between device programs run here, on the reference's tensors.

Every piece starts from the reference's DRAM state, so each layer is checked in isolation: a
mismatch names its own layer, never a consequence of an earlier one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from arch.executable import DeviceProgram, Executable
from sim import knobs
from sim.backends.base import DeviceResult, RunOptions
from sim.backends.registry import get_backend
from sim.runtime import checkpoint
from sim.runtime.checkpoint import Piece
from sim.runtime.execute import (
    Finished,
    ProgramRun,
    accumulate,
    check_range,
    finish,
    graph_outputs,
    host_layers,
    prepare,
)
from sim.runtime.reference_stream import ReferenceStream
from sim.runtime.results import LayerResult, RunResult
from sim.runtime.run import traced_capture
from sim.scaleout import cluster, shard_timeline
from sim.waves.window import WaveRequest


class ShardError(ValueError):
    """A bad ``JOBS`` or ``LAYERS`` value; the message says what is supported (exit code 2)."""


@dataclass(frozen=True)
class Shard:
    """One worker's job: pieces run in order in one simulator process, and their estimated
    cycles (warm-up layers included)."""

    pieces: tuple[Piece, ...]
    estimate: int


def _positions(exe: Executable) -> list[tuple[int, int]]:
    """(program, layer) of every device layer, in execution order."""
    return [(p, n) for p, program in enumerate(exe.programs) for n in range(len(program.layers))]


def layer_estimate(exe: Executable, program: int, layer: int) -> int:
    """The compiler's cycle estimate of a layer (its MACs on the array if it has none)."""
    entry = exe.programs[program].layers[layer]
    if entry.tiling and entry.tiling.get("estimate"):
        return int(entry.tiling["estimate"])
    return max(1, entry.macs // exe.config.macs_per_cycle)


def _pieces(exe: Executable, lo: int, hi: int) -> tuple[Piece, ...]:
    """Device layers ``[lo, hi)`` (execution order) as one piece per program they touch."""
    positions = _positions(exe)[lo:hi]
    pieces = []
    for program in dict.fromkeys(p for p, _n in positions):
        numbers = [n for p, n in positions if p == program]
        pieces.append(Piece(program, numbers[0], numbers[-1] + 1))
    return tuple(pieces)


def _cost(exe: Executable, costs: list[int], warm: list[int], lo: int, hi: int) -> int:
    """Layers ``[lo, hi)``'s costs, plus their warm-up layer's (``warm``: each layer's loads,
    all of a warm-up layer that runs)."""
    first = _pieces(exe, lo, hi)[0]
    return sum(costs[lo:hi]) + (warm[lo - 1] if first.start < first.first else 0)


def plan(
    exe: Executable,
    jobs: int,
    lo: int = 0,
    hi: int | None = None,
    costs: list[int] | None = None,
) -> list[Shard]:
    """Device layers ``[lo, hi)`` in at most ``jobs`` contiguous shards whose largest estimated
    cost (warm-up included) is smallest (dynamic programming over the cut points). ``costs``:
    each device layer's cycles (default: the compiler's estimates)."""
    positions = _positions(exe)
    hi = len(positions) if hi is None else hi
    costs = costs or [layer_estimate(exe, p, n) for p, n in positions]
    warm = [checkpoint.load_cycles(exe, p, n) for p, n in positions]
    count = hi - lo
    jobs = min(jobs, count)
    # best[k][i]: the smallest largest cost of layers [lo, lo + i) in k shards; cut[k][i]: the
    # start of the last shard.
    inf = float("inf")
    best = [[inf] * (count + 1) for _ in range(jobs + 1)]
    cut = [[0] * (count + 1) for _ in range(jobs + 1)]
    best[0][0] = 0
    for k in range(1, jobs + 1):
        for i in range(k, count + 1):
            for j in range(k - 1, i):
                value = max(best[k - 1][j], _cost(exe, costs, warm, lo + j, lo + i))
                if value < best[k][i]:
                    best[k][i], cut[k][i] = value, j
    bounds, i = [], count
    for k in range(jobs, 0, -1):
        bounds.append((cut[k][i], i))
        i = cut[k][i]
    return [
        Shard(_pieces(exe, lo + a, lo + b), _cost(exe, costs, warm, lo + a, lo + b))
        for a, b in reversed(bounds)
    ]


def select(exe: Executable, spec: str) -> tuple[int, int]:
    """``LAYERS``: a layer name, ``a:b`` of names (both included) or of indices into the device
    layers (``b`` excluded, as in a Python slice; either may be empty) -> ``[lo, hi)``."""
    names = [layer.name for layer in exe.layers]
    listed = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
    supported = (
        f"use a layer name, a:b of names, or a:b of indices in 0..{len(names)} "
        f"(layers: {listed}; see the listing)"
    )
    if spec in names:
        at = names.index(spec)
        return at, at + 1
    if spec.count(":") != 1:
        close = difflib.get_close_matches(spec, names, n=3, cutoff=0.5)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ShardError(f"LAYERS {spec!r} is not a layer of this model{hint}; {supported}")
    a, b = spec.split(":")
    if (a == "" or a.isdigit()) and (b == "" or b.isdigit()):
        lo, hi = int(a or 0), int(b) if b else len(names)
    else:
        unknown = [n for n in (a, b) if n not in names]
        if unknown:
            raise ShardError(f"LAYERS {spec!r}: {unknown[0]!r} is not a layer; {supported}")
        lo, hi = names.index(a), names.index(b) + 1
    if not 0 <= lo < hi <= len(names):
        raise ShardError(f"LAYERS {spec!r} selects no layers; {supported}")
    return lo, hi


def check_jobs(jobs: int) -> None:
    if jobs < 1:
        raise ShardError(
            f"JOBS (--jobs) must be a positive number of shards, not {jobs} "
            "(1: the sequential run; N: N shards in parallel)"
        )


def check_request(
    exe: Executable, jobs: int, layers: str | None, waves: WaveRequest | None, backend: str
) -> bool:
    """Check ``JOBS``, ``LAYERS`` and a waveform request together; whether the run is one of
    this module's (shards, a layer range, or ``WAVE_LAYER``'s one-layer run on the RTL)."""
    check_jobs(jobs)
    if layers is not None:
        select(exe, layers)
    if waves is not None:
        if jobs > 1:
            raise ShardError(
                "a waveform traces one run, not JOBS shards; drop JOBS "
                "(WAVE_LAYER alone runs only its layer, from its checkpoint)"
            )
        if layers is not None:
            raise ShardError("WAVE_* and LAYERS together: use WAVE_LAYER=<name> alone")
        return waves.layer is not None and get_backend(backend).traces
    return jobs > 1 or layers is not None


#: Failures of the distributed engine (exit code 2 for a cluster that cannot be reached, else 3).
CLUSTER_ERRORS = (cluster.ClusterError, cluster.BuildMismatch, cluster.WorkerFailed)


#: Runs a shard's device runs on a worker: (shard index, prepared runs) -> a future of results.
Submit = Callable[[int, list[ProgramRun]], Any]


def run_pieces(
    exe: Executable,
    x: np.ndarray,
    backend: str,
    shards: list[Shard],
    submit: Submit,
    *,
    max_cycles: int = 400_000_000,
    log: Callable[[str], None] | None = None,
    reference: ReferenceStream | None = None,
) -> RunResult:
    """Run ``shards`` (from :func:`plan`, or one :func:`select` range) through ``submit`` and
    merge them; host steps whose output lies inside the run are checked here. ``reference``:
    the stream computing the reference's tensors, else started here."""
    log = log or (lambda text: print(text, file=sys.stderr, flush=True))
    started = time.perf_counter()
    stream = reference or ReferenceStream(exe, x)
    engine = get_backend(backend)
    futures: dict[int, Any] = {}
    prepared: dict[int, list[ProgramRun]] = {}
    # Each shard starts as soon as the reference has computed the tensors it starts from: one
    # that needs only the input at once, the others while the reference goes on.
    for index, shard in enumerate(shards):
        values = stream.wait(name for p in shard.pieces for name in checkpoint.needs(exe, p))
        prepared[index] = [prepare(exe, p, values, max_cycles, sharded=True) for p in shard.pieces]
        futures[index] = submit(index, prepared[index])
    expected = stream.result()

    done: dict[Piece, Finished] = {}
    for index, shard in enumerate(shards):
        results: list[DeviceResult] = futures[index].result()
        for item, device in zip(prepared[index], results, strict=True):
            done[item.piece] = finish(exe, item, device, stream, engine)
        cycles = sum(layer.cycles for p in shard.pieces for layer in done[p].layers)
        seconds = sum(done[p].device.sim_seconds for p in shard.pieces)
        log(
            f"  shard {index + 1}/{len(shards)} done: "
            + ", ".join(p.label(exe) for p in shard.pieces)
            + f" ({cycles:,} cycles, {seconds:.1f} s simulated)"
        )
    whole = sum(len(p.layers) for p in exe.programs) == sum(
        p.stop - p.first for shard in shards for p in shard.pieces
    )
    local = shard_timeline.local_starts(done)
    result = _merge(exe, shards, done, expected, backend, whole)
    result.timeline = shard_timeline.merge(exe, done, local)
    result.sim_wall_s = time.perf_counter() - started
    return result


def _merge(
    exe: Executable,
    shards: list[Shard],
    done: dict[Piece, Finished],
    reference: dict[str, np.ndarray],
    backend: str,
    whole: bool,
) -> RunResult:
    """The pieces' layers in program order, with cycle windows as the sequential run has them
    (each program's layers back to back, its tail after its last layer); host steps inside the
    run, on the reference's tensors."""
    pieces = sorted(done, key=lambda p: (p.program, p.first))
    first, last = pieces[0], pieces[-1]
    layers: list[LayerResult] = []
    counters: dict[str, Any] = {}
    values = dict(reference)
    outputs: dict[str, np.ndarray] = {}
    cycles = 0
    index = 0  # device programs before the step
    for step in exe.steps:
        if not isinstance(step, DeviceProgram):
            if whole or first.program < index <= last.program:
                layers += host_layers(exe, step, values, reference, cycles)
                outputs.update({name: values[name] for name in step.outputs})
            continue
        index += 1
        for piece in (p for p in pieces if p.program == index - 1):
            for layer in done[piece].layers:
                layer.cycle_window = (cycles, cycles + layer.cycles)
                cycles += layer.cycles
                layers.append(layer)
            if piece.stop == len(step.layers):
                cycles += done[piece].tail
            accumulate(counters, done[piece].counters)
            outputs.update(done[piece].outputs)
    result = RunResult(backend, layers, cycles, 0.0, graph_outputs(exe, outputs), counters)
    result.shards = [
        {
            "layers": [p.label(exe) for p in shard.pieces],
            "estimate": shard.estimate,
            "cycles": sum(layer.cycles for p in shard.pieces for layer in done[p].layers),
            "sim_s": round(sum(done[p].device.sim_seconds for p in shard.pieces), 3),
        }
        for shard in shards
    ]
    return result


def workdir_of(root: Path | None, index: int) -> Path | None:
    return root / f"shard{index}" if root is not None else None


def run(
    exe: Executable,
    x: np.ndarray,
    backend: str,
    *,
    jobs: int = 1,
    layers: str | None = None,
    workdir: Path | None = None,
    max_cycles: int = 400_000_000,
    waves: WaveRequest | None = None,
    name: str = "run",
    log: Callable[[str], None] | None = None,
    reference: ReferenceStream | None = None,
    client: cluster.EarlyClient | None = None,
) -> RunResult:
    """Run ``exe`` in ``jobs`` shards (on Dask when more than one, or when ``DASK_SCHEDULER``
    is set), or only the ``layers`` range from its checkpoint, and check every layer. ``waves``
    with a ``layer`` traces that layer of a one-layer run (rtl). ``reference``: the integer
    reference of ``x`` being computed (else computed here); ``client``: a Dask client started
    earlier (else one is opened here)."""
    check_jobs(jobs)
    if waves is not None and waves.layer is not None and layers is None:
        layers = waves.layer
    lo, hi = select(exe, layers) if layers else (0, len(exe.layers))
    shards = plan(exe, jobs, lo, hi)
    root = Path(workdir or tempfile.mkdtemp(prefix="cosim-shards-"))
    if waves is not None:
        return _traced(exe, x, backend, shards, root, max_cycles, waves, name, log)
    # The reference runs (in a thread) while the cluster starts: the shards after the first
    # are sent once it has computed the tensors they start from.
    stream = reference or ReferenceStream(exe, x)
    with _stopped_on_error(stream, owned=stream is not reference):
        key = cluster.build_key(backend, exe.config)  # built once here, reused by the workers
        config_json = exe.config.to_json()
        if len(shards) == 1 and not knobs.SCHEDULER.is_set():
            with ThreadPoolExecutor(max_workers=1) as pool:

                def local(index: int, prepared: list[ProgramRun]) -> Any:
                    runs = [p.run for p in prepared]
                    return pool.submit(
                        cluster.run_device, backend, config_json, runs, None, str(root)
                    )

                return run_pieces(
                    exe, x, backend, shards, local, max_cycles=max_cycles, log=log, reference=stream
                )
        opened = (
            contextlib.nullcontext(client.client()) if client else cluster.open_client(len(shards))
        )
        with opened as dask_client:

            def remote(index: int, prepared: list[ProgramRun]) -> Any:
                runs = [p.run for p in prepared]
                with warnings.catch_warnings():  # DRAM images are large task arguments on purpose
                    warnings.simplefilter("ignore", UserWarning)
                    return cluster.Task(
                        f"shard {index + 1}/{len(shards)}",
                        dask_client.submit(
                            cluster.run_device,
                            backend,
                            config_json,
                            runs,
                            key,
                            str(root / f"shard{index}"),
                            pure=False,
                            key=f"shard{index}-{uuid.uuid4().hex[:8]}",
                        ),
                    )

            return run_pieces(
                exe, x, backend, shards, remote, max_cycles=max_cycles, log=log, reference=stream
            )


@contextlib.contextmanager
def _stopped_on_error(stream: ReferenceStream, owned: bool) -> Iterator[None]:
    """Stop ``stream`` if the block fails and it is ours: no thread is left in a library's
    native code (onnxruntime host ops) at exit."""
    try:
        yield
    except BaseException:
        if owned:
            stream.stop()
        raise


def _traced(
    exe: Executable,
    x: np.ndarray,
    backend: str,
    shards: list[Shard],
    root: Path,
    max_cycles: int,
    request: WaveRequest,
    name: str,
    log: Callable[[str], None] | None,
) -> RunResult:
    """A one-piece run with a waveform of its layer (the window's instruction indices are
    counted from the piece's first instruction, as the fetch unit's are)."""
    pieces = [p for shard in shards for p in shard.pieces]
    if len(pieces) != 1 or pieces[0].stop - pieces[0].first != 1 or request.layer is None:
        raise ShardError("a waveform of a layer run traces one layer (WAVE_LAYER), without JOBS")
    [piece] = pieces
    engine = get_backend(backend)
    if not engine.traces:
        raise ShardError(f"waveforms need the rtl backend, not {backend!r}")
    capture = traced_capture(request, exe, engine, name)
    offset = checkpoint.first_insn(exe, piece)
    window = dataclasses.replace(
        capture.window, start=capture.window.start - offset, stop=capture.window.stop - offset
    )
    capture = dataclasses.replace(capture, window=window)
    entry: dict[str, Any] = {}

    def traced(index: int, prepared: list[ProgramRun]) -> Any:
        options = RunOptions(workdir=root, trace=capture.trace, timeline=True)
        future: Future = Future()
        results = engine.run(exe.config, [p.run for p in prepared], options)
        future.set_result(results)
        local, _counters, _outputs = check_range(exe, piece, results[0], reference.result())
        rtl_dir = engine.rtl_dir(exe.config)
        assert rtl_dir is not None
        entry.update(capture.finish(results[0], local, rtl_dir))
        return future

    reference = ReferenceStream(exe, x)
    result = run_pieces(
        exe, x, backend, shards, traced, max_cycles=max_cycles, log=log, reference=reference
    )
    result.waves = entry
    return result

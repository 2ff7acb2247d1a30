"""The step loop: an executable's steps in order, each device program on a backend and each host
step here, every layer checked bit for bit against the integer reference.

A device program runs in two halves: :func:`prepare` builds its DRAM image (the whole program,
or a layer range from its checkpoint, :mod:`sim.runtime.checkpoint`) with guard bands around the
memory map, and :func:`finish` turns the backend's result into the range's checked layers, its
counters and the program outputs it produced. :func:`run_steps` walks the steps for one input
(:func:`sim.runtime.run.run`) or for many in one batch (:func:`sim.runtime.batch.run_batch`); the
shards
(:mod:`sim.scaleout.shards`) prepare and finish their pieces with the same two functions.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from arch import isa
from arch.executable import DeviceProgram, Executable, HostStep
from arch.reference import dequantize
from sim.backends.base import Backend, DeviceResult, DeviceRun, RunOptions
from sim.runtime import checkpoint
from sim.runtime.checkpoint import Piece
from sim.runtime.guard import Guard, guard_image
from sim.runtime.host import read_tensor, run_host_step, tensor_addresses
from sim.runtime.results import LayerResult, RunError
from sim.runtime.timeline import ProgramTimeline
from sim.waves.capture import Capture
from sim.waves.size import record as record_rate

__all__ = [
    "Finished",
    "Lane",
    "ProgramRun",
    "Reference",
    "accumulate",
    "check_layers",
    "check_range",
    "finish",
    "graph_outputs",
    "host_layers",
    "prepare",
    "run_steps",
    "whole",
]


class Reference(Protocol):
    """The integer reference's tensors, maybe still being computed (a future, or
    :class:`sim.runtime.reference_stream.ReferenceStream`): ``result()`` waits for them."""

    def result(self) -> dict[str, np.ndarray]: ...


@dataclass
class ProgramRun:
    """A device run of layers ``piece`` of a program, with the guard bands of its image.
    ``sharded``: a piece of a sharded run (its errors are named after the shard)."""

    piece: Piece
    run: DeviceRun
    guard: Guard
    sharded: bool = False


@dataclass
class Finished:
    """A finished program run: its checked layers (cycle windows from the run's start), the
    counters it adds to its program's total (from its PERF records), the program outputs it
    produced, and the backend's result."""

    layers: list[LayerResult]
    counters: dict[str, int]
    outputs: dict[str, np.ndarray]
    device: DeviceResult

    @property
    def tail(self) -> int:
        """Cycles after the last PERF record (the program's end, when the range ends it)."""
        return self.counters["cycles"] - sum(layer.cycles for layer in self.layers)


def whole(exe: Executable, program: DeviceProgram) -> Piece:
    """Every layer of ``program``."""
    return Piece(exe.programs.index(program), 0, len(program.layers))


def prepare(
    exe: Executable,
    piece: Piece,
    values: dict[str, np.ndarray],
    max_cycles: int,
    *,
    records: bool = True,
    sharded: bool = False,
) -> ProgramRun:
    """The device run of ``piece`` from ``values`` (the program's inputs, and the reference's
    outputs of the layers before the range), canaries between the regions of the memory map
    and after it (:mod:`sim.runtime.guard`). ``records``: tell the backend where the PERF records
    are
    (its progress reports)."""
    program = exe.programs[piece.program]
    image, launch = checkpoint.image(exe, piece, values)
    regions = [(r.name, r.addr, r.nbytes) for r in program.regions]
    image, guard = guard_image(image, regions)
    run = DeviceRun(
        image,
        launch,
        max_cycles=max_cycles,
        dump_size=guard.size,
        perf_records=(program.perf_base, len(program.layers)) if records else None,
    )
    return ProgramRun(piece, run, guard, sharded)


def finish(
    exe: Executable,
    prepared: ProgramRun,
    result: DeviceResult,
    reference: Reference,
    backend: Backend,
    *,
    context: str | None = None,
    waveform: Path | None = None,
) -> Finished:
    """Check how the run ended (a stop or a write outside the memory map is a
    :class:`RunError`; ``context`` starts its message, ``waveform`` is named if it was
    written), then its layers against ``reference`` (waited for only then)."""
    if result.error or result.timeout:
        raise _stopped(exe, prepared, result, backend, context, waveform)
    outside = prepared.guard.check(result.dram, result.stray_writes)
    if outside is not None:
        where = _label(exe, prepared)
        raise RunError(
            f"{context or backend.name}: {where} wrote outside its memory map: {outside}"
        )
    piece, every = prepared.piece, not prepared.sharded
    expected = reference.result()
    layers, counters, outputs = check_range(exe, piece, result, expected, all_outputs=every)
    return Finished(layers, counters, outputs, result)


def _label(exe: Executable, prepared: ProgramRun) -> str:
    if prepared.sharded:
        return f"shard {prepared.piece.label(exe)}"
    return exe.programs[prepared.piece.program].name


def _stopped(
    exe: Executable,
    prepared: ProgramRun,
    result: DeviceResult,
    backend: Backend,
    context: str | None,
    waveform: Path | None,
) -> RunError:
    """The error of a run that stopped with an error or timed out, naming its layer."""
    what = "timed out" if result.timeout else f"stopped with {result.error_code}"
    where = checkpoint.stopped_layer(exe, prepared.piece, result.error_index)
    if prepared.sharded:
        return RunError(f"{backend.name}: {_label(exe, prepared)} {what} ({where})")
    prefix = f"{context}: " if context else ""
    if not backend.runs_rtl:
        return RunError(f"{prefix}ISA simulator stopped: {result.message} ({where})")
    dumped = f"; waveform: {waveform}" if waveform is not None and waveform.exists() else ""
    return RunError(
        f"{prefix}RTL ({backend.name} backend) {what} at instruction {result.error_index} "
        f"({where}) after {result.cycles} cycles{dumped}",
        cycle=result.cycles,
    )


def _perf_records(program: DeviceProgram, dram: np.ndarray) -> list[dict[str, int]]:
    size = isa.PERF_RECORD.nbytes
    records = []
    for layer in program.layers:
        at = program.perf_base + layer.perf_index * size
        word = int.from_bytes(dram[at : at + size].tobytes(), "little")
        records.append(isa.decode_record(isa.PERF_RECORD, word))
    return records


def _compare(name: str, got: np.ndarray, expected: np.ndarray) -> str | None:
    if got.shape == expected.shape and np.array_equal(got, expected):
        return None
    if got.shape != expected.shape:
        return f"{name}: shape {got.shape}, expected {expected.shape}"
    bad = np.argwhere(got != expected)
    where = tuple(int(i) for i in bad[0])
    return (
        f"{name}: {len(bad)} of {got.size} values differ; first at index {where}: "
        f"expected {int(expected[where])}, got {int(got[where])}"
    )


def _tiling(tiling: dict[str, int] | None) -> str:
    if not tiling:
        return ""
    walk = " conv" if tiling.get("input_reuse") else ""  # CONV on input tiles loaded once
    return f"rows={tiling['rows_per_tile']} n={tiling['n_blocks']} k={tiling['k_group']}{walk}"


def check_layers(
    exe: Executable, program: DeviceProgram, dram: np.ndarray, reference: dict[str, np.ndarray]
) -> list[LayerResult]:
    """Every layer of ``program``: its output in ``dram`` against the reference, and its
    counters from its PERF record (deltas from the previous record)."""
    records = _perf_records(program, dram)
    layers: list[LayerResult] = []
    previous: dict[str, int] = dict.fromkeys(records[0], 0) if records else {}
    for layer, record in zip(program.layers, records, strict=True):
        shape = exe.reference.tensors[layer.output].shape
        got = read_tensor(program.tensors[layer.output], dram, shape)
        mismatch = _compare(layer.output, got, reference[layer.output])
        address = None
        if mismatch is not None and got.shape == reference[layer.output].shape:
            first = tuple(np.argwhere(got != reference[layer.output])[0])
            address = int(tensor_addresses(program.tensors[layer.output], shape)[first])
        layers.append(
            LayerResult(
                name=layer.name,
                op=layer.op,
                macs=layer.macs,
                cycles=record["cycles"] - previous["cycles"],
                cycle_window=(previous["cycles"], record["cycles"]),
                dram_read_bytes=record["dram_read_bytes"] - previous["dram_read_bytes"],
                dram_write_bytes=record["dram_write_bytes"] - previous["dram_write_bytes"],
                bit_exact=mismatch is None,
                mismatch=mismatch,
                insn_range=layer.insn_range,
                tiling=_tiling(layer.tiling),
                counters={
                    k: v - previous[k] for k, v in record.items() if k not in ("tag", "reserved")
                },
                mismatch_addr=address,
            )
        )
        previous = record
    return layers


def check_range(
    exe: Executable,
    piece: Piece,
    result: DeviceResult,
    reference: dict[str, np.ndarray],
    *,
    all_outputs: bool = False,
) -> tuple[list[LayerResult], dict[str, int], dict[str, np.ndarray]]:
    """The piece's layers checked against the reference (cycles and counters from its PERF
    records, the warm-up layer's record as the first window's start); the counters the piece
    adds to its program's total (up to END if it ends the program, else up to its last PERF
    record); and the program outputs its layers produced (``all_outputs``: every one, views
    of several layers' outputs too - a run of the whole program)."""
    program = exe.programs[piece.program]
    ran = dataclasses.replace(program, layers=program.layers[piece.start : piece.stop])
    layers = check_layers(exe, ran, result.dram, reference)[piece.first - piece.start :]
    records = _perf_records(ran, result.dram)
    keys = [k for k in records[-1] if k not in ("tag", "reserved")]
    end = records[-1]
    if piece.stop == len(program.layers):  # up to END: the counters the backend read at the end
        end = {k: result.perf.get(k, end[k]) for k in keys}
    begin = records[0] if piece.first > piece.start else dict.fromkeys(keys, 0)
    counters = {k: int(end[k]) - int(begin[k]) for k in keys}
    produced = {layer.output for layer in program.layers[piece.first : piece.stop]}
    outputs = {
        name: read_tensor(program.tensors[name], result.dram, exe.reference.tensors[name].shape)
        for name in program.outputs
        if all_outputs or name in produced
    }
    return layers, counters, outputs


def host_layers(
    exe: Executable,
    step: HostStep,
    values: dict[str, np.ndarray],
    reference: dict[str, np.ndarray],
    cycles: int,
) -> list[LayerResult]:
    """Run a host step and check each of its outputs against the reference's: one layer
    result per output (its node's name and ONNX ops; the step's time on the first)."""
    started = time.perf_counter()
    run_host_step(step, values, exe.reference)
    seconds = time.perf_counter() - started
    layers: list[LayerResult] = []
    for output in step.outputs:
        node = exe.reference.producer(output)
        assert node is not None
        got, want = values[output], reference[output]
        exact = got.shape == want.shape and np.array_equal(got, want, equal_nan=True)
        ops = node.attrs.get("onnx_ops", (node.op,))
        layers.append(
            LayerResult(
                name=node.name,
                op="host:" + "+".join(ops) if node.op == "host" else node.op,
                macs=int(node.attrs.get("macs", 0)),
                cycles=0,
                cycle_window=(cycles, cycles),
                dram_read_bytes=0,
                dram_write_bytes=0,
                bit_exact=exact,
                mismatch=None if exact else _compare(output, got, want),
                device="host",
                host_s=seconds if not layers else 0.0,
                note=step.reason,
            )
        )
    return layers


def graph_outputs(exe: Executable, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The graph outputs among ``values``, int8 ones dequantized to fp32."""
    outputs = {}
    for name in exe.reference.outputs:
        if name in values:
            value, t = values[name], exe.reference.tensors[name]
            outputs[name] = (
                dequantize(value, t.scale or 1.0, t.zero_point) if value.dtype == np.int8 else value
            )
    return outputs


def accumulate(total: dict[str, Any], counters: dict[str, Any]) -> None:
    """Add a program's counters (numbers, or dicts of numbers) into the run's."""
    for key, value in counters.items():
        if isinstance(value, dict):
            accumulate(total.setdefault(key, {}), value)
        else:
            total[key] = total.get(key, 0) + value


@dataclass
class Lane:
    """One input on its way through the steps: its tensors so far (the quantized input at
    first), its reference (being computed: ``result()`` waits), the words its errors start
    with (``input 3`` in a batch), and what its steps gave."""

    values: dict[str, np.ndarray]
    reference: Reference
    context: str | None = None
    layers: list[LayerResult] = field(default_factory=list)
    cycles: int = 0
    sim_seconds: float = 0.0
    counters: dict[str, Any] = field(default_factory=dict)
    hooks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # sim/backends/hooks.py
    #: per program: the testbench DRAM's stall profile and what it did (RTL backends)
    dram_stall: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[ProgramTimeline] = field(default_factory=list)  # backends that record spans

    def add(self, program: DeviceProgram, done: Finished) -> None:
        """A finished program: its layers after the earlier ones, its outputs, counters and
        hook results (:mod:`sim.backends.hooks`)."""
        result = done.device
        self.values.update(done.outputs)
        for layer in done.layers:  # a later program continues the run's cycle count
            first, last = layer.cycle_window
            layer.cycle_window = (first + self.cycles, last + self.cycles)
        records = {layer.perf_index: layer.name for layer in program.layers}
        layer_of_record = [records.get(n) for n in range(max(records, default=-1) + 1)]
        for module, value in result.hooks.items():
            entry = {"program": program.name, "first_cycle": self.cycles}
            entry |= {"layer_of_record": layer_of_record, "result": value}
            self.hooks.setdefault(module, []).append(entry)
        self.layers += done.layers
        if result.dram_stall:
            self.dram_stall.append({"program": program.name, **result.dram_stall})
        if result.spans:
            self.timeline.append(ProgramTimeline(program, result.spans, result.tokens, self.cycles))
        self.cycles += result.cycles
        self.sim_seconds += result.sim_seconds
        accumulate(self.counters, result.perf)


def run_steps(
    exe: Executable,
    lanes: Sequence[Lane],
    backend: Backend,
    *,
    max_cycles: int,
    workdir: Path | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    capture: Capture | None = None,
    records: bool = True,
) -> dict[str, Any] | None:
    """Every step of ``exe`` for every lane, each device program once for all lanes in one
    batch of the backend; returns the waveform entry of ``capture`` (one lane)."""
    entry: dict[str, Any] | None = None
    for step in exe.steps:
        if not isinstance(step, DeviceProgram):
            for lane in lanes:
                lane.layers += host_layers(
                    exe, step, lane.values, lane.reference.result(), lane.cycles
                )
            continue
        traced = capture is not None and capture.program is step
        options = RunOptions(
            workdir=workdir / step.name if workdir and len(exe.programs) > 1 else workdir,
            progress=progress,
            trace=capture.trace if traced and capture is not None else None,
            timeline=True,
        )
        piece = whole(exe, step)
        runs = [prepare(exe, piece, lane.values, max_cycles, records=records) for lane in lanes]
        results = backend.run(exe.config, [r.run for r in runs], options)
        dump = capture.dump if traced and capture is not None else None
        for lane, prepared, result in zip(lanes, runs, results, strict=True):
            reference, context = lane.reference, lane.context
            done = finish(exe, prepared, result, reference, backend, context=context, waveform=dump)
            if traced and capture is not None:
                entry = _traced(exe, capture, backend, done)
            lane.add(step, done)
    return entry


def _traced(exe: Executable, capture: Capture, backend: Backend, done: Finished) -> dict[str, Any]:
    """The waveform entry of the traced program (and its bytes per cycle, for the next
    estimate of a dump's size)."""
    rtl_dir = backend.rtl_dir(exe.config)
    assert rtl_dir is not None  # a tracing backend runs RTL
    entry = capture.finish(done.device, done.layers, rtl_dir)
    if entry.get("bytes"):
        first, last = entry["traced_cycles"]
        fmt, where = capture.request.fmt, capture.request.directory
        record_rate(
            where,
            exe.config.name,
            fmt,
            entry["bytes"],
            last - first,
            capture.bits,
            capture.request.signals,
        )
    return entry

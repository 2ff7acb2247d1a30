"""Run an executable on a backend and check it layer by layer.

:func:`run` quantizes the input, runs the executable's steps in order - each device program on
the chosen backend (:mod:`sim.backends.registry`), each host step on the host - reads every
layer's output back from DRAM and compares it bit for bit with the integer reference evaluated
on the executable's reference graph, and reads the per-layer PERF records the program wrote.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from arch import isa
from arch.executable import DeviceProgram, Executable, HostStep, check_images
from arch.reference import dequantize, evaluate, quantize_input
from sim.backends.base import DeviceResult, DeviceRun, RunOptions
from sim.backends.registry import NAMES, UnknownBackend, get_backend
from sim.guard import guard_image
from sim.host import device_image, read_tensor, run_host_step, tensor_addresses
from sim.inputs import check_input
from sim.waves.capture import start as start_capture
from sim.waves.size import record as record_rate
from sim.waves.window import WaveRequest

BACKENDS = NAMES


class RunError(RuntimeError):
    """The accelerator stopped with an error, timed out, or a backend is unknown.
    ``cycle`` is the cycle it stopped at (RTL runs), for a failure dump."""

    def __init__(self, message: str, cycle: int | None = None) -> None:
        super().__init__(message)
        self.cycle = cycle


@dataclass
class LayerResult:
    name: str
    op: str
    macs: int
    cycles: int
    cycle_window: tuple[int, int]
    dram_read_bytes: int
    dram_write_bytes: int
    bit_exact: bool
    mismatch: str | None = None
    insn_range: tuple[int, int] = (0, 0)
    tiling: str = ""
    counters: dict[str, int] = field(default_factory=dict)  # counter deltas over the layer
    device: str = "accel"  # or "host"
    host_s: float = 0.0  # wall time of a host step
    note: str = ""  # a host step's reason for being there
    mismatch_addr: int | None = None  # DRAM byte of the first differing value (accel layers)

    def utilization(self, macs_per_cycle: int) -> float:
        return self.macs / (macs_per_cycle * self.cycles) if self.cycles else 0.0


@dataclass
class RunResult:
    backend: str
    layers: list[LayerResult]
    cycles: int
    sim_wall_s: float
    outputs: dict[str, np.ndarray]  # graph outputs (fp32: dequantized, or a host step's)
    counters: dict[str, Any] = field(default_factory=dict)
    ideal_cycles: int | None = None
    waves: dict[str, Any] | None = None  # the traced window and its files (sim/waves/)
    shards: list[dict[str, Any]] = field(default_factory=list)  # sharded runs (sim/shards.py)
    hooks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # sim/hooks.py

    @property
    def bit_exact(self) -> bool:
        return all(layer.bit_exact for layer in self.layers)

    @property
    def first_mismatch(self) -> LayerResult | None:
        return next((layer for layer in self.layers if not layer.bit_exact), None)


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


def reference_values(exe: Executable, x: np.ndarray) -> dict[str, np.ndarray]:
    """Every tensor of the reference graph from the integer reference ops, for fp32 input."""
    return evaluate(exe.reference, quantize_input(x, exe.input.scale or 1.0, exe.input.zero_point))


def _stopped(program: DeviceProgram, result: DeviceResult, backend: str, dumped: str) -> RunError:
    layer = program.layer_of(result.error_index)
    where = f"layer {layer.name}" if layer else "outside any layer"
    if backend == "isa":
        return RunError(f"ISA simulator stopped: {result.message} ({where})")
    what = "timed out" if result.timeout else f"stopped with {result.error_code}"
    return RunError(
        f"RTL ({backend} backend) {what} at instruction {result.error_index} ({where}) "
        f"after {result.cycles} cycles{dumped}",
        cycle=result.cycles,
    )


def run(
    exe: Executable,
    x: np.ndarray,
    backend: str = "isa",
    *,
    workdir: Path | None = None,
    max_cycles: int = 400_000_000,
    progress: Callable[[dict[str, Any]], None] | None = None,
    waves: WaveRequest | None = None,
    name: str = "run",
    reference: Future[dict[str, np.ndarray]] | None = None,
) -> RunResult:
    """Run ``exe`` on ``backend`` (one of :data:`BACKENDS`) with fp32 input ``x`` and check
    every layer; ``progress`` receives ``{cycles, layers_done, wall_s}`` during RTL runs.
    ``waves`` traces a window of an rtl run into ``waves/<name>-...`` with a GTKWave save file
    (:mod:`sim.waves`). ``reference``: :func:`reference_values` of ``x`` being computed
    elsewhere (runs of one input share it). An input of another shape, complex or not finite is
    :class:`sim.inputs.InputError`; an image larger than the config's DRAM
    :class:`arch.executable.ExecutableError`."""
    x = check_input(x, exe.input.shape)
    check_images(exe)
    try:
        engine = get_backend(backend)
    except UnknownBackend as exc:
        raise RunError(str(exc)) from None
    if waves is not None and not engine.traces:
        raise RunError(f"waveforms need the rtl backend, not {backend!r}")
    programs = exe.programs
    capture = start_capture(waves, programs, name) if waves is not None else None
    values: dict[str, np.ndarray] = {
        exe.reference.inputs[0]: quantize_input(x, exe.input.scale or 1.0, exe.input.zero_point)
    }
    layers: list[LayerResult] = []
    cycles, wall = 0, 0.0
    counters: dict[str, Any] = {}
    ideal: int | None = 0 if engine.cycles_are == "ideal" else None
    hook_results: dict[str, list[dict[str, Any]]] = {}
    # The integer reference is computed while the simulator runs (it uses another core).
    with ThreadPoolExecutor(max_workers=1) as pool:
        expected = reference if reference is not None else pool.submit(reference_values, exe, x)
        for step in exe.steps:
            if not isinstance(step, DeviceProgram):
                layers.append(_host_layer(exe, step, values, expected.result(), cycles))
                continue
            traced = capture is not None and capture.program is step
            options = RunOptions(
                workdir=workdir / step.name if workdir and len(programs) > 1 else workdir,
                progress=progress,
                trace=capture.trace if traced and capture else None,
            )
            # Canaries between the regions of the memory map and after it (sim/guard.py).
            regions = [(r.name, r.addr, r.nbytes) for r in step.regions]
            image, guard = guard_image(device_image(step, values), regions)
            device_run = DeviceRun(
                image,
                step.launch,
                max_cycles=max_cycles,
                dump_size=guard.size,
                perf_records=(step.perf_base, len(step.layers)),
            )
            [result] = engine.run(exe.config, [device_run], options)
            if result.error or result.timeout:
                dumped = ""
                if traced and capture is not None and capture.dump.exists():
                    dumped = f"; waveform: {capture.dump}"
                raise _stopped(step, result, backend, dumped)
            outside = guard.check(result.dram)
            if outside is not None:
                raise RunError(f"{backend}: {step.name} wrote outside its memory map: {outside}")
            program_layers = check_layers(exe, step, result.dram, expected.result())
            for name_ in step.outputs:
                shape = exe.reference.tensors[name_].shape
                values[name_] = read_tensor(step.tensors[name_], result.dram, shape)
            if traced and capture is not None:
                rtl_dir = engine.rtl_dir(exe.config)
                assert rtl_dir is not None  # a tracing backend runs RTL
                waves_entry = capture.finish(result, program_layers, rtl_dir)
                if waves_entry.get("bytes"):  # bytes per cycle, for the next estimate
                    first, last = waves_entry["traced_cycles"]
                    fmt, where = capture.request.fmt, capture.request.directory
                    record_rate(where, exe.config.name, fmt, waves_entry["bytes"], last - first)
            _offset(program_layers, cycles)
            _collect_hooks(hook_results, step, result, cycles)
            layers += program_layers
            cycles += result.cycles
            wall += result.sim_seconds
            _accumulate(counters, result.perf)
            if ideal is not None:
                ideal += result.cycles
    outputs = {}
    for output in exe.reference.outputs:
        value = values[output]
        t = exe.reference.tensors[output]
        outputs[output] = (
            dequantize(value, t.scale or 1.0, t.zero_point) if value.dtype == np.int8 else value
        )
    run_result = RunResult(backend, layers, cycles, wall, outputs, counters, ideal)
    run_result.hooks = hook_results
    if capture is not None:
        run_result.waves = waves_entry
    return run_result


def _host_layer(
    exe: Executable,
    step: HostStep,
    values: dict[str, np.ndarray],
    reference: dict[str, np.ndarray],
    cycles: int,
) -> LayerResult:
    """Run a host step and check its output against the reference's."""
    started = time.perf_counter()
    run_host_step(step, values, exe.reference)
    seconds = time.perf_counter() - started
    [output] = step.outputs
    node = exe.reference.producer(output)
    assert node is not None
    got, want = values[output], reference[output]
    exact = got.shape == want.shape and np.array_equal(got, want, equal_nan=True)
    ops = node.attrs.get("onnx_ops", (node.op,))
    return LayerResult(
        name=step.name,
        op="host:" + "+".join(ops) if node.op == "host" else node.op,
        macs=int(node.attrs.get("macs", 0)),
        cycles=0,
        cycle_window=(cycles, cycles),
        dram_read_bytes=0,
        dram_write_bytes=0,
        bit_exact=exact,
        mismatch=None if exact else _compare(output, got, want),
        device="host",
        host_s=seconds,
        note=step.reason,
    )


def _collect_hooks(
    into: dict[str, list[dict[str, Any]]], step: DeviceProgram, result: DeviceResult, cycles: int
) -> None:
    """Each user hook's result of this program, with the layer of each PERF record and the
    program's first cycle in the run."""
    records = {layer.perf_index: layer.name for layer in step.layers}
    layer_of_record = [records.get(n) for n in range(max(records, default=-1) + 1)]
    for module, value in result.hooks.items():
        into.setdefault(module, []).append(
            {
                "program": step.name,
                "first_cycle": cycles,
                "layer_of_record": layer_of_record,
                "result": value,
            }
        )


def _accumulate(total: dict[str, Any], counters: dict[str, Any]) -> None:
    """Add a program's counters (numbers, or dicts of numbers) into the run's."""
    for key, value in counters.items():
        if isinstance(value, dict):
            _accumulate(total.setdefault(key, {}), value)
        else:
            total[key] = total.get(key, 0) + value


def _offset(layers: list[LayerResult], cycles: int) -> None:
    """Cycle windows of a later program continue the run's cycle count."""
    for layer in layers:
        layer.cycle_window = (layer.cycle_window[0] + cycles, layer.cycle_window[1] + cycles)

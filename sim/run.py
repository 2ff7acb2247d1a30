"""Run a compiled model on a backend and check it layer by layer.

:func:`run` writes the quantized input into the DRAM image, runs the program on the ISA
simulator or the RTL, reads every layer's output back from DRAM and compares it bit for bit with
the integer reference, and reads the per-layer PERF records the program wrote.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from arch import isa
from arch.isa import Launch
from arch.reference import dequantize, evaluate, quantize_input
from compiler.ir import Graph
from compiler.plan import Plan
from sim.backends.isa_machine import IsaSimError, Machine
from sim.host import input_bytes, read_tensor
from sim.waves.capture import start as start_capture
from sim.waves.window import WaveRequest

# isa: numpy ISA simulator; rtl: Verilator + cocotb; pyverilator: the same RTL in this process.
BACKENDS = ("isa", "rtl", "pyverilator")


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

    def utilization(self, macs_per_cycle: int) -> float:
        return self.macs / (macs_per_cycle * self.cycles) if self.cycles else 0.0


@dataclass
class RunResult:
    backend: str
    layers: list[LayerResult]
    cycles: int
    sim_wall_s: float
    outputs: dict[str, np.ndarray]  # dequantized graph outputs (fp32)
    counters: dict[str, int] = field(default_factory=dict)
    ideal_cycles: int | None = None
    waves: dict[str, Any] | None = None  # the traced window and its files (sim/waves/)

    @property
    def bit_exact(self) -> bool:
        return all(layer.bit_exact for layer in self.layers)

    @property
    def first_mismatch(self) -> LayerResult | None:
        return next((layer for layer in self.layers if not layer.bit_exact), None)


def dram_image(plan: Plan, x: np.ndarray) -> np.ndarray:
    """The DRAM image with the quantized input in place, up to the end of the memory map."""
    end = max(addr + size for _name, addr, size in plan.regions)
    image = np.zeros(end, dtype=np.uint8)
    assert plan.image is not None
    image[: plan.image.size] = plan.image
    tensor, blob = input_bytes(plan, x)
    image[tensor.addr : tensor.addr + blob.size] = blob
    return image


def launch_of(plan: Plan) -> Launch:
    return Launch(plan.launch["insn_base"], plan.launch["desc_base"], plan.launch["desc_count"])


def _perf_records(plan: Plan, dram: np.ndarray) -> list[dict[str, int]]:
    base, size = plan.symbols["perf"], isa.PERF_RECORD.nbytes
    records = []
    for layer in plan.accel_layers():
        at = base + layer.perf_index * size
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


def run(
    plan: Plan,
    x: np.ndarray,
    backend: str = "isa",
    *,
    workdir: Path | None = None,
    max_cycles: int = 400_000_000,
    progress: Callable[[dict[str, Any]], None] | None = None,
    waves: WaveRequest | None = None,
    name: str = "run",
) -> RunResult:
    """Run ``plan`` on ``backend`` (one of :data:`BACKENDS`) with fp32 input ``x`` and check
    every layer; ``progress`` receives ``{cycles, layers_done, wall_s}`` during RTL runs.
    ``waves`` traces a window of an rtl run into ``waves/<name>-...`` with a GTKWave save file
    (:mod:`sim.waves`)."""
    if backend not in BACKENDS:
        raise RunError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if waves is not None and backend != "rtl":
        raise RunError(f"waveforms need the rtl backend, not {backend!r}")
    capture = start_capture(waves, plan, name) if waves is not None else None
    graph: Graph = plan.graph
    config = plan.config
    image = dram_image(plan, x)
    launch = launch_of(plan)
    ideal = None
    reference: dict[str, np.ndarray] | None = None
    start = time.perf_counter()
    if backend == "isa":
        dram = np.zeros(config.dram_bytes, dtype=np.uint8)
        dram[: image.size] = image
        machine = Machine(config, dram)
        try:
            stats = machine.run(launch)
        except IsaSimError as exc:
            raise RunError(f"ISA simulator stopped: {exc}") from None
        dram, ideal, counters = machine.dram, stats.ideal_cycles, stats.as_dict()
        cycles = stats.ideal_cycles
        wall = time.perf_counter() - start
    else:
        from sim.backends.rtl import RtlRun, rtl_source

        records = (plan.symbols["perf"], len(plan.accel_layers()))
        rtl_run = RtlRun(image, launch, max_cycles=max_cycles, perf_records=records)
        # The integer reference is computed while the simulator runs (it uses another core).
        with ThreadPoolExecutor(max_workers=1) as pool:
            expected = pool.submit(_reference, graph, x)
            if backend == "rtl":
                from sim.backends.rtl import run_programs

                [result] = run_programs(
                    config,
                    [rtl_run],
                    workdir,
                    progress=progress,
                    trace=capture.trace if capture else None,
                )
            else:
                from sim.backends import pyverilator as pyverilator_backend

                [result] = pyverilator_backend.run_programs(config, [rtl_run], progress=progress)
            reference = expected.result()
        if result.error or result.timeout:
            where = _layer_of(plan, result.error_index)
            what = "timed out" if result.timeout else f"stopped with {result.error_code}"
            dumped = ""
            if capture is not None and capture.dump.exists():
                dumped = f"; waveform: {capture.dump}"
            raise RunError(
                f"RTL ({backend} backend) {what} at instruction {result.error_index} ({where}) "
                f"after {result.perf['cycles']} cycles{dumped}",
                cycle=result.perf["cycles"],
            )
        dram, counters, cycles, wall = (
            result.dram,
            result.perf,
            result.perf["cycles"],
            result.sim_seconds,
        )
    checked = _check(plan, graph, x, dram, backend, cycles, wall, counters, ideal, reference)
    if capture is not None:
        checked.waves = capture.finish(result, checked.layers, rtl_source(config).parent)
    return checked


def _reference(graph: Graph, x: np.ndarray) -> dict[str, np.ndarray]:
    """Every tensor of ``graph`` from the integer reference ops, for fp32 input ``x``."""
    scale = graph.tensors[graph.inputs[0]].scale or 1.0
    return evaluate(graph, quantize_input(x, scale))


def _layer_of(plan: Plan, index: int) -> str:
    for layer in plan.accel_layers():
        if layer.insn_range[0] <= index < layer.insn_range[1]:
            return f"layer {layer.name}"
    return "outside any layer"


def _check(
    plan: Plan,
    graph: Graph,
    x: np.ndarray,
    dram: np.ndarray,
    backend: str,
    cycles: int,
    wall: float,
    counters: dict[str, Any],
    ideal: int | None,
    reference: dict[str, np.ndarray] | None = None,
) -> RunResult:
    if reference is None:
        reference = _reference(graph, x)
    records = _perf_records(plan, dram)
    layers: list[LayerResult] = []
    previous: dict[str, int] = dict.fromkeys(records[0], 0) if records else {}
    for layer, record in zip(plan.accel_layers(), records, strict=True):
        shape = graph.tensors[layer.output].shape
        got = read_tensor(plan, dram, layer.output, shape)
        mismatch = _compare(layer.output, got, reference[layer.output])
        tiling = layer.tiling
        layers.append(
            LayerResult(
                name=layer.name,
                op=layer.node.op,
                macs=layer.macs,
                cycles=record["cycles"] - previous["cycles"],
                cycle_window=(previous["cycles"], record["cycles"]),
                dram_read_bytes=record["dram_read_bytes"] - previous["dram_read_bytes"],
                dram_write_bytes=record["dram_write_bytes"] - previous["dram_write_bytes"],
                bit_exact=mismatch is None,
                mismatch=mismatch,
                insn_range=layer.insn_range,
                tiling=f"rows={tiling.rows_per_tile} n={tiling.n_blocks} k={tiling.k_group}"
                if tiling
                else "",
                counters={
                    k: v - previous[k] for k, v in record.items() if k not in ("tag", "reserved")
                },
            )
        )
        previous = record
    outputs = {}
    for name in graph.outputs:
        producer = graph.producer(name)
        if producer is not None and producer.op == "softmax":
            q = read_tensor(plan, dram, producer.inputs[0], graph.tensors[producer.inputs[0]].shape)
            logits = dequantize(q, graph.tensors[producer.inputs[0]].scale or 1.0)
            e = np.exp(logits - logits.max(axis=-1, keepdims=True))
            outputs[name] = e / e.sum(axis=-1, keepdims=True)
        else:
            q = read_tensor(plan, dram, name, graph.tensors[name].shape)
            outputs[name] = dequantize(q, graph.tensors[name].scale or 1.0)
    return RunResult(backend, layers, cycles, wall, outputs, dict(counters), ideal)

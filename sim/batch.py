"""Run one executable on many inputs: each device program once per input, all of them in one
batch for the backend (on the rtl backend: one simulator process per device program, not one
per input), every layer of every input checked bit for bit against the integer reference."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arch.executable import DeviceProgram, Executable, check_images
from arch.reference import dequantize, quantize_input
from sim.backends.base import DeviceRun, RunOptions
from sim.backends.registry import UnknownBackend, get_backend
from sim.guard import guard_image
from sim.host import device_image, read_tensor
from sim.inputs import check_input
from sim.run import RunError, _host_layer, _stopped, check_layers, reference_values

__all__ = ["BatchResult", "run_batch"]


@dataclass
class BatchResult:
    """Per input: the graph outputs (fp32), the first layer that was not bit-exact (None when
    all were) and the cycles; the simulators' wall time over the whole batch."""

    backend: str
    outputs: list[dict[str, np.ndarray]]
    mismatches: list[str | None]
    cycles: list[int]
    sim_wall_s: float

    @property
    def bit_exact(self) -> bool:
        return all(m is None for m in self.mismatches)


def run_batch(
    exe: Executable,
    inputs: Sequence[np.ndarray],
    backend: str = "isa",
    *,
    workdir: Path | None = None,
    max_cycles: int = 400_000_000,
) -> BatchResult:
    """Run ``exe`` on ``backend`` once for each fp32 input of ``inputs`` (each of the
    executable's input shape); see the module docstring. An input of another shape, complex or
    not finite is :class:`sim.inputs.InputError`, an accelerator error :class:`RunError`."""
    xs = [check_input(x, exe.input.shape, f"input {i}") for i, x in enumerate(inputs)]
    check_images(exe)
    try:
        engine = get_backend(backend)
    except UnknownBackend as exc:
        raise RunError(str(exc)) from None
    ref = exe.reference
    values = [
        {ref.inputs[0]: quantize_input(x, exe.input.scale or 1.0, exe.input.zero_point)} for x in xs
    ]
    expected = [reference_values(exe, x) for x in xs]
    mismatches: list[str | None] = [None] * len(xs)
    cycles, wall = [0] * len(xs), 0.0
    for step in exe.steps:
        if not isinstance(step, DeviceProgram):
            for i, (vals, want) in enumerate(zip(values, expected, strict=True)):
                layer = _host_layer(exe, step, vals, want, cycles[i])
                mismatches[i] = mismatches[i] or layer.mismatch
            continue
        regions = [(r.name, r.addr, r.nbytes) for r in step.regions]
        guarded = [guard_image(device_image(step, vals), regions) for vals in values]
        runs = [
            DeviceRun(image, step.launch, max_cycles=max_cycles, dump_size=guard.size)
            for image, guard in guarded
        ]
        where = workdir / step.name if workdir and len(exe.programs) > 1 else workdir
        results = engine.run(exe.config, runs, RunOptions(workdir=where))
        for i, result in enumerate(results):
            if result.error or result.timeout:
                error = _stopped(step, result, backend, "")
                raise RunError(f"input {i}: {error}", error.cycle)
            outside = guarded[i][1].check(result.dram)
            if outside is not None:
                raise RunError(f"input {i}: {step.name} wrote outside its memory map: {outside}")
            for layer in check_layers(exe, step, result.dram, expected[i]):
                mismatches[i] = mismatches[i] or (
                    layer.mismatch and f"{layer.name}: {layer.mismatch}"
                )
            for name in step.outputs:
                shape = ref.tensors[name].shape
                values[i][name] = read_tensor(step.tensors[name], result.dram, shape)
            cycles[i] += result.cycles
            wall += result.sim_seconds
    outputs = []
    for vals in values:
        out = {}
        for name in ref.outputs:
            t = ref.tensors[name]
            value = vals[name]
            out[name] = (
                dequantize(value, t.scale or 1.0, t.zero_point) if value.dtype == np.int8 else value
            )
        outputs.append(out)
    return BatchResult(backend, outputs, mismatches, cycles, wall)

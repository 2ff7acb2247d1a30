"""Running a :class:`~arch.executable.kv.KvExecutable`: a prefill launch on each sequence's
prompt, then one decode launch per token of all B sequences, each starting from the DRAM the
last one left (a backend takes an image and gives back the DRAM), with the sequence's or the
position's ``desc_base``.

Every launch is checked layer by layer: a prefill against the integer reference of the full
pass over its window, a decode step against :func:`arch.kv_cache.decode_batch` (B rows
through the same reference graph, attention over the reference's own caches) - computed apart
from the device's caches; and a decode step may write only its own tensors, its PERF records
and row p of each sequence's caches (else :class:`~sim.runtime.results.RunError`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from arch import kv_cache
from arch.executable import DeviceProgram
from arch.executable.kv import KvExecutable
from arch.reference import evaluate, evaluate_node, quantize_input
from sim.backends.base import Backend, DeviceResult, DeviceRun, RunOptions
from sim.runtime.execute import check_layers
from sim.runtime.host import pixel_addresses, read_tensor, tensor_bytes
from sim.runtime.results import LayerResult, RunError

__all__ = ["KvLaunch", "KvRun"]


@dataclass
class KvLaunch:
    """One launch: its logits codes (rows), how it ended and its layers."""

    logits: np.ndarray  # int8 codes: (T, vocab) for prefill, (vocab,) for a decode step
    result: DeviceResult
    layers: list[LayerResult]

    @property
    def first_mismatch(self) -> LayerResult | None:
        return next((la for la in self.layers if not la.bit_exact), None)


@dataclass
class KvRun:
    """The launches of one generation of ``kv.batch`` sequences on ``backend`` (see the module
    docstring)."""

    kv: KvExecutable
    backend: Backend
    options: RunOptions = field(default_factory=RunOptions)
    dram: np.ndarray | None = None
    caches: list[kv_cache.KvCache | None] = field(default_factory=list)

    def prefill(self, x: np.ndarray, length: int, sequence: int = 0) -> KvLaunch:
        """Sequence ``sequence``'s prompt launch: ``x`` the packed fp32 token window (T
        positions, the prompt's ``length`` first), its logits rows and layers; its keys and
        values go to the sequence's block of the caches."""
        exe = self.kv.prefill
        program = self._prefill_at(sequence)
        x_q = quantize_input(x, exe.input.scale or 1.0, exe.input.zero_point)
        x_q = x_q.reshape(exe.input.shape)
        values = evaluate(exe.reference, x_q)
        image = (self.kv.image if self.dram is None else self.dram).copy()
        for name in program.inputs:
            tensor = program.tensors[name]
            image[pixel_addresses(tensor)] = tensor_bytes(tensor, values[name])
        launch = self.kv.prefill_launches[sequence]
        what = "prefill" if self.kv.batch == 1 else f"prefill of sequence {sequence}"
        result = self._launch(image, launch, what)
        layers = check_layers(exe, program, result.dram, values)
        self.caches += [None] * (self.kv.batch - len(self.caches))
        self.caches[sequence] = kv_cache.prefill(exe.reference, values, length)
        logits = self._logits(exe.reference.outputs[0], program, result.dram, self.kv.context)
        return KvLaunch(logits, result, layers)

    def step(self, *windows: np.ndarray) -> KvLaunch:
        """The decode launch of the B sequences at their next position: ``windows`` the packed
        fp32 window of each, holding its token at that position (its embedding row is the
        host input stage's); the logits rows (B, vocab)."""
        caches = [cache for cache in self.caches if cache is not None]
        assert self.dram is not None and len(caches) == self.kv.batch == len(windows), "prefill"
        exe, ref = self.kv.decode, self.kv.prefill.reference
        p = caches[0].length
        if {cache.length for cache in caches} != {p}:
            raise RunError(f"the sequences are at positions {[c.length for c in caches]}, not one")
        if p >= self.kv.context:
            raise RunError(f"the KV cache is full: {p} positions of a context of {self.kv.context}")
        host = ref.nodes[0]
        pre = self.kv.prefill.input
        rows = []
        for x in windows:
            x_q = quantize_input(x, pre.scale or 1.0, pre.zero_point).reshape(pre.shape)
            rows.append(evaluate_node(ref, host, [x_q])[:, p : p + 1])
        row = np.concatenate(rows, axis=1)
        program = self._at(p)
        image = self.dram.copy()
        tensor = program.tensors[self.kv.start]
        image[pixel_addresses(tensor)] = tensor_bytes(tensor, row)
        before = image.copy()
        result = self._launch(image, self.kv.launches[p], f"decode step at position {p}")
        values = dict(kv_cache.decode_batch(ref, caches, self.kv.start, row))
        self._check_writes(before, result.dram, program, p)
        layers = check_layers(exe, program, result.dram, values)
        logits = self._logits(exe.reference.outputs[0], program, result.dram, self.kv.batch)
        return KvLaunch(logits, result, layers)

    def _launch(self, image: np.ndarray, launch, what: str) -> DeviceResult:
        (result,) = self.backend.run(
            self.kv.prefill.config,
            [DeviceRun(image, launch, dump_size=image.size)],
            self.options,
        )
        if result.error or result.timeout:
            why = "timed out" if result.timeout else f"{result.error_code} at {result.error_index}"
            raise RunError(f"{what}: the program stopped: {why} {result.message}".rstrip())
        self.dram = np.asarray(result.dram, np.uint8).copy()
        return result

    def _at(self, p: int) -> DeviceProgram:
        """The decode program as position ``p`` sees it: its new key and value rows (row b of
        B) at row p of sequence b's block of the caches."""
        program = self.kv.decode.programs[0]
        tensors = dict(program.tensors)
        t, batch = self.kv.context, self.kv.batch
        for cache in self.kv.caches:
            for name, target in ((cache.key_row, cache.keys), (cache.value_row, cache.values)):
                at, stride = target.addr + p * target.pixel_stride, t * target.pixel_stride
                tensors[name] = dataclasses.replace(target, addr=at, h=batch, pixel_bytes=stride)
        return dataclasses.replace(program, tensors=tensors)

    def _prefill_at(self, sequence: int) -> DeviceProgram:
        """The prefill program as sequence ``sequence`` runs it: its key rows and values in
        the sequence's block of the caches."""
        program = self.kv.prefill.programs[0]
        tensors = dict(program.tensors)
        for cache in self.kv.caches:
            for name, target in zip(cache.prefilled, (cache.keys, cache.values), strict=True):
                at = target.addr + sequence * self.kv.context * target.pixel_stride
                tensors[name] = dataclasses.replace(program.tensors[name], addr=at)
        return dataclasses.replace(program, tensors=tensors)

    def _check_writes(
        self, before: np.ndarray, after: np.ndarray, program: DeviceProgram, p: int
    ) -> None:
        """Only the step's own tensors, its PERF records and row p of the caches changed."""
        allowed = np.zeros(before.size, bool)
        for region in program.regions:
            if region.name in program.tensors or region.name == "perf":
                allowed[region.addr : region.addr + region.nbytes] = True
        for tensor in program.tensors.values():
            allowed[pixel_addresses(tensor).ravel()] = True
        changed = np.flatnonzero(before != after[: before.size])
        bad = changed[~allowed[changed]]
        if bad.size:
            raise RunError(
                f"decode step at position {p} wrote {bad.size} bytes outside its tensors and "
                f"row {p} of the caches, from {int(bad[0]):#x}"
            )

    def _logits(self, name: str, program: DeviceProgram, dram: np.ndarray, rows: int) -> np.ndarray:
        """The ``rows`` logits rows (rows, vocab) of tensor ``name``."""
        vocab = self.kv.prefill.reference.tensors[name].shape[-1]
        return read_tensor(program.tensors[name], dram, (1, rows, 1, vocab)).reshape(rows, vocab)

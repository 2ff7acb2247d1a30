"""Run a range of a device program's layers from its checkpoint: the DRAM state at a layer
boundary, known from the integer reference.

Why this works without a new program: every layer ends with a PERF record and a barrier
(STORE -> COMPUTE -> LOAD SYNCs, ``compiler/passes/schedule.py``); token pushes and pops balance
within a layer, so past the barrier no token is outstanding and every tensor a later layer reads
is in DRAM. Descriptors are fetched on demand by index. So the executable's own image runs layers
``[first, stop)`` when

- DRAM holds the program's inputs and the outputs of the layers before the first reported
  layer, from the reference, written in program order (a buffer the allocator reused holds its
  latest tensor, as in the sequential run);
- ``insn_base`` points at the start layer's first instruction, and every instruction from layer
  ``stop`` on is *hollowed*: replaced by a SYNC of the same queue with the same dependency flags
  (:func:`hollow`), up to the program's own END.

Nothing is re-emitted: the layers run exactly the instructions, descriptors and addresses of the
sequential run, on any backend. (A per-shard program slice from the compiler would need its own
descriptor table and memory map, i.e. a second code path to keep bit-exact.)

Cycles, measured on the RTL (``tests/network/test_shards.py`` checks it):

- The end. The fetch unit reads ahead and dispatches the next layer's instructions into the
  queues while a layer runs (they wait behind its barrier); that instruction traffic shares the
  DRAM port with the layer's loads. An END right after the range stops it: a DRAM-bound layer
  then ran up to 16 cycles faster, with fewer DRAM bytes read. The hollow tail keeps every
  instruction word where it was, so fetch and dispatch behave as in the sequential run up to
  the range's last PERF record; after it the SYNCs drain in about one cycle each.
- The start. A layer started cold takes 0..8 cycles fewer than in the sequential run, whose
  window opens at the previous PERF record with the barrier and the prefetched stream in flight.
  So a range that does not start at its program's first layer starts one layer earlier, at the
  *warm-up* layer, not reported; its PERF record opens the first layer's window. Of the warm-up
  only the LOADs and the PERF run (:func:`hollow` with ``keep_loads``; its output is seeded
  from the reference like the layers' before it): the loads take long enough for fetch to fill
  the queues as in the sequential run, at about a third of the layer's cycles (ResNet-18's
  layers: 75k-206k of 227k-505k). (A warm-up hollowed entirely is not enough: the queues then
  hold other instructions when the record is written, and layers came out 3 cycles off.)

With both, every reported layer's cycles, DRAM bytes and counters equal the sequential run's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from arch import isa
from arch.executable import DeviceProgram, Executable
from sim.runtime.host import device_image, pixel_addresses, tensor_bytes

#: Layers run (unreported) before a range that starts inside its program; see the docstring.
WARMUP_LAYERS = 1
DEP_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


@dataclass(frozen=True)
class Piece:
    """Layers ``[first, stop)`` of device program ``program`` (an index among the
    executable's device programs)."""

    program: int
    first: int
    stop: int

    @property
    def start(self) -> int:
        """The layer the run starts at: ``first``, or the warm-up layer before it."""
        return max(0, self.first - WARMUP_LAYERS)

    def label(self, exe: Executable) -> str:
        layers = exe.programs[self.program].layers
        first, last = layers[self.first].name, layers[self.stop - 1].name
        return first if self.stop - self.first == 1 else f"{first}..{last}"


def image(
    exe: Executable, piece: Piece, values: dict[str, np.ndarray]
) -> tuple[np.ndarray, isa.Launch]:
    """The DRAM image and launch registers that run ``piece`` from its checkpoint; ``values``
    holds the reference tensors (at least the program's inputs and the outputs of its layers
    before ``piece.first``)."""
    program = exe.programs[piece.program]
    image = device_image(program, values)
    for layer in program.layers[: piece.first]:
        tensor = program.tensors[layer.output]
        image[pixel_addresses(tensor)] = tensor_bytes(tensor, values[layer.output])
    base = program.launch.insn_base
    if piece.first > piece.start:  # the warm-up layer: its loads only (its output is seeded)
        lo = base + program.layers[piece.start].insn_range[0] * isa.INSN_BYTES
        hi = base + program.layers[piece.first].insn_range[0] * isa.INSN_BYTES
        image[lo:hi] = hollow(program.image[lo:hi], keep_loads=True)
    if piece.stop < len(program.layers):
        at = base + program.layers[piece.stop].insn_range[0] * isa.INSN_BYTES
        end = base + (program.instructions - 1) * isa.INSN_BYTES  # the program's END
        image[at:end] = _hollow_program(program)[at - base : end - base]
    start = program.layers[piece.start].insn_range[0]
    launch = dataclasses.replace(program.launch, insn_base=base + start * isa.INSN_BYTES)
    return image, launch


def hollow(words: np.ndarray, keep_loads: bool = False) -> np.ndarray:
    """Instructions (bytes) with every one replaced by a SYNC of the same queue and the same
    dependency flags: fetched, dispatched and token-ordered like the original, doing nothing
    (``keep_loads``: but the LOADs, which only fill local memories, and the PERF records)."""
    out = words.copy().reshape(-1, isa.INSN_BYTES)
    warm = (isa.Opcode.LOAD, isa.Opcode.PERF) if keep_loads else ()
    kept = (isa.Opcode.END, isa.Opcode.SYNC, *warm)
    for row in out:
        insn = isa.decode_insn(int.from_bytes(row.tobytes(), "little"))
        if insn.opcode in kept:
            continue
        flags = tuple(flag for flag in DEP_FLAGS if insn.fields.get(f"deps.{flag}"))
        word = isa.make("sync", flags, queue=insn.queue).encode()
        row[:] = np.frombuffer(word.to_bytes(isa.INSN_BYTES, "little"), dtype=np.uint8)
    return out.reshape(-1)


_HOLLOW: dict[int, tuple[DeviceProgram, np.ndarray]] = {}


def _hollow_program(program: DeviceProgram) -> np.ndarray:
    """The program's instructions hollowed (cached per program: a network's pieces share it)."""
    cached = _HOLLOW.get(id(program))
    if cached is None or cached[0] is not program:
        base = program.launch.insn_base
        words = program.image[base : base + program.instructions * isa.INSN_BYTES]
        cached = _HOLLOW[id(program)] = (program, hollow(words))
    return cached[1]


def load_cycles(exe: Executable, program: int, layer: int) -> int:
    """DRAM cycles of a layer's LOADs at the config's bandwidth: what it costs as a warm-up
    layer, where nothing else of it runs."""
    entry, c = exe.programs[program], exe.config
    lo, hi = entry.layers[layer].insn_range
    total = 0
    for index in range(lo, hi):
        at = entry.launch.insn_base + index * isa.INSN_BYTES
        insn = isa.decode_insn(int.from_bytes(entry.image[at : at + isa.INSN_BYTES], "little"))
        if insn.opcode is not isa.Opcode.LOAD:
            continue
        at = entry.launch.desc_base + insn["desc"] * isa.DESC_BYTES
        word = int.from_bytes(entry.image[at : at + isa.DESC_BYTES], "little")
        desc = isa.decode_record(isa.DESCRIPTOR, word)
        lines = np.prod([desc[f"loops[{lv}].count"] for lv in range(isa.DESC_LOOPS)])
        total += int(lines) * isa.line_bytes(c, desc["mem"])
    return -(-total // c.dram_bytes_per_cycle)


def needs(exe: Executable, piece: Piece) -> list[str]:
    """The tensors :func:`image` writes: the program's inputs and earlier layers' outputs."""
    program = exe.programs[piece.program]
    return [*program.inputs, *(layer.output for layer in program.layers[: piece.first])]


def first_insn(exe: Executable, piece: Piece) -> int:
    """The program's instruction index where the run starts (its ``pc`` 0)."""
    return exe.programs[piece.program].layers[piece.start].insn_range[0]


def stopped_layer(exe: Executable, piece: Piece, error_index: int) -> str:
    """Where a piece stopped: the layer of its ``error_index`` (counted from its start)."""
    program: DeviceProgram = exe.programs[piece.program]
    layer = program.layer_of(error_index + first_insn(exe, piece))
    return f"layer {layer.name}" if layer else "outside any layer"

"""Each device layer's two lower bounds on its cycles, from the compiled program and the config
alone (never a run's counters), so the ISA simulator's and the RTL's reports agree on them:

- the **compute bound**: the layer's work on the unit that runs it, at that unit's peak -
  its MACs over the array's ``rows x cols`` MACs per cycle (GEMM, CONV), over the window unit's
  ``cols x 9`` (DWCONV: 3x3 taps per channel lane); a layer without MACs (pool, add, scale,
  norm) counts the lines its unit must stream, one a cycle (:func:`_lines_streamed`);
- the **DRAM bound**: the bus beats of the lines its LOAD and STORE descriptors move (padding
  lines of a load read nothing; a store skips its out-of-bounds lines unless it transposes),
  ``ceil(line bytes / dram_bytes_per_cycle)`` each; DRAM has a read and a write channel of that
  width that run at once (hdl_gen/dram_bus.py), so the bound is the busier of the two.

A layer's instructions are those of its ``insn_range`` - the next layer's first loads, issued
during a layer's last step, count for the layer whose cycles they overlap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from arch import isa
from arch.config import AccelConfig
from arch.executable import DeviceProgram
from arch.isa import NormMode, Opcode
from arch.listing import program_of

#: The unit that runs a layer, by the compute opcodes it issues (the first that occurs wins).
UNITS: tuple[tuple[Opcode, str], ...] = (
    (Opcode.GEMM, "array"),
    (Opcode.CONV, "array"),
    (Opcode.DWCONV, "window"),
    (Opcode.NORM, "norm"),
    (Opcode.ACCUM, "line"),
    (Opcode.POOL, "line"),
)


@dataclass(frozen=True)
class Bounds:
    """One layer's roofline: the unit, both bounds in cycles and the bytes its loads read and
    its stores write."""

    unit: str  # array | window | norm | line | none (a layer of DMA only)
    compute_cycles: int
    dram_cycles: int
    load_bytes: int
    store_bytes: int

    @property
    def cycles(self) -> int:
        return max(self.compute_cycles, self.dram_cycles)

    @property
    def limited_by(self) -> str:
        return "compute" if self.compute_cycles >= self.dram_cycles else "dram"


def peak_macs_per_cycle(config: AccelConfig, unit: str) -> int:
    """MACs a unit can do in one cycle: the array ``rows x cols``, the window unit ``cols``
    lanes of ``DW_KERNEL_MAX``\\ :sup:`2` taps; the others do no MACs (0)."""
    return {"array": config.rows * config.cols, "window": config.cols * isa.DW_KERNEL_MAX**2}.get(
        unit, 0
    )


def descriptor_lines(desc: dict[str, Any], every_line: bool = False) -> int:
    """Lines a descriptor moves to or from DRAM: the lines of its loop nest whose (y, x) lies in
    its height/width bounds (all of them with ``every_line``: a transposing store)."""
    counts = [desc[f"loops[{lv}].count"] for lv in range(isa.DESC_LOOPS)]
    if every_line or not (desc["height"] or desc["width"]):
        return int(np.prod(counts))
    grids = np.indices(counts, dtype=np.int64).reshape(isa.DESC_LOOPS, -1)
    valid = np.ones(grids.shape[1], dtype=bool)
    for bound, origin, step in (("height", "y0", "ystep"), ("width", "x0", "xstep")):
        if desc[bound]:
            steps = np.array([desc[f"loops[{lv}].{step}"] for lv in range(isa.DESC_LOOPS)])
            coord = desc[origin] + steps @ grids
            valid &= (coord >= 0) & (coord < desc[bound])
    return int(valid.sum())


def _lines_streamed(insn: isa.Instruction) -> int:
    """ACT lines a MAC-less compute instruction streams through its unit, one a cycle."""
    if insn.opcode is Opcode.POOL:
        return int(insn["m"] * insn["n_iter"] * insn["window"])
    if insn.opcode is Opcode.ACCUM:
        return int(insn["m"] * insn["n_iter"])
    if insn.opcode is Opcode.NORM:
        passes = 3 if insn["mode"] is NormMode.SOFTMAX else 2
        return int(insn["m"] * insn["k_iter"] * passes)
    if insn.opcode is Opcode.DWCONV:  # a max pool: one output a cycle at best
        return int(insn["out_h"] * insn["out_w"])
    return 0


def program_bounds(program: DeviceProgram, config: AccelConfig) -> dict[str, Bounds]:
    """The :class:`Bounds` of each layer of ``program``, by layer name."""
    code = program_of(program)
    bus = config.dram_bytes_per_cycle
    out: dict[str, Bounds] = {}
    for layer in program.layers:
        insns = code.insns[layer.insn_range[0] : layer.insn_range[1]]
        opcodes = {insn.opcode for insn in insns}
        unit = next((name for op, name in UNITS if op in opcodes), "none")
        moved = {Opcode.LOAD: 0, Opcode.STORE: 0}
        beats = {Opcode.LOAD: 0, Opcode.STORE: 0}
        for insn in insns:
            if insn.opcode not in (Opcode.LOAD, Opcode.STORE):
                continue
            desc = code.descs[insn["desc"]]
            every = insn.opcode is Opcode.STORE and bool(insn["transpose"])
            lines = descriptor_lines(desc, every_line=every)
            line = isa.line_bytes(config, desc["mem"])
            moved[insn.opcode] += lines * line
            beats[insn.opcode] += lines * -(-line // bus)
        peak = peak_macs_per_cycle(config, unit)
        if layer.macs and peak:
            compute = -(-layer.macs // peak)
        else:
            compute = sum(_lines_streamed(insn) for insn in insns)
        dram = max(beats.values())
        out[layer.name] = Bounds(unit, compute, dram, moved[Opcode.LOAD], moved[Opcode.STORE])
    return out

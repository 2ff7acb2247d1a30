"""What the ISA simulator returns: its statistics (:class:`Stats`, with each instruction's
:class:`Span` and each token's :class:`TokenMove` for a timeline) and the error that stops a
program (:class:`IsaSimError`, with the code the RTL's status register would hold)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from arch.isa import ErrorCode, Opcode

#: The compute unit's engine of each compute opcode (its track in a timeline).
ENGINE_OF: dict[Opcode, str] = {
    Opcode.GEMM: "compute: array",
    Opcode.CONV: "compute: array",
    Opcode.ACCUM: "compute: line engine",
    Opcode.POOL: "compute: line engine",
    Opcode.DWCONV: "compute: window engine",
    Opcode.NORM: "compute: norm unit",
}


class IsaSimError(RuntimeError):
    """The program cannot run; ``code`` is what the RTL's status register would say."""

    def __init__(self, code: ErrorCode, message: str, insn_index: int | None = None) -> None:
        where = f"instruction {insn_index}: " if insn_index is not None else ""
        super().__init__(f"{code.name}: {where}{message}")
        self.code = code
        self.insn_index = insn_index


@dataclass(frozen=True)
class Span:
    """One instruction: ``cycles`` from cycle ``start`` on ``unit`` (load, compute or store),
    moving ``dram_bytes`` to or from DRAM."""

    index: int
    unit: str
    opcode: Opcode
    start: int
    cycles: int
    dram_bytes: int = 0

    @property
    def track(self) -> str:
        if self.unit != "compute":
            return self.unit
        return ENGINE_OF.get(self.opcode, "compute: other")


@dataclass(frozen=True)
class TokenMove:
    """A dependency token pushed (+1) or popped (-1) at ``time`` on the channel ``source ->
    target`` (queue names)."""

    time: int
    source: str
    target: str
    delta: int


@dataclass
class Stats:
    """What ran: instruction counts, DRAM traffic per memory, operation counts, ideal cycles."""

    insns: Counter = field(default_factory=Counter)  # mnemonic -> count
    load_bytes: Counter = field(default_factory=Counter)  # Mem name -> DRAM bytes read
    pad_lines: int = 0  # lines a load filled with padding instead of DRAM data
    store_bytes: int = 0
    fetch_bytes: int = 0  # instruction words read
    desc_bytes: int = 0  # descriptors read
    macs: int = 0  # multiply-accumulates (GEMM)
    alu_ops: int = 0  # element operations of ACCUM, POOL and STORE post-processing
    busy: Counter = field(default_factory=Counter)  # Queue name -> ideal busy cycles
    ideal_cycles: int = 0
    spans: list[Span] = field(default_factory=list, repr=False)  # every instruction's, in order
    tokens: list[TokenMove] = field(default_factory=list, repr=False)

    @property
    def dram_read_bytes(self) -> int:
        return sum(self.load_bytes.values()) + self.fetch_bytes + self.desc_bytes

    def as_dict(self) -> dict[str, Any]:
        return {
            "insns": dict(self.insns),
            "load_bytes": dict(self.load_bytes),
            "pad_lines": self.pad_lines,
            "store_bytes": self.store_bytes,
            "fetch_bytes": self.fetch_bytes,
            "desc_bytes": self.desc_bytes,
            "dram_read_bytes": self.dram_read_bytes,
            "macs": self.macs,
            "alu_ops": self.alu_ops,
            "busy": dict(self.busy),
            "ideal_cycles": self.ideal_cycles,
        }

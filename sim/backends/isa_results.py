"""What the ISA simulator returns: its statistics (:class:`Stats`) and the error that stops a
program (:class:`IsaSimError`, with the code the RTL's status register would hold)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from arch.isa import ErrorCode


class IsaSimError(RuntimeError):
    """The program cannot run; ``code`` is what the RTL's status register would say."""

    def __init__(self, code: ErrorCode, message: str, insn_index: int | None = None) -> None:
        where = f"instruction {insn_index}: " if insn_index is not None else ""
        super().__init__(f"{code.name}: {where}{message}")
        self.code = code
        self.insn_index = insn_index


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

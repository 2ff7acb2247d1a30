"""The ISA's enumerations: opcodes, queues, local memories, pool modes, error codes."""

from __future__ import annotations

from amaranth.lib import enum


class Opcode(enum.Enum, shape=4):
    """Instruction opcodes. 0 and 12..15 are illegal (an all-zero word is never a program);
    NORM (11) is illegal on a config without the norm unit."""

    LOAD = 1
    STORE = 2
    GEMM = 3
    ACCUM = 4
    POOL = 5
    SYNC = 6
    PERF = 7
    END = 8
    DWCONV = 9
    CONV = 10
    NORM = 11


class Queue(enum.Enum, shape=2):
    """The three execution queues."""

    LOAD = 0
    COMPUTE = 1
    STORE = 2


class Mem(enum.Enum, shape=2):
    """Local memories a DMA descriptor can address."""

    ACT = 0
    WGT = 1
    PARAM = 2
    ACC = 3


class PoolMode(enum.Enum, shape=1):
    MAX = 0
    SUM = 1


class NormMode(enum.Enum, shape=2):
    """What the norm unit computes per row (see arch/norm_ops.py)."""

    LAYERNORM = 0
    RMSNORM = 1
    SOFTMAX = 2


class ErrorCode(enum.Enum, shape=4):
    """Values of the status register's error field (also raised by the ISA simulator)."""

    NONE = 0
    ILLEGAL_OPCODE = 1
    BAD_DESCRIPTOR = 2  # descriptor index beyond the table
    DRAM_RANGE = 3  # DRAM address outside the DRAM, or misaligned
    LOCAL_RANGE = 4  # scratchpad / accumulator / parameter address outside its memory
    DEADLOCK = 5  # every queue waits for a token that can never come
    WATCHDOG = 6  # no progress for config.watchdog_cycles cycles
    BAD_FIELD = 7  # a field value the hardware cannot execute (e.g. zero count, bad memory)


ENUMS: tuple[type[enum.Enum], ...] = (Opcode, Queue, Mem, PoolMode, NormMode, ErrorCode)

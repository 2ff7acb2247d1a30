"""Small helpers shared by the cocotb block tests."""

from __future__ import annotations

import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge


def pack(values, bits: int) -> int:
    """Pack signed integers into one word, element 0 in the least significant bits."""
    mask, word = (1 << bits) - 1, 0
    for i, value in enumerate(values):
        word |= (int(value) & mask) << (i * bits)
    return word


def unpack(word: int, bits: int, count: int) -> np.ndarray:
    """Inverse of :func:`pack` (signed elements)."""
    mask, half = (1 << bits) - 1, 1 << (bits - 1)
    out = [(word >> (i * bits)) & mask for i in range(count)]
    return np.array([v - (1 << bits) if v >= half else v for v in out], dtype=np.int64)


async def start_clock_and_reset(dut, cycles: int = 3) -> None:
    """Start a 10 ns clock, hold reset for a few cycles, release it at a falling edge."""
    Clock(dut.clk, 10, unit="ns").start()
    dut.rst.value = 1
    await ClockCycles(dut.clk, cycles)
    await FallingEdge(dut.clk)
    dut.rst.value = 0

"""cocotb test: DotProduct against numpy, random operands, random bubbles and backpressure."""

import os

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly


def _pack(a: np.ndarray, b: np.ndarray, bits: int) -> int:
    mask = (1 << bits) - 1
    word = 0
    for i, value in enumerate(np.concatenate([a, b])):
        word |= (int(value) & mask) << (i * bits)
    return word


@cocotb.test()
async def random_vectors_with_backpressure(dut):
    lanes, bits = int(os.environ["DOT_LANES"]), int(os.environ["DOT_IN_BITS"])
    count, seed = int(os.environ["DOT_COUNT"]), int(os.environ["DOT_SEED"])
    rng = np.random.default_rng(seed)
    lo, hi = -(1 << (bits - 1)), 1 << (bits - 1)
    vectors = [(rng.integers(lo, hi, lanes), rng.integers(lo, hi, lanes)) for _ in range(count)]
    expected = [int(np.dot(a.astype(np.int64), b.astype(np.int64))) for a, b in vectors]

    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.operands__valid.value = 0
    dut.result__ready.value = 0
    await ClockCycles(dut.clk, 3)
    await FallingEdge(dut.clk)
    dut.rst.value = 0

    sent, received, pending = 0, [], False
    for _cycle in range(count * 8 + 100):
        await FallingEdge(dut.clk)
        if not pending and sent < count and rng.random() < 0.7:
            dut.operands__payload.value = _pack(*vectors[sent], bits)
            dut.operands__valid.value = 1
            pending = True
        elif not pending:
            dut.operands__valid.value = 0
        dut.result__ready.value = int(rng.random() < 0.6)
        await ReadOnly()
        if pending and dut.operands__ready.value:
            sent, pending = sent + 1, False
        if dut.result__valid.value and dut.result__ready.value:
            received.append(dut.result__payload.value.to_signed())
        if len(received) == count:
            break

    assert sent == count, f"only {sent} of {count} operand pairs accepted: input stalled"
    assert len(received) == count, f"only {len(received)} of {count} results: output stalled"
    for index, (got, want) in enumerate(zip(received, expected, strict=True)):
        assert got == want, (
            f"result {index}: expected {want}, got {got} (operands {vectors[index]})"
        )

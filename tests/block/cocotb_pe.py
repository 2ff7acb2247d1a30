"""cocotb test: one processing element against a Python model, random operands, banks and
weight writes (including writes to the bank not in use while it computes)."""

import os

import numpy as np
from cocotb import test
from cocotb.triggers import FallingEdge

from tests.block.cocotb_util import start_clock_and_reset


def wrap32(value: int) -> int:
    return (value + (1 << 31)) % (1 << 32) - (1 << 31)


@test()
async def random_operands(dut):
    rng = np.random.default_rng(int(os.environ["PE_SEED"]))
    await start_clock_and_reset(dut)
    weights = [int(w) for w in rng.integers(-128, 128, 2)]
    for bank in (0, 1):  # known weights in both banks (reset does not clear them)
        dut.w_en.value, dut.w_bank.value, dut.w_data.value = 1, bank, weights[bank]
        await FallingEdge(dut.clk)
    for cycle in range(400):
        a = int(rng.integers(-128, 128))
        bank = int(rng.integers(0, 2))
        psum = int(rng.integers(-(1 << 31), 1 << 31))
        write = bool(rng.random() < 0.3)
        w_bank, w_data = int(rng.integers(0, 2)), int(rng.integers(-128, 128))
        dut.a_in.value, dut.bank_in.value, dut.psum_in.value = a, bank, psum
        dut.w_en.value, dut.w_bank.value, dut.w_data.value = int(write), w_bank, w_data
        await FallingEdge(dut.clk)
        # The rising edge in between registered these inputs with the weights held before it.
        expected = (wrap32(psum + a * weights[bank]), a)
        got = (dut.psum_out.value.to_signed(), dut.a_out.value.to_signed())
        assert got == expected, f"cycle {cycle}: expected (psum, a) {expected}, got {got}"
        if write:
            weights[w_bank] = w_data  # the write lands at the same edge: used from the next cycle

"""cocotb test: SystolicArray against numpy, including bank switching and weight loads that
overlap streaming."""

import os

import numpy as np
from cocotb import test
from cocotb.triggers import FallingEdge

from tests.block.cocotb_util import pack, start_clock_and_reset, unpack


async def write_weights(dut, bank: int, weights: np.ndarray) -> None:
    for r, row in enumerate(weights):
        dut.w_en.value, dut.w_row.value, dut.w_bank.value = 1, r, bank
        dut.w_data.value = pack(row, 8)
        await FallingEdge(dut.clk)
    dut.w_en.value = 0


@test()
async def random_vectors_and_banks(dut):
    rows, cols = int(os.environ["ARRAY_ROWS"]), int(os.environ["ARRAY_COLS"])
    latency, seed = int(os.environ["ARRAY_LATENCY"]), int(os.environ["ARRAY_SEED"])
    rng = np.random.default_rng(seed)
    weights = [rng.integers(-128, 128, (rows, cols)) for _ in range(2)]
    await start_clock_and_reset(dut)
    dut.a.value, dut.bank.value, dut.w_en.value = 0, 0, 0
    for bank in (0, 1):
        await write_weights(dut, bank, weights[bank])

    # Phase 1: random vectors with a random bank each; phase 2: stream bank 0 while bank 1 is
    # rewritten, then switch to bank 1 right after the last weight row.
    count = 40
    vectors = rng.integers(-128, 128, (count, rows))
    banks = rng.integers(0, 2, count)
    banks[-cols:] = 0  # bank 1 is rewritten next: its last user must have left the array
    new_weights = rng.integers(-128, 128, (rows, cols))
    stream_b0 = rng.integers(-128, 128, (rows, rows))
    stream_b1 = rng.integers(-128, 128, (8, rows))
    schedule = [(v, int(b), None) for v, b in zip(vectors, banks, strict=True)]
    schedule += [(v, 0, r) for r, v in enumerate(stream_b0)]  # weight row r written meanwhile
    schedule += [(v, 1, None) for v in stream_b1]
    expected = [v @ weights[b] for v, b in zip(vectors, banks, strict=True)]
    expected += [v @ weights[0] for v in stream_b0] + [v @ new_weights for v in stream_b1]

    outputs = []
    for cycle in range(len(schedule) + latency):
        if cycle < len(schedule):
            vector, bank, weight_row = schedule[cycle]
            dut.a.value, dut.bank.value = pack(vector, 8), bank
            if weight_row is not None:
                dut.w_en.value, dut.w_row.value, dut.w_bank.value = 1, weight_row, 1
                dut.w_data.value = pack(new_weights[weight_row], 8)
            else:
                dut.w_en.value = 0
        else:
            dut.a.value, dut.w_en.value = 0, 0
        await FallingEdge(dut.clk)
        if cycle + 1 >= latency:
            outputs.append(unpack(int(dut.out.value), 32, cols))

    for index, (got, want) in enumerate(zip(outputs, expected, strict=False)):
        assert np.array_equal(got, want), f"vector {index}: expected {want}, got {got}"
    assert len(outputs) >= len(expected)

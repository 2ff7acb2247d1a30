"""cocotb test for tests/coverage/broken_stream.py: a sink that is ready one cycle in four,
for 60 cycles. On the broken source Verilator's --assert stops the run."""

from cocotb import test
from cocotb.triggers import ClockCycles, FallingEdge

from tests.block.cocotb_util import start_clock_and_reset


@test()
async def slow_sink(dut):
    await start_clock_and_reset(dut)
    dut.rst.value = 0
    dut.go.value = 1
    for cycle in range(60):
        dut.ready.value = int(cycle % 4 == 3)
        await FallingEdge(dut.clk)
    await ClockCycles(dut.clk, 2)

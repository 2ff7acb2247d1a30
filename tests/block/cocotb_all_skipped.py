"""A cocotb test module whose only test is skipped: running it must fail (nothing executed)."""

import cocotb


@cocotb.test(skip=True)
async def skipped(dut):
    raise AssertionError("never runs")

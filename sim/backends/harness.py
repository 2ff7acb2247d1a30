"""What every driver of the accelerator's testbench (sim/hdl/tb_top.v) does the same way, written
once: the ports it touches, the reset/start sequence, and counting finished layers from the PERF
records in DRAM. Pure Python with no imports, so the cocotb simulator process stays light.
"""

from __future__ import annotations

# Top ports the testbench touches (copies of hdl_gen/top_ports.py, which
# tests/unit/test_top_ports.py checks): inputs writable, outputs read-only. (Making an output
# public_flat_rw tells Verilator it may change outside eval(), so all logic reading it, e.g. the
# `error` that halts every unit, would be re-evaluated on every eval - a large slowdown.)
LAUNCH_PORTS = ("insn_base", "desc_base", "desc_count")  # arch.isa.Launch.FIELDS (a test checks)
TOP_INPUTS = ("clk", "rst", "start", *LAUNCH_PORTS)
TOP_OUTPUTS = ("running", "done", "error", "error_code", "error_index", "perf")
RESET_CYCLES = 4

#: Before each run, with the DRAM image loaded: ("set", port, value), ("launch",) = set the
#: launch registers, ("cycles", n) = let n rising clock edges pass. Then wait for done/error.
START_SEQUENCE: tuple[tuple, ...] = (
    ("set", "start", 0),
    ("launch",),
    ("set", "rst", 1),
    ("cycles", RESET_CYCLES),
    ("set", "rst", 0),
    ("cycles", 1),
    ("set", "start", 1),
    ("cycles", 1),
    ("set", "start", 0),
)


def layers_done(records: bytes, count: int, size: int, cycles_field: tuple[int, int]) -> int:
    """PERF records written so far among ``count`` records of ``size`` bytes: a layer's record
    (written at its end) has a non-zero cycle count (``cycles_field`` = bit offset, width)."""
    offset, width = cycles_field
    lo, hi = offset // 8, (offset + width) // 8
    return sum(any(records[n * size + lo : n * size + hi]) for n in range(count))

"""The signals a waveform save file shows, grouped by unit: one table for every config.

Paths are below the testbench top (``tb_top``; ``dut`` is sim_top, ``dut.accel`` the
accelerator). ``names`` picks how GTKWave shows the value: ``"opcode"`` and ``"error_code"``
translate through the ISA enums, ``"fsm"`` through the state names ``make rtl`` recorded in
``rtl/<config>/fsm_states.json``. A test reads a real dump and checks every path exists.
"""

from __future__ import annotations

from dataclasses import dataclass

TOP = "tb_top"


@dataclass(frozen=True)
class Trace:
    path: str  # below TOP
    fmt: str = "hex"  # GTKWave data format: hex, dec, bin
    names: str | None = None  # "opcode", "error_code" or "fsm"
    alias: str | None = None


def _unit(unit: str, *extra: Trace) -> tuple[Trace, ...]:
    """What every unit shows: its frame state, current instruction and stalls, then ``extra``."""
    base = f"dut.accel.{unit}"
    return (
        Trace(f"{base}.frame_state", names="fsm", alias=f"{unit}.frame"),
        Trace(f"{base}.opcode", names="opcode", alias=f"{unit}.opcode"),
        Trace(f"{base}.index", "dec", alias=f"{unit}.insn"),
        Trace(f"{base}.busy", "bin"),
        Trace(f"{base}.token_wait", "bin"),
        *extra,
    )


GROUPS: tuple[tuple[str, tuple[Trace, ...]], ...] = (
    (
        "status",
        (
            Trace("clk", "bin"),
            Trace("running", "bin"),
            Trace("done", "bin"),
            Trace("error", "bin"),
            Trace("error_code", names="error_code"),
            Trace("error_index", "dec"),
            Trace("dut.perf.cycles", "dec", alias="cycle (counter)"),
        ),
    ),
    (
        "fetch / decode",
        (
            Trace("dut.accel.fetch.pc", "dec", alias="fetch.pc"),
            Trace("dut.accel.fetch.word", alias="fetch.word"),
            Trace("dut.accel.fetch.stalled", "bin"),
            Trace("dut.accel.fetch.ended", "bin"),
            Trace("dut.accel.insn_started", "dec", alias="insns started (1 + highest)"),
            Trace("dut.accel.insn_frontier", "dec", alias="insns oldest not retired"),
        ),
    ),
    (
        "queues / tokens",
        (
            Trace("dut.accel.load_q__valid", "bin"),
            Trace("dut.accel.load_q__ready", "bin"),
            Trace("dut.accel.compute_q__valid", "bin"),
            Trace("dut.accel.compute_q__ready", "bin"),
            Trace("dut.accel.store_q__valid", "bin"),
            Trace("dut.accel.store_q__ready", "bin"),
            *(
                Trace(f"dut.accel.{unit}.deps__{strobe}", "bin", alias=f"{unit}.{strobe}")
                for unit in ("load", "compute", "store")
                for strobe in ("pop_prev", "pop_next", "push_prev", "push_next")
            ),
        ),
    ),
    (
        "load unit (DMA)",
        _unit(
            "load",
            Trace("dut.accel.load.load_state", names="fsm", alias="load.state"),
            Trace("dut.accel.load.fetcher.fetch_state", names="fsm", alias="load.descriptor"),
            Trace("dut.accel.load.addrgen.walk_state", names="fsm", alias="load.walk"),
            Trace("dut.accel.load.dram_wait", "bin"),
            Trace("dut.accel.load.in_flight", "dec"),
            Trace("dut.accel.load.act__en", "bin"),
            Trace("dut.accel.load.act__addr", "dec"),
            Trace("dut.accel.load.wgt__en", "bin"),
            Trace("dut.accel.load.wgt__addr", "dec"),
            Trace("dut.accel.load.param__en", "bin"),
        ),
    ),
    (
        "compute unit",
        _unit(
            "compute",
            Trace("dut.accel.compute.compute_state", names="fsm", alias="compute.state"),
            Trace("dut.accel.compute.line.line_state", names="fsm", alias="compute.lines"),
            Trace("dut.accel.compute.window.window_state", names="fsm", alias="compute.window"),
        ),
    ),
    (
        "array edge",
        (
            Trace("dut.accel.compute.array_active", "bin"),
            Trace("dut.accel.compute.weight_load", "bin"),
            Trace("dut.accel.compute.w_en", "bin"),
            Trace("dut.accel.compute.w_row", "dec"),
            Trace("dut.accel.compute.w_bank", "bin"),
            Trace("dut.accel.compute.w_data", alias="array weights in"),
            Trace("dut.accel.compute.bank", "bin"),
            Trace("dut.accel.compute.a", alias="array activations in"),
            Trace("dut.accel.compute.out", alias="array partial sums out"),
        ),
    ),
    (
        "accumulator",
        (
            Trace("dut.accel.compute.acc_rd__en", "bin"),
            Trace("dut.accel.compute.acc_rd__addr", "dec"),
            Trace("dut.accel.compute.acc_wr__en", "bin"),
            Trace("dut.accel.compute.acc_wr__addr", "dec"),
            Trace("dut.accel.compute.acc_wr__data"),
        ),
    ),
    (
        "post-processing (store)",
        _unit(
            "store",
            Trace("dut.accel.store.store_state", names="fsm", alias="store.state"),
            Trace("dut.accel.store.addrgen.walk_state", names="fsm", alias="store.walk"),
            Trace("dut.accel.store.acc__en", "bin"),
            Trace("dut.accel.store.acc__addr", "dec"),
            Trace("dut.accel.store.param__addr", "dec"),
            Trace("dut.accel.store.writing_perf", "bin"),
        ),
    ),
    (
        "DRAM port",
        (
            Trace("dut.dram_req__valid", "bin"),
            Trace("dut.dram_req__ready", "bin"),
            Trace("dut.dram_req__payload.addr", alias="dram read addr"),
            Trace("dut.dram_req__payload.tag", "dec", alias="dram read client"),
            Trace("dut.dram_resp__valid", "bin"),
            Trace("dut.dram_resp__payload.tag", "dec", alias="dram response client"),
            Trace("dut.dram_wr__valid", "bin"),
            Trace("dut.dram_wr__ready", "bin"),
            Trace("dut.dram_wr__payload.addr", alias="dram write addr"),
            Trace("dut.dram_wr__payload.strb", alias="dram write strobes"),
        ),
    ),
    (
        "counters",
        (
            *(
                Trace(f"dut.perf.{name}", "dec")
                for name in (
                    "insns_retired",
                    "macs",
                    "array_active",
                    "weight_load",
                    "load_busy",
                    "compute_busy",
                    "store_busy",
                    "load_token_wait",
                    "compute_token_wait",
                    "store_token_wait",
                    "dram_read_bytes",
                    "dram_write_bytes",
                    "dram_stall",
                    "fetch_stall",
                )
            ),
            Trace("dut.accel.watchdog", "dec"),
            Trace("dut.accel.blocked_for", "dec"),
        ),
    ),
)


def all_traces() -> list[Trace]:
    return [trace for _group, traces in GROUPS for trace in traces]


def label(trace: Trace) -> str:
    """The row's name in GTKWave: unique, led by its unit, without dots (GTKWave shows only
    the part after the last dot, which left four rows called ``pop_prev``)."""
    text = trace.alias or trace.path.removeprefix("dut.accel.").removeprefix("dut.")
    if text.startswith("dram_"):
        text = "dram " + text.removeprefix("dram_")
    return " ".join(text.replace("__", ".").replace(".", " ").split())


def full_name(trace: Trace) -> str:
    """The signal's name in the dump."""
    return f"{TOP}.{trace.path}"

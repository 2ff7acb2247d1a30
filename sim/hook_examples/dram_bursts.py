"""Example hook: count the accelerator's DRAM bursts per layer on the bus, check them against
the report (``make sim MODEL=cnn CONFIG=tiny HOOKS=sim.hook_examples.dram_bursts``).

The monitor watches the DRAM streams at the accelerator's boundary (read requests, read data
beats, write beats with their byte strobes), every cycle. A layer ends with its PERF record, so
the first write beat into record k closes layer k on the bus. The report's per-layer bytes come
from the PERF counters inside the accelerator (snapshots taken when the store unit runs the
PERF instruction): an independent view of the same traffic, which must agree byte for byte.
"""

from __future__ import annotations

from typing import Any

from cocotb.triggers import ReadOnly, RisingEdge

from sim.backends.hooks import HookCheckFailed, HookContext


def _popcount(value: int) -> int:
    return bin(value).count("1")


async def hook(dut: Any, ctx: HookContext) -> None:
    bus = dut.dut
    bus_bytes = ctx.bus_bytes
    base, count = ctx.run.get("perf_base"), ctx.run.get("perf_count", 0)
    records = range(base, base + count * ctx.perf_bytes) if base is not None else range(0)
    layers: list[dict[str, int]] = [
        {"read_bursts": 0, "read_bytes": 0, "write_bursts": 0, "write_bytes": 0}
    ]
    ctx.result["bus_bytes"] = bus_bytes
    ctx.result["layers"] = layers  # index k: the beats up to PERF record k's first beat
    closed = -1
    while True:
        await RisingEdge(dut.clk)
        await ReadOnly()
        now = layers[-1]
        if int(bus.dram_req__valid.value) and int(bus.dram_req__ready.value):
            now["read_bursts"] += 1
        if int(bus.dram_resp__valid.value):
            now["read_bytes"] += bus_bytes
        if int(bus.dram_wr__valid.value) and int(bus.dram_wr__ready.value):
            payload = int(bus.dram_wr__payload.value)
            address = payload & 0xFFFF_FFFF
            strobes = payload >> (32 + 8 * bus_bytes)
            if address in records and (address - records.start) // ctx.perf_bytes > closed:
                closed = (address - records.start) // ctx.perf_bytes
                layers.append({key: 0 for key in now})
                now = layers[-1]
            now["write_bursts"] += 1
            now["write_bytes"] += _popcount(strobes)


def on_report(report: dict[str, Any]) -> str:
    """Every layer's DRAM bytes read and written on the bus equal to the report's; raises
    :class:`HookCheckFailed` naming the first layer that differs."""
    layers = {layer["name"]: layer for layer in report["layers"]}
    checked = bursts = 0
    for entry in report["hooks"][__name__]:
        seen = entry["result"]["layers"]
        for record, name in enumerate(entry["layer_of_record"]):
            if name is None or record >= len(seen):
                continue
            for kind in ("read", "write"):
                want, got = layers[name][f"dram_{kind}_bytes"], seen[record][f"{kind}_bytes"]
                if want != got:
                    raise HookCheckFailed(
                        f"layer {name}: {got} DRAM {kind} bytes on the bus, the report says {want}"
                    )
            bursts += seen[record]["read_bursts"] + seen[record]["write_bursts"]
            checked += 1
    return f"{checked} layers: DRAM bytes on the bus agree with the report ({bursts} bursts)"

"""allocate: the DRAM memory map.

In address order: the program, the descriptor table, the perf records (one per layer), then
per layer its weight tiles and PARAM lines, then the tensors that hold a constant's codes (a
constant, or the concat of a class token and the tokens: the image prefills them and no layer
writes those bytes, so every run sees them), then every other activation tensor - each in its
own region, never reused, so every layer's output can be read back and checked after a run.
Regions are 64-byte aligned (4 KiB for the big ones).
"""

from __future__ import annotations

from arch import isa
from compiler.constants import param_size, weight_size
from compiler.passes.steps import param_symbol, weight_symbol
from compiler.plan import Plan, round_up

PROGRAM_BASE = 0x1000


def run(plan: Plan) -> Plan:
    dim = plan.dim
    accel = plan.accel_layers()
    instructions = sum(len(layer.ops) for layer in accel) + 1  # + END
    descriptors = sum(1 for layer in accel for op in layer.ops if op.desc is not None)
    cursor = PROGRAM_BASE

    def region(name: str, size: int, align: int = 64) -> int:
        nonlocal cursor
        addr = round_up(cursor, align)
        plan.regions.append((name, addr, size))
        plan.symbols[name] = addr
        cursor = addr + max(size, 1)
        return addr

    region("program", instructions * isa.INSN_BYTES)
    region("descriptors", descriptors * isa.DESC_BYTES)
    region("perf", len(accel) * isa.PERF_RECORD.nbytes, isa.PERF_RECORD.nbytes)
    for layer in accel:
        if layer.kind == "gemm":
            region(weight_symbol(layer), weight_size(layer, dim), 4096)
        region(param_symbol(layer), param_size(plan, layer))
    prefilled = constant_owners(plan)
    for name in prefilled:
        plan.tensors[name].addr = region(name, plan.tensors[name].nbytes, 4096)
    plan.launch["image_bytes"] = cursor
    for name, tensor in plan.tensors.items():
        if tensor.alias_of is None and name not in prefilled:
            tensor.addr = region(name, tensor.nbytes, 4096)
    return plan


def constant_owners(plan: Plan) -> list[str]:
    """The tensors whose bytes hold a constant's codes (it, or the concat it is a piece of):
    they are part of the DRAM image, which emit fills."""
    owners = [plan.tensor(layer.output).name for layer in plan.layers if layer.kind == "constant"]
    return list(dict.fromkeys(owners))

"""The listing: what a person reads next to a waveform - the memory map, the layer table, the
disassembly annotated with layer names, and the descriptor table."""

from __future__ import annotations

from arch import asm
from compiler.plan import Plan


def render(plan: Plan, model_name: str) -> str:
    assert plan.program is not None
    lines = [
        f"; model {model_name}, config {plan.config.name}",
        f"; {len(plan.program.insns)} instructions, {len(plan.program.descs)} descriptors",
        f"; launch: insn_base=0x{plan.launch['insn_base']:x} "
        f"desc_base=0x{plan.launch['desc_base']:x} desc_count={plan.launch['desc_count']}",
        ";",
        "; memory map",
    ]
    for name, addr, size in sorted(plan.regions, key=lambda r: r[1]):
        lines.append(f";   0x{addr:08x}  {size:>10d}  {name}")
    lines += [";", "; layers (instructions [start, end), tiling)"]
    for layer in plan.accel_layers():
        tiling = layer.tiling
        detail = (
            f"rows/tile={tiling.rows_per_tile} n_blocks={tiling.n_blocks} k_group={tiling.k_group}"
            if tiling
            else ""
        )
        lines.append(
            f";   [{layer.insn_range[0]:6d}, {layer.insn_range[1]:6d})  {layer.name:<28} "
            f"{layer.node.op:<15} macs={layer.macs:<11d} {detail}"
        )
    notes = {}
    for layer in plan.accel_layers():
        notes[layer.insn_range[0]] = f"<- {layer.name} ({layer.node.op})"
    lines += [";", "; program"]
    text = asm.disassemble(asm.Program(plan.program.insns, []), notes)
    lines += text.splitlines()
    lines += [";", "; descriptor table"]
    lines += [f"{asm.format_desc(d)}  ; desc {i}" for i, d in enumerate(plan.program.descs)]
    return "\n".join(lines) + "\n"

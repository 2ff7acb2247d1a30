"""The listing: what a person reads next to a waveform - the memory map, the layer table, the
disassembly annotated with layer names, and the descriptor table of each device program.

It is rendered from the executable alone (the program is disassembled from its DRAM image), so a
saved executable has the same listing as the run that compiled it.
"""

from __future__ import annotations

from arch import asm, isa
from arch.executable import DeviceProgram, Executable


def program_of(program: DeviceProgram) -> asm.Program:
    """The instructions and descriptor table, decoded from the program's DRAM image."""
    launch, image = program.launch, program.image
    insns = image[launch.insn_base : launch.insn_base + program.instructions * isa.INSN_BYTES]
    descs = image[launch.desc_base : launch.desc_base + launch.desc_count * isa.DESC_BYTES]
    return asm.Program.from_bytes(insns.tobytes(), descs.tobytes())


def _render_program(program: DeviceProgram) -> list[str]:
    code = program_of(program)
    launch = program.launch
    lines = [
        f"; {len(code.insns)} instructions, {len(code.descs)} descriptors",
        f"; launch: insn_base=0x{launch.insn_base:x} "
        f"desc_base=0x{launch.desc_base:x} desc_count={launch.desc_count}",
        ";",
        "; memory map",
    ]
    for region in sorted(program.regions, key=lambda r: r.addr):
        lines.append(f";   0x{region.addr:08x}  {region.nbytes:>10d}  {region.name}")
    lines += [";", "; layers (instructions [start, end), tiling)"]
    for layer in program.layers:
        tiling = layer.tiling
        detail = (
            f"rows/tile={tiling['rows_per_tile']} n_blocks={tiling['n_blocks']} "
            f"k_group={tiling['k_group']}" + (" input_reuse" if tiling.get("input_reuse") else "")
            if tiling
            else ""
        )
        lines.append(
            f";   [{layer.insn_range[0]:6d}, {layer.insn_range[1]:6d})  {layer.name:<28} "
            f"{layer.op:<15} macs={layer.macs:<11d} {detail}"
        )
    notes = {layer.insn_range[0]: f"<- {layer.name} ({layer.op})" for layer in program.layers}
    lines += [";", "; program"]
    lines += asm.disassemble(asm.Program(code.insns, []), notes).splitlines()
    lines += [";", "; descriptor table"]
    lines += [f"{asm.format_desc(d)}  ; desc {i}" for i, d in enumerate(code.descs)]
    return lines


def render(exe: Executable) -> str:
    """The listing of every device program; with several, each is headed by its step and the
    host steps between them are named."""
    lines = [f"; model {exe.model}, config {exe.config.name}"]
    programs = exe.programs
    if len(programs) == 1:
        lines += _render_program(programs[0])
        return "\n".join(lines) + "\n"
    for index, step in enumerate(exe.steps):
        lines.append(";")
        if isinstance(step, DeviceProgram):
            lines.append(f"; ==== step {index}: device program {step.name}")
            lines += _render_program(step)
        else:
            lines.append(
                f"; ==== step {index}: host {step.op} {step.name}: "
                f"{', '.join(step.inputs)} -> {', '.join(step.outputs)}"
            )
            if step.reason:
                lines.append(f";      on the host because: {step.reason}")
    return "\n".join(lines) + "\n"

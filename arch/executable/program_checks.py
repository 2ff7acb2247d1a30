"""A device program's image against its manifest fields: the launch registers aligned, every
instruction one the ISA decodes up to its END, each PERF record where ``perf_base`` says and
inside one region, and no image byte outside every region - so a file whose digest was
recomputed after an edit is still refused in one line, never run into an internal error."""

from __future__ import annotations

import numpy as np

from arch import isa
from arch.executable.format import DeviceProgram, Region
from arch.executable.reader import Reader
from arch.isa import IsaError, Opcode


def check_program_image(reader: Reader, where: str, program: DeviceProgram) -> None:
    """Refuse ``program`` (step ``where``) if its image and fields disagree (module docstring)."""
    launch = program.launch
    for field, unit, what in (("insn_base", isa.INSN_BYTES, "an instruction"),
                              ("desc_base", isa.DESC_BYTES, "a descriptor")):  # fmt: skip
        if getattr(launch, field) % unit:
            reader.fail(
                f"{where}: launch {field} 0x{getattr(launch, field):x} must be a multiple of "
                f"{unit} bytes ({what})"
            )
    _check_regions_cover_image(reader, where, program.image, program.regions)
    _check_tensors_in_regions(reader, where, program)
    perf = _check_instructions(reader, where, program)
    _check_perf(reader, where, program, perf)


def _check_instructions(reader: Reader, where: str, program: DeviceProgram) -> dict[int, int]:
    """Decode every instruction; the last (only the last) is END. Returns the address each
    PERF (by instruction index) writes its record to."""
    base, count = program.launch.insn_base, program.instructions
    words = program.image[base : base + count * isa.INSN_BYTES].reshape(count, isa.INSN_BYTES)
    opcodes = words[:, 0] & 0xF  # the opcode is the word's low 4 bits
    ends = np.flatnonzero(opcodes == Opcode.END.value)
    if ends.size != 1 or ends[0] != count - 1:
        first = int(ends[0]) if ends.size else None
        reader.fail(
            f"{where}: its {count} instructions at 0x{base:x} must end with their one END; "
            + ("there is none" if first is None else f"instruction {first} is END")
        )
    perf: dict[int, int] = {}
    for index, row in enumerate(words):
        try:
            insn = isa.decode_insn(int.from_bytes(row.tobytes(), "little"), index)
        except IsaError as exc:
            reader.fail(f"{where}: program at 0x{base:x}: {exc}")
        if insn.opcode is Opcode.PERF:
            perf[index] = insn["dram_addr"]
    return perf


def _check_perf(reader: Reader, where: str, program: DeviceProgram, perf: dict[int, int]) -> None:
    """Layer i's record is at ``perf_base`` + i records, where a PERF among its instructions
    writes it, and all records lie inside one region."""
    size = isa.PERF_RECORD.nbytes
    for layer in program.layers:
        at = program.perf_base + layer.perf_index * size
        start, end = layer.insn_range
        wrote = [addr for index, addr in perf.items() if start <= index < end]
        if at not in wrote:
            said = (
                f"its PERF writes 0x{wrote[0]:x}" if wrote else "none of its instructions is a PERF"
            )
            reader.fail(
                f"{where}: perf_base 0x{program.perf_base:x} puts layer "
                f"{layer.perf_index}'s PERF record at 0x{at:x}, but {said}"
            )
    if program.layers:
        start, end = program.perf_base, program.perf_base + len(program.layers) * size
        if not any(r.addr <= start and end <= r.addr + r.nbytes for r in program.regions):
            reader.fail(
                f"{where}: perf_base 0x{start:x}: its PERF records [0x{start:x}, 0x{end:x}) lie "
                "inside no region"
            )


def _check_regions_cover_image(
    reader: Reader, where: str, image: np.ndarray, regions: list[Region]
) -> None:
    """Every nonzero image byte lies inside a region (the rest become guard bands)."""
    free = np.ones(image.size, dtype=bool)
    for region in regions:
        free[region.addr : region.addr + region.nbytes] = False
    stray = np.flatnonzero(free & (image != 0))
    if stray.size:
        reader.fail(
            f"{where}: the image has data at 0x{int(stray[0]):x}, outside every region (its "
            "regions' addresses or sizes do not match the image)"
        )


def _check_tensors_in_regions(reader: Reader, where: str, program: DeviceProgram) -> None:
    """Every DRAM tensor lies inside one region (the run writes inputs there: a tensor moved
    out of its region would write into a guard band)."""
    spans = [(r.addr, r.addr + r.nbytes) for r in program.regions]
    for name, tensor in program.tensors.items():
        start, end = tensor.addr, tensor.addr + tensor.nbytes
        if not any(lo <= start and end <= hi for lo, hi in spans):
            reader.fail(
                f"{where}: tensor {name!r} at 0x{start:x}..0x{end:x} lies in no region (its "
                "address or size does not match the memory map)"
            )

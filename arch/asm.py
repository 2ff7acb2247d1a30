"""Assembler (text -> binary) and disassembler (binary -> text) built on :mod:`arch.isa`.

Text form, one item per line (``;`` starts a comment)::

    .desc mem=ACT local_base=0 dram_base=0x1000 loops[3].count=16 loops[3].dram_stride=16 ...
    load desc=0 +push_next
    gemm wgt_addr=0 act_addr=0 acc_addr=0 m=16 k_iter=1 n_iter=1 +pop_prev +push_prev
    end

``.desc`` lines append to the descriptor table in order. Fields left out are zero; enum fields
take member names; ``+flag`` sets a dependency flag (``+pop_prev``, ``+push_next``...).
The disassembler prints exactly this form, so ``assemble(disassemble(p)) == p``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from arch import isa


@dataclass
class Program:
    """Instructions plus the descriptor table they refer to."""

    insns: list[isa.Instruction] = field(default_factory=list)
    descs: list[dict[str, Any]] = field(default_factory=list)

    def insn_bytes(self) -> bytes:
        return isa.words_to_bytes([i.encode() for i in self.insns], isa.INSN_BYTES)

    def desc_bytes(self) -> bytes:
        words = [isa.encode_record(isa.DESCRIPTOR, d) for d in self.descs]
        return isa.words_to_bytes(words, isa.DESC_BYTES)

    @classmethod
    def from_bytes(cls, insn_blob: bytes, desc_blob: bytes = b"") -> Program:
        insns = [
            isa.decode_insn(w, i)
            for i, w in enumerate(isa.bytes_to_words(insn_blob, isa.INSN_BYTES))
        ]
        descs = [
            isa.decode_record(isa.DESCRIPTOR, w)
            for w in isa.bytes_to_words(desc_blob, isa.DESC_BYTES)
        ]
        return cls(insns, descs)


class AsmError(ValueError):
    """A line of assembly cannot be parsed; the message gives the line number and text."""


def _parse_value(text: str) -> int | str:
    try:
        return int(text, 0)
    except ValueError:
        return text  # an enum member name; validated by the encoder


def _parse_fields(tokens: list[str], lineno: int, line: str) -> tuple[dict[str, Any], list[str]]:
    values: dict[str, Any] = {}
    flags: list[str] = []
    for token in tokens:
        if token.startswith("+"):
            flags.append(token[1:])
        elif "=" in token:
            name, _, value = token.partition("=")
            values[name] = _parse_value(value)
        else:
            raise AsmError(f"line {lineno}: expected field=value or +flag, got {token!r}: {line}")
    return values, flags


def assemble(text: str) -> Program:
    """Parse assembly text into a :class:`Program` (validating every field)."""
    program = Program()
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split(";", 1)[0].strip()
        if not line:
            continue
        head, *tokens = line.split()
        values, flags = _parse_fields(tokens, lineno, raw.strip())
        try:
            if head == ".desc":
                if flags:
                    raise AsmError(f"line {lineno}: descriptors take no +flags: {raw.strip()}")
                isa.encode_record(isa.DESCRIPTOR, values)  # validate now, with the line number
                program.descs.append(values)
                continue
            try:
                opcode = isa.Opcode[head.upper()]
            except KeyError:
                known = ", ".join(f.name for f in isa.FORMATS.values())
                raise AsmError(
                    f"line {lineno}: unknown mnemonic {head!r} (known: {known})"
                ) from None
            bad = [f for f in flags if f"deps.{f}" not in isa.DEPS_PATHS]
            if bad:
                raise AsmError(f"line {lineno}: unknown flag(s) {bad}; flags: {isa.DEP_FLAGS}")
            program.insns.append(isa.make(opcode, tuple(flags), **values))
        except isa.IsaError as exc:
            raise AsmError(f"line {lineno}: {exc}: {raw.strip()}") from None
    program.descs = [
        isa.decode_record(isa.DESCRIPTOR, isa.encode_record(isa.DESCRIPTOR, d))
        for d in program.descs
    ]
    return program


def _format_value(path: str, value: Any) -> str:
    if hasattr(value, "name") and not isinstance(value, int):
        return value.name
    if isinstance(value, int) and path.endswith(("dram_base", "dram_addr")):
        return hex(value)
    return str(value)


def format_fields(fmt: isa.Format, values: dict[str, Any], everything: bool = True) -> str:
    """``name=value`` for the fields after the header (only non-zero ones unless ``everything``;
    quiet fields only when non-zero)."""
    parts = []
    for leaf in fmt.leaves:
        if leaf.path == "opcode" or leaf.path.startswith("deps."):
            continue
        value = values.get(leaf.path, 0)
        if (everything and not leaf.quiet) or leaf.enum is not None or value != 0:
            parts.append(f"{leaf.path}={_format_value(leaf.path, value)}")
    return " ".join(parts)


def format_insn(insn: isa.Instruction) -> str:
    flags = [f"+{flag}" for flag in isa.DEP_FLAGS if insn.fields.get(f"deps.{flag}")]
    return " ".join(
        p for p in (insn.format.name, format_fields(insn.format, insn.fields), *flags) if p
    )


def format_desc(desc: dict[str, Any]) -> str:
    return ".desc " + format_fields(isa.DESCRIPTOR, desc, everything=False)


def disassemble(program: Program, notes: dict[int, str] | None = None) -> str:
    """Assembly text of ``program``; ``notes`` maps instruction index -> comment (layer names)."""
    lines = [format_desc(d) + f"  ; desc {i}" for i, d in enumerate(program.descs)]
    for index, insn in enumerate(program.insns):
        note = f" {notes[index]}" if notes and index in notes else ""
        lines.append(f"{format_insn(insn)}  ; #{index}{note}")
    return "\n".join(lines) + "\n"

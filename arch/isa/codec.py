"""Encode and decode instructions, descriptors and records (flattened field paths <-> ints)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from amaranth import Shape

from arch.isa.constants import DESC_LOOPS, IsaError
from arch.isa.enums import Mem, Opcode, Queue
from arch.isa.formats import DESCRIPTOR, FORMATS, queue_of
from arch.isa.record import Format, Leaf


def encode_record(fmt: Format, values: dict[str, Any]) -> int:
    """Pack ``values`` (flattened paths -> int or enum member) into an integer of ``fmt.bits``.

    Missing fields are 0. Raises :class:`IsaError` naming the field for unknown names, values out
    of range and non-members of an enum field.
    """
    if not fmt.leaf_by_path.keys() >= values.keys():
        unknown = set(values) - set(fmt.leaf_by_path)
        raise IsaError(
            f"{fmt.name}: unknown field(s) {sorted(unknown)}; fields: {', '.join(fmt.leaf_by_path)}"
        )
    if fmt.opcode is not None:
        given = values.get("opcode", fmt.opcode)
        if given not in (fmt.opcode, fmt.opcode.value, fmt.opcode.name):
            raise IsaError(f"{fmt.name}.opcode = {given!r}, but the format is {fmt.opcode.name}")
        values = {**values, "opcode": fmt.opcode}
    word = 0
    get = values.get
    for leaf, path, offset, mask, lo, hi, members in fmt.packing:
        value = get(path, 0)
        if members is not None:
            value = _enum_value(fmt, leaf, value)
        elif type(value) is not int and (isinstance(value, bool) or not isinstance(value, int)):
            raise IsaError(f"{fmt.name}.{path} must be an integer, not {value!r}")
        if not lo <= value <= hi:
            raise IsaError(
                f"{fmt.name}.{path} = {value} is out of range {lo}..{hi} "
                f"({'signed' if leaf.signed else 'unsigned'} {leaf.width} bits)"
            )
        word |= (value & mask) << offset
    return word


def _enum_value(fmt: Format, leaf: Leaf, value: Any) -> int:
    """The integer of ``value`` (a member, its name or its value) for enum field ``leaf``."""
    assert leaf.enum is not None
    if isinstance(value, str):
        try:
            value = leaf.enum[value]
        except KeyError:
            raise IsaError(_enum_error(fmt, leaf, value)) from None
    if not isinstance(value, leaf.enum):
        try:
            value = leaf.enum(value)
        except ValueError:
            raise IsaError(_enum_error(fmt, leaf, value)) from None
    result = value.value
    if isinstance(result, bool) or not isinstance(result, int):
        raise IsaError(f"{fmt.name}.{leaf.path} must be an integer, not {result!r}")
    return result


def _enum_error(fmt: Format, leaf: Leaf, value: object) -> str:
    assert leaf.enum is not None
    names = ", ".join(m.name for m in leaf.enum)
    return f"{fmt.name}.{leaf.path} = {value!r} is not one of {names}"


def decode_record(fmt: Format, word: int) -> dict[str, Any]:
    """Unpack an integer into flattened field values (enum fields as members)."""
    values: dict[str, Any] = {}
    for leaf, path, offset, mask, _, _, members in fmt.packing:
        raw = (word >> offset) & mask
        if leaf.signed and raw >> (leaf.width - 1):
            raw -= 1 << leaf.width
        if members is not None:
            member = members.get(raw)
            if member is None:
                raise IsaError(_enum_error(fmt, leaf, raw))
            values[path] = member
        else:
            values[path] = raw
    return values


@dataclass(frozen=True)
class Instruction:
    """A decoded instruction: its opcode and flattened field values (``deps.*`` included)."""

    opcode: Opcode
    fields: dict[str, Any]

    @property
    def format(self) -> Format:
        return FORMATS[self.opcode]

    @property
    def queue(self) -> Queue | None:
        return queue_of(self.opcode, self.fields)

    def __getitem__(self, path: str) -> Any:
        return self.fields[path]

    def encode(self) -> int:
        return encode_record(self.format, {**self.fields, "opcode": self.opcode})


def make(opcode: Opcode | str, deps: str | tuple[str, ...] = (), **fields: Any) -> Instruction:
    """Build and validate an instruction, e.g. ``make("gemm", m=49, k_iter=1, n_iter=4)``.

    ``deps`` lists token flags: ``(Token.POP_PREV, Token.PUSH_NEXT)``, ``("pop_prev",
    "push_next")`` or ``"pop_prev,push_next"`` (a :class:`Token` is its flag's name).
    """
    op = Opcode[opcode.upper()] if isinstance(opcode, str) else opcode
    flags = deps.split(",") if isinstance(deps, str) else list(deps)
    values = {f"deps.{flag.strip()}": 1 for flag in flags if flag.strip()}
    values.update(fields)
    return decode_insn(encode_record(FORMATS[op], {**values, "opcode": op}))


def decode_insn(word: int, index: int | None = None) -> Instruction:
    """Decode one 128-bit instruction word; :class:`IsaError` names an illegal opcode."""
    raw = word & ((1 << Shape.cast(Opcode).width) - 1)
    try:
        opcode = Opcode(raw)
    except ValueError:
        where = f"instruction {index}: " if index is not None else ""
        raise IsaError(f"{where}illegal opcode {raw} (word 0x{word:032x})") from None
    fields = decode_record(FORMATS[opcode], word)
    del fields["opcode"]
    return Instruction(opcode, fields)


def descriptor(
    mem: Mem | str,
    local_base: int,
    dram_base: int,
    loops: list[tuple[int, ...]],
    *,
    y0: int = 0,
    x0: int = 0,
    height: int = 0,
    width: int = 0,
    pad_value: int = 0,
) -> dict[str, Any]:
    """Descriptor fields for a loop nest given innermost-last as ``(count, dram_stride,
    local_stride[, ystep, xstep])`` tuples; unused outer levels get count 1. ``dram_base`` may be
    negative or beyond 2**32 (it is taken modulo 2**32)."""
    if len(loops) > DESC_LOOPS:
        raise IsaError(f"a descriptor has {DESC_LOOPS} loop levels, {len(loops)} were given")
    padded = [(1, 0, 0)] * (DESC_LOOPS - len(loops)) + list(loops)
    values: dict[str, Any] = {
        "mem": Mem[mem] if isinstance(mem, str) else mem,
        "local_base": local_base,
        "dram_base": dram_base % (1 << 32),
        "y0": y0,
        "x0": x0,
        "height": height,
        "width": width,
        "pad_value": pad_value,
    }
    keys = ("count", "dram_stride", "local_stride", "ystep", "xstep")
    for level, loop in enumerate(padded):
        for key, value in zip(keys, loop, strict=False):
            values[f"loops[{level}].{key}"] = value
    encode_record(DESCRIPTOR, values)  # validate now, naming the field
    return values


def words_to_bytes(words: list[int], nbytes: int) -> bytes:
    """Little-endian concatenation of fixed-size words."""
    return b"".join(w.to_bytes(nbytes, "little") for w in words)


def bytes_to_words(blob: bytes, nbytes: int) -> list[int]:
    if len(blob) % nbytes:
        raise IsaError(f"{len(blob)} bytes is not a whole number of {nbytes}-byte words")
    return [int.from_bytes(blob[i : i + nbytes], "little") for i in range(0, len(blob), nbytes)]

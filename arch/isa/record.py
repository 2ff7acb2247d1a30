"""The ISA as data: :class:`Field` lists make a :class:`Format`, flattened into :class:`Leaf`
scalars with bit offsets."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from amaranth import Shape
from amaranth.lib import data, enum

from arch.isa.enums import Opcode, Queue


@dataclass(frozen=True)
class Field:
    """One named field of a format: its Amaranth shape (or enum, or nested layout) and meaning."""

    name: str
    shape: Any
    doc: str
    quiet: bool = False  #: listings omit it when 0 (an optional feature most programs leave off)


@dataclass(frozen=True)
class Leaf:
    """A flattened scalar field: dotted path, bit offset, width, signedness, enum type."""

    path: str
    offset: int
    width: int
    signed: bool
    enum: type[enum.Enum] | None
    doc: str
    quiet: bool = False

    @property
    def lo(self) -> int:
        return -(1 << (self.width - 1)) if self.signed else 0

    @property
    def hi(self) -> int:
        return (1 << (self.width - 1)) - 1 if self.signed else (1 << self.width) - 1


@dataclass(frozen=True)
class Format:
    """A fixed-size record: instruction format, descriptor, parameter entry or perf record."""

    name: str
    doc: str
    fields: tuple[Field, ...]
    bits: int
    opcode: Opcode | None = None
    queue: Queue | None = None

    @functools.cached_property
    def layout(self) -> data.StructLayout:
        layout = data.StructLayout({f.name: _layout_shape(f.shape) for f in self.fields})
        if layout.size > self.bits:
            raise AssertionError(f"{self.name} needs {layout.size} bits, has {self.bits}")
        return layout

    @functools.cached_property
    def leaves(self) -> tuple[Leaf, ...]:
        return tuple(_flatten(self, "", 0))

    @functools.cached_property
    def leaf_by_path(self) -> dict[str, Leaf]:
        return {leaf.path: leaf for leaf in self.leaves}

    @functools.cached_property
    def packing(self) -> tuple[tuple[Leaf, str, int, int, int, int, dict[int, Any] | None], ...]:
        """Per leaf, what encoding and decoding need, computed once: the leaf, its path, offset,
        mask, lo and hi, and its enum's members by value (None for a plain integer)."""
        return tuple(
            (
                leaf,
                leaf.path,
                leaf.offset,
                (1 << leaf.width) - 1,
                leaf.lo,
                leaf.hi,
                {m.value: m for m in leaf.enum} if leaf.enum is not None else None,
            )
            for leaf in self.leaves
        )

    @property
    def nbytes(self) -> int:
        return self.bits // 8


def _layout_shape(shape: Any) -> Any:
    if isinstance(shape, Format):
        return shape.layout
    if isinstance(shape, tuple):  # (Format, count): an array of records
        return data.ArrayLayout(_layout_shape(shape[0]), shape[1])
    return shape


def _flatten(fmt: Format, prefix: str, base: int) -> list[Leaf]:
    """Scalar leaves of ``fmt`` with dotted paths (``deps.pop_prev``, ``loops[3].count``)."""
    leaves: list[Leaf] = []
    for f in fmt.fields:
        offset = base + fmt.layout[f.name].offset
        path = prefix + f.name
        if isinstance(f.shape, Format):
            leaves += _flatten(f.shape, path + ".", offset)
        elif isinstance(f.shape, tuple):
            sub, count = f.shape
            for i in range(count):
                leaves += _flatten(sub, f"{path}[{i}].", offset + i * sub.layout.size)
        else:
            is_enum = isinstance(f.shape, type) and issubclass(f.shape, enum.Enum)
            cast = Shape.cast(f.shape)
            enum_type = f.shape if is_enum else None
            leaves.append(Leaf(path, offset, cast.width, cast.signed, enum_type, f.doc, f.quiet))
    return leaves

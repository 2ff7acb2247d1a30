"""The pieces a layer's schedule is built of: steps, DRAM symbols, groups of a range."""

from __future__ import annotations

from dataclasses import dataclass, field

from compiler.plan import Layer, Op


@dataclass
class Step:
    """The loads one compute phase needs, its compute instructions and, on the last step of an
    m tile, the tile's store (see :mod:`compiler.passes.schedule`)."""

    loads: list[Op] = field(default_factory=list)
    compute: list[Op] = field(default_factory=list)
    tile: int = 0
    first_of_tile: bool = False
    store: list[Op] = field(default_factory=list)
    # Each further part of a split step (compiler.passes.ramp): the last load before it (which
    # pushes a token) and its first compute (which pops it). Ops, not indices: a table load is
    # inserted at the front of a layer's first step later.
    parts: list[tuple[Op, Op]] = field(default_factory=list)


def weight_symbol(layer: Layer) -> str:
    """The DRAM region of a layer's weight tiles (placed by the allocate pass)."""
    return f"{layer.name}#weights"


def param_symbol(layer: Layer) -> str:
    """The DRAM region of a layer's PARAM lines."""
    return f"{layer.name}#params"


def groups(total: int, size: int) -> list[tuple[int, int]]:
    """(start, count) pieces of ``range(total)`` of at most ``size``."""
    return [(start, min(size, total - start)) for start in range(0, total, size)]

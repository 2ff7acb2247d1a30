"""A decode step's KV-cache append as a hand-written program: the design check of
docs/language-model.md ("Decoding with a KV cache"), that the ISA needs no new instruction.

One step at position p appends the new token's key and value rows (``F`` channels, arriving
in ACC as a projection leaves them) to the caches of one layer:

1. STORE the key row into the key-rows cache (tokens: position-major, ``F`` bytes a
   position) at row p, and the value row into the value cache (tokens) at row p;
2. LOAD the key rows of p's block (the ``cols`` positions from ``cols * (p // cols)``) back,
   ACCUM them into ACC unchanged, and STORE them transposed over the same block of the k^T
   cache (for each head h and channel j of the head a line of the T positions, the layout the
   compiler's transposing stores give ``q @ k^T``: ``addr = (j * H + h) * T + position``).

A transposing STORE writes whole blocks of ``cols`` lines, ``cols`` positions each, at
addresses aligned to a line, so one key column cannot be written alone at any p: the block is
rewritten from the key rows, positions after p included (they hold what the cache holds there,
and the softmax masks them). Only the descriptors of steps 1 and 2 depend on p; the
instructions are the same for every p, so one program serves every step and the host picks
the step's descriptor table with the launch register ``desc_base``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arch import isa
from arch.config import AccelConfig
from arch.isa import Launch
from tests.programs import Builder


@dataclass(frozen=True)
class Geometry:
    """One layer's cache: ``heads`` heads of ``head_lines`` lines of ``cols`` channels each,
    ``context`` positions (a multiple of ``cols``)."""

    cols: int
    heads: int
    head_lines: int
    context: int

    @property
    def head_dim(self) -> int:
        return self.head_lines * self.cols

    @property
    def features(self) -> int:
        return self.heads * self.head_dim

    @property
    def lines(self) -> int:
        """ACT/ACC lines of one token row."""
        return self.features // self.cols


@dataclass(frozen=True)
class Places:
    """DRAM addresses of the step's tensors and of the descriptor tables."""

    key_rows: int
    key_t: int
    values: int
    new_rows: int  # the new key row, then the new value row (the projections' output)
    params: int
    tables: int  # one descriptor table per position, ``table_bytes`` apart


def place(b: Builder, geo: Geometry, table_bytes: int) -> Places:
    """Allocate the caches (zero), the new rows and identity PARAM lines in ``b``'s DRAM."""
    size = geo.context * geo.features
    key_rows, key_t, values = (b.alloc(size, name=n) for n in ("k_rows", "k_t", "v"))
    new_rows = b.alloc(2 * geo.features, name="new_rows")
    lines = max(geo.lines, geo.heads)
    ones = np.ones(lines * geo.cols, np.int64)
    params = b.put_params(mult=ones, res_mult=ones)  # requant(x, 1, 0) = x
    tables = b.alloc(geo.context * table_bytes, name="tables")
    return Places(key_rows, key_t, values, new_rows, params, tables)


def key_t_address(geo: Geometry, head: int, channel: int, position: int) -> int:
    """Byte offset of (head, channel of the head, position) in the k^T cache."""
    return (channel * geo.heads + head) * geo.context + position


def emit_step(b: Builder, geo: Geometry, at: Places, p: int) -> None:
    """The append of position ``p``: descriptors (some depend on p) and instructions (none
    does) into ``b``."""
    d, lines, f = geo.cols, geo.lines, geo.features
    block = p // d * d
    b.load_params(at.params, max(lines, geo.heads))
    b.load_lines("ACT", 0, at.new_rows, 2 * lines, d, deps="push_next")
    identity = dict(param_addr=0, clamp_lo=-128, clamp_hi=127)
    b.emit("accum", "pop_prev,push_next", acc_addr=0, act_addr=0, param_addr=0, m=2 * lines,
           n_iter=1, use_res=1)  # fmt: skip
    rows = [(lines, d, 1)]
    k_row = b.desc("ACC", 0, at.key_rows + p * f, rows)
    v_row = b.desc("ACC", lines, at.values + p * f, rows)
    b.emit("store", "pop_prev", desc=k_row, **identity)
    b.emit("store", "push_prev", desc=v_row, **identity)
    b.emit("sync", "pop_next,push_prev", queue="COMPUTE")  # the rows are in DRAM
    # the key rows of p's block: channel line j of position i to ACT line j * d + i
    block_rows = b.desc("ACT", 0, at.key_rows + block * f, [(lines, d, d), (d, f, 1)])
    b.emit("load", "pop_next,push_next", desc=block_rows)
    b.emit("accum", "pop_prev,push_next", acc_addr=0, act_addr=0, param_addr=0, m=d,
           n_iter=lines, acc_n_stride=d, act_n_stride=d, use_res=1)  # fmt: skip
    # ACC line j * d + i holds channel line j of position block + i: a run of d lines per j
    per_head = geo.head_lines
    transposed = b.desc(
        "ACC",
        0,
        at.key_t + key_t_address(geo, 0, 0, block),
        [
            (geo.heads, key_t_address(geo, 1, 0, 0), per_head * d),
            (per_head, key_t_address(geo, 0, d, 0), d),
            (d, key_t_address(geo, 0, 1, 0), 1),
        ],
    )
    b.emit("store", "pop_prev", desc=transposed, transpose=1, **identity)


def build(config: AccelConfig, geo: Geometry, p: int) -> tuple[Builder, Places]:
    """A builder holding the step of position ``p`` (every p: the same DRAM places and
    instructions)."""
    b = Builder(config)
    at = place(b, geo, table_bytes=_table_bytes())
    emit_step(b, geo, at, p)
    return b, at


def _table_bytes() -> int:
    """Room for one step's descriptor table (its 8 descriptors), 64-byte aligned."""
    return 8 * isa.DESC_BYTES


def tables(config: AccelConfig, geo: Geometry) -> tuple[Builder, Places, list[Launch]]:
    """The program once and a descriptor table per position in one DRAM image: the builder
    (finished for position 0), the places and the launch registers of every position."""
    steps = [build(config, geo, p) for p in range(geo.context)]
    first, at = steps[0]
    launches = []
    for p, (b, _) in enumerate(steps):
        assert b.program.insns == first.program.insns, f"position {p}: other instructions"
        blob = np.frombuffer(b.program.desc_bytes(), np.uint8)
        assert blob.size <= _table_bytes()
        base = at.tables + p * _table_bytes()
        first.dram[base : base + blob.size] = blob
        launches.append(Launch(0, base, len(b.program.descs)))
    start = first.finish()
    return first, at, [Launch(start.insn_base, la.desc_base, la.desc_count) for la in launches]

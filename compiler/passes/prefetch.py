"""prefetch: which of a GEMM layer's first loads the layer before it can issue at its end.

The schedule (:mod:`compiler.passes.schedule`) puts a barrier between layers; a GEMM layer's
first step starts in the step half the layer before does not use in its last step, which that
layer's last step but one releases. Loads into that half may then run before the barrier, while
the layer before finishes, when nothing they overwrite or read is still in use:

- the first ramp part's weights: constants, always;
- its activations, when the layer before is a GEMM layer (whose ACT use is its two step halves
  and the residual slots above them), the lines they fill lie inside that layer's released half,
  and the DRAM bytes they read are written by none of its stores that may still be pending: the
  stores of the tiles from the one before the last-but-one step's tile on (a tile's first
  compute waits for the store of the tile two before it).
"""

from __future__ import annotations

import numpy as np

from arch import isa
from compiler.passes.steps import Step
from compiler.plan import DescSpec, Layer, Op


def eligible(layer: Layer) -> bool:
    """Whether a layer's first loads may start before the barrier that opens it: a GEMM layer
    with constant weights (a MatMul's come from activations; a depthwise layer runs on the
    window unit)."""
    return layer.kind == "gemm" and layer.gemm is not None and not layer.gemm.depthwise


def hoist(
    step: Step,
    before: Layer,
    before_steps: list[Step],
    released: range,
    line: int,
) -> list[Op]:
    """Take the first ramp part's loads that may run before the barrier out of a layer's first
    ``step`` and return them. ``before``/``before_steps``: the layer before and its steps;
    ``released``: the ACT lines of that layer's half its last step does not use; ``line``: the
    longest DRAM line (bytes) of a load or a store."""
    part = step.loads[: _index(step.loads, step.parts[0][0]) + 1] if step.parts else step.loads
    pending = _pending_stores(before_steps)
    hoisted = [
        op
        for op in part
        if op.desc is not None
        and (
            op.desc.mem is isa.Mem.WGT
            or op.desc.mem is isa.Mem.ACT
            and before.kind == "gemm"
            and _inside(_local_lines(op.desc), released)
            and not any(_overlap(op.desc, store, line) for store in pending)
        )
    ]
    kept = [op for op in part if all(op is not h for h in hoisted)]
    if not hoisted or not kept:  # the part's token needs a load of its own
        return []
    if step.parts:
        step.parts[0] = (kept[-1], step.parts[0][1])
    step.loads = [op for op in step.loads if all(op is not h for h in hoisted)]
    return hoisted


def _index(ops: list[Op], op: Op) -> int:
    return next(i for i, o in enumerate(ops) if o is op)


def _pending_stores(steps: list[Step]) -> list[Op]:
    """The stores that may run after the release of the last step but one (all, for a layer
    of one step, whose loads release nothing)."""
    first = steps[-2].tile - 1 if len(steps) >= 2 else 0
    return [op for step in steps if step.tile >= first for op in step.store]


def _grid(desc: DescSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per line of a descriptor's loop nest: its local line, DRAM offset and whether it is
    inside the descriptor's height/width checks (padding lines are not read)."""
    loops = [(*loop, 0, 0)[:5] for loop in desc.loops]
    idx = np.indices([loop[0] for loop in loops]).reshape(len(loops), -1)

    def along(column: int, base: int) -> np.ndarray:
        return base + sum(loop[column] * idx[i] for i, loop in enumerate(loops))

    y, x = along(3, desc.y0), along(4, desc.x0)
    valid = np.ones(idx.shape[1], bool)
    if desc.height:
        valid &= (y >= 0) & (y < desc.height)
    if desc.width:
        valid &= (x >= 0) & (x < desc.width)
    return along(2, desc.local_base), along(1, desc.offset), valid


def _local_lines(desc: DescSpec) -> np.ndarray:
    return _grid(desc)[0]


def _inside(lines: np.ndarray, allowed: range) -> bool:
    return bool(((lines >= allowed.start) & (lines < allowed.stop)).all())


def _overlap(load: DescSpec, store: Op, line: int) -> bool:
    """Whether a load reads a DRAM byte a store writes (lines of at most ``line`` bytes; a
    transposing STORE writes every line of its runs, its checks aside)."""
    if store.desc is None:  # (every store has a descriptor; without one, assume the worst)
        return True
    if store.desc.symbol != load.symbol:  # the allocator never shares a region
        return False
    _, read, valid = _grid(load)
    _, written, kept = _grid(store.desc)
    if store.fields.get("transpose"):
        kept[:] = True
    read, written = read[valid], np.sort(written[kept])
    if not written.size:
        return False
    at = np.searchsorted(written, read - line + 1)  # the first line that may end past a read
    return bool((written[np.minimum(at, written.size - 1)] < read + line)[at < written.size].any())

"""prefetch: which of a layer's first loads the layer before it can issue at its end.

The schedule (:mod:`compiler.passes.schedule`) puts a barrier between layers; a GEMM layer's
first step starts in the step half the layer before does not use in its last step, which that
layer's last step but one releases. Loads into that half may then run before the barrier, while
the layer before finishes, when nothing they overwrite or read is still in use:

- the first ramp part's weights: constants, always;
- its activations, when the layer before is a GEMM layer (whose ACT use is its two step halves
  and the residual slots above them), the lines they fill lie inside that layer's released half,
  and the DRAM bytes they read are written by none of its stores that may still be pending: the
  stores of the tiles from the one before the last-but-one step's tile on (a tile's first
  compute waits for the store of the tile two before it);
- the later ramp parts' weights, part by part, while their loads fit in the time the LOAD
  queue would otherwise wait at the end of the layer before (:func:`idle_cycles`: the array
  time of its last GEMMs, after its last loads, before its barrier). A part whose loads all
  run early gives its GEMM no token to wait for (its activations come with the first part's:
  :mod:`compiler.passes.gemm_steps`). A decode step's layers (one token row) load
  little but weights, so their weights stream while the layer before finishes; whatever
  does not fit stays after the barrier in its ramp part, so a layer's first GEMM does not
  wait for weights the idle time could not cover (no zoo model measured got slower);
- any layer's first parameters (constants), when the layer before no longer reads the PARAM
  lines they fill (:func:`params_in_use`): the schedule starts a layer's PARAM slots at one
  the layer before leaves free (:func:`free_slot`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arch import isa
from arch.config import AccelConfig
from compiler.passes.steps import Step
from compiler.passes.tile import PARAM_SLOTS, table_line, uses_table
from compiler.plan import DescSpec, Layer, Op


@dataclass(frozen=True)
class Window:
    """What the layer before leaves free for a layer's early loads: its ACT and WGT lines of
    the half its last step does not use, the longest DRAM line (bytes) of a load or a store,
    the cycles its LOAD queue would wait at its end (:func:`idle_cycles`) and the PARAM lines
    it may still read (:func:`params_in_use`)."""

    act: range  # (empty for a layer whose halves do not start in the free one)
    wgt: range
    line: int
    idle: float
    params_in_use: frozenset[int] = frozenset()  # PARAM lines it may still read


def eligible(layer: Layer) -> bool:
    """Whether a layer's first loads may start before the barrier that opens it: a GEMM layer
    with constant weights (a MatMul's come from activations; a depthwise layer runs on the
    window unit)."""
    return layer.kind == "gemm" and layer.gemm is not None and not layer.gemm.depthwise


def hoist(
    step: Step, before: Layer, before_steps: list[Step], window: Window, config: AccelConfig
) -> list[Op]:
    """Take the loads that may run before the barrier out of a layer's first ``step`` and
    return them: the first ramp part's, then the later parts' weights within ``window.idle``
    (see the module docstring). ``before``/``before_steps``: the layer before and its
    steps."""
    parts = _parts(step)
    pending = _pending_stores(before_steps)
    hoisted = [
        op
        for op in parts[0]
        if op.desc is not None
        and (
            _is_weights(op, window)
            or op.desc.mem is isa.Mem.ACT
            and before.kind == "gemm"
            and _inside(_local_lines(op.desc), window.act)
            and not any(_overlap(op.desc, store, window.line) for store in pending)
        )
    ]
    params = [op for op in parts[0] if _is_free_params(op, window)]
    if len(hoisted) + len(params) < len(parts[0]):  # the part's token needs a load of its own
        hoisted += params
    if not hoisted or len(hoisted) == len(parts[0]):
        return []
    spent = 0.0
    for part in parts[1:]:
        weights = [op for op in part if _is_weights(op, window)]
        spent += sum(_load_cycles(op, config) for op in weights)
        if not weights or spent > window.idle:
            break
        hoisted += weights
    _retoken(step, parts, hoisted)
    step.loads = [op for op in step.loads if all(op is not h for h in hoisted)]
    return hoisted


def _retoken(step: Step, parts: list[list[Op]], hoisted: list[Op]) -> None:
    """The parts' tokens once ``hoisted`` left them: each part with loads left pushes one with
    its last, popped by the GEMM of the next such part; a part left with none (its weights
    all early, its activations loaded with the first part's) gives its GEMM no token to wait
    for - what it reads is in before the barrier or with the first part."""
    gemms = [gemm for _, gemm in step.parts]  # the GEMM of each part after the first
    kept = [[op for op in part if all(op is not h for h in hoisted)] for part in parts]
    loaded = [number for number, ops in enumerate(kept) if ops]
    step.parts = [
        (kept[number][-1], gemms[after - 1])
        for number, after in zip(loaded[:-1], loaded[1:], strict=True)
    ]


def idle_cycles(steps: list[Step], config: AccelConfig) -> float:
    """How long a layer's LOAD queue would wait for the barrier once its last loads are in:
    the array time of its last step's computes after them (those of its last ramp part, if
    the step is split; 0 without GEMM or CONV)."""
    last = steps[-1]
    first = _index(last.compute, last.parts[-1][1]) if last.parts else 0
    return float(sum(_array_cycles(op, config) for op in last.compute[first:]))


def params_in_use(before: Layer, steps: list[Step], config: AccelConfig) -> frozenset[int]:
    """The PARAM lines a layer (``before``, its ``steps``) may still read once the next
    layer's early loads start (after the release of its last step but one): a GEMM layer's,
    those its STOREs that may be pending read (:func:`_pending_stores`); any other layer's,
    all it loads (those loaded early by the layer before it among them); and its table."""
    lines: set[int] = set()
    if eligible(before) or before.kind == "matmul":
        for store in _pending_stores(steps):
            f, loops = store.fields, store.desc.loops if store.desc is not None else []
            along = loops[f["param_loop"] - (isa.DESC_LOOPS - len(loops))][0]
            lines.update(range(f["param_addr"], f["param_addr"] + along))
    else:
        loads = [*before.prefetched, *(op for step in steps for op in step.loads)]
        for op in loads:
            if op.desc is not None and op.desc.mem is isa.Mem.PARAM:
                lines.update(_local_lines(op.desc).tolist())
    if uses_table(before):
        lines.update(range(table_line(config), config.param_lines))
    return frozenset(lines)


def free_slot(slot_lines: int, in_use: frozenset[int]) -> int:
    """The first of the PARAM_SLOTS slots of ``slot_lines`` lines none of whose lines the
    layer before may still read (``in_use``), else 0: where a layer's first tile puts its
    parameters, so that their LOAD may run before the barrier."""
    for slot in range(PARAM_SLOTS):
        if in_use.isdisjoint(range(slot * slot_lines, (slot + 1) * slot_lines)):
            return slot
    return 0


def _array_cycles(op: Op, config: AccelConfig) -> int:
    f = op.fields
    if op.opcode is isa.Opcode.GEMM:
        tiles = f["k_iter"] * f["n_iter"]
    elif op.opcode is isa.Opcode.CONV:
        tiles = f["kh"] * f["kw"] * f["k_iter"] * f["n_iter"]
    else:
        return 0
    return isa.gemm_cycles(tiles, f["m"], config.rows, config.cols)


def _load_cycles(op: Op, config: AccelConfig) -> float:
    """A LOAD's time until its data is in: the latency, then its lines' beats (the LOAD
    queue is free again after the beats; counting the latency too keeps the estimate safe)."""
    assert op.desc is not None
    lines = int(_local_lines(op.desc).size)
    line = isa.line_bytes(config, op.desc.mem)
    return config.dram_latency + lines * -(-line // config.dram_bytes_per_cycle)


def _is_weights(op: Op, window: Window) -> bool:
    return (
        op.desc is not None
        and op.desc.mem is isa.Mem.WGT
        and _inside(_local_lines(op.desc), window.wgt)
    )


def _is_free_params(op: Op, window: Window) -> bool:
    return (
        op.desc is not None
        and op.desc.mem is isa.Mem.PARAM
        and window.params_in_use.isdisjoint(_local_lines(op.desc).tolist())
    )


def _parts(step: Step) -> list[list[Op]]:
    """A step's loads by ramp part (one part for a step not split)."""
    ends = [_index(step.loads, last) for last, _ in step.parts] + [len(step.loads) - 1]
    parts, start = [], 0
    for end in ends:
        parts.append(step.loads[start : end + 1])
        start = end + 1
    return parts


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

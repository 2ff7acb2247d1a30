"""schedule: order each layer's loads, computes and stores, with dependency tokens.

A layer is a list of *steps*; a step is the loads one compute phase needs plus that phase's
compute instructions, and the last step of an m tile is followed by its store. Buffers:

- ACT, WGT: two halves, by step parity. The load of step s waits (pop_next) for the compute of
  step s-2 to release its half (push_prev).
- ACC: two halves, by tile parity. A tile's first compute waits (pop_next) for the store of tile
  t-2 to release its half (push_prev); the tile's last compute hands it to the store (push_next).
- PARAM: four slots, by tile, from the first one the layer before does not read (so that the
  layer before can load the first tile's parameters early, below). A tile's parameters are
  loaded in its first step; the load for tile t+4 can only start once tile t's store has
  finished (via the ACC tokens of tile t+2), so a slot is never overwritten while a store
  still reads it.
- A GEMM layer's residual: four slots of ACT above the two halves, by tile, for the same
  reason: the tile's STORE adds it (``use_res``), so it must outlive the tile's GEMMs.

A layer's first GEMM step is loaded and computed in parts of 1, 2, 4, ... k chunks, each part's
loads pushing its own token to its GEMM (:mod:`compiler.passes.ramp`), so the layer's first GEMM
starts after one chunk's loads rather than the whole step's.

Token pushes and pops balance within a layer; a barrier (store -> compute -> load) and a PERF
record end each layer, so the next layer reads what this one stored.

A layer's first loads need not all wait for that barrier. A GEMM layer's step halves start in
the half the layer before does not use in its last step (``Halves.first``), which that layer's
last step but one releases; the layer before then issues, at its end, the first ramp part's
weights (constants), the later parts' that fit in its own last GEMMs' time, and, where no
store it may still run writes them, its activations; and any layer's first parameters where
the layer before no longer reads their PARAM lines (:mod:`compiler.passes.prefetch`,
``Layer.prefetched``) - while its last step computes and stores. Its PERF record waits for
them, so each layer's counters still cover exactly its own instructions (these loads among
them) and the machine is as drained at every barrier as before: a shard started at any layer
runs it cycle for cycle as the whole network does.

Each layer kind's steps are built in a module of their own (:data:`BUILDERS`): ``gemm_steps``,
``window_steps`` (depthwise conv, window max pool), ``pool_steps``, ``eltwise_steps`` (add,
scale, upsample), ``norm_steps`` (layer_norm, rms_norm on the norm unit), from the instructions
they share (``step_ops``); this module adds the tokens and the layer ends.
"""

from __future__ import annotations

from collections.abc import Callable

from arch import isa
from compiler.errors import CompileError
from compiler.passes import prefetch
from compiler.passes.eltwise_steps import eltwise_steps, upsample_steps
from compiler.passes.gemm_steps import gemm_steps
from compiler.passes.norm_steps import norm_steps
from compiler.passes.pool_steps import pool_steps
from compiler.passes.step_ops import Halves, load_table
from compiler.passes.steps import Step
from compiler.passes.tile import uses_table
from compiler.passes.window_steps import dw_steps
from compiler.plan import Layer, Op, Plan


def _with_tokens(steps: list[Step], release_last: bool = False) -> list[Op]:
    """Set the dependency flags (see the module docstring) and flatten in program order;
    ``release_last``: the compute of the last step but one also releases its halves, to the
    next layer's first loads (:func:`_layer_end`)."""
    total_steps = len(steps)
    total_tiles = 1 + max(step.tile for step in steps)
    ops: list[Op] = []

    def add(op: Op, *flags: isa.Token) -> None:
        op.deps = tuple(dict.fromkeys((*op.deps, *flags)))

    for s, step in enumerate(steps):
        if not step.loads or not step.compute:
            raise CompileError(None, None, f"schedule step {s} has no loads or no compute")
        if s >= 2:
            add(step.loads[0], isa.Token.POP_NEXT)
        for last_load, first_compute in step.parts:  # each part of a split step: its own token
            add(last_load, isa.Token.PUSH_NEXT)
            add(first_compute, isa.Token.POP_PREV)
        add(step.loads[-1], isa.Token.PUSH_NEXT)
        add(step.compute[0], isa.Token.POP_PREV)
        if step.first_of_tile and step.tile >= 2:
            add(step.compute[0], isa.Token.POP_NEXT)
        if s + 2 < total_steps or (release_last and s + 2 == total_steps):
            add(step.compute[-1], isa.Token.PUSH_PREV)
        if step.store:
            add(step.compute[-1], isa.Token.PUSH_NEXT)
            add(step.store[0], isa.Token.POP_PREV)
            if step.tile + 2 < total_tiles:
                add(step.store[-1], isa.Token.PUSH_PREV)
        ops += step.loads + step.compute + step.store
    return ops


def _layer_end(number: int, layer: Layer, prefetch: list[Op], pop: bool) -> list[Op]:
    """A layer's end: the next layer's first loads that may run early (``prefetch``, popping
    the release of this layer's last step but one if ``pop``), then a counter snapshot once
    this layer's stores and those loads are done, then a barrier so the next layer sees this
    one's output."""
    ops: list[Op] = []
    perf_deps: tuple[isa.Token, ...] = ()
    if prefetch:
        if pop:
            prefetch[0].deps = (*prefetch[0].deps, isa.Token.POP_NEXT)
        prefetch[-1].deps = (*prefetch[-1].deps, isa.Token.PUSH_NEXT)
        ops += [
            *prefetch,
            Op(
                isa.Opcode.SYNC,
                (isa.Token.POP_PREV, isa.Token.PUSH_NEXT),
                {"queue": isa.Queue.COMPUTE},
            ),
        ]
        perf_deps = (isa.Token.POP_PREV,)
    return [
        *ops,
        Op(
            isa.Opcode.PERF,
            perf_deps,
            fields={"tag": layer.index},
            dram=("perf", number * isa.PERF_RECORD.nbytes),
        ),
        Op(isa.Opcode.SYNC, (isa.Token.PUSH_PREV,), {"queue": isa.Queue.STORE}),
        Op(
            isa.Opcode.SYNC, (isa.Token.POP_NEXT, isa.Token.PUSH_PREV), {"queue": isa.Queue.COMPUTE}
        ),
        Op(isa.Opcode.SYNC, (isa.Token.POP_NEXT,), {"queue": isa.Queue.LOAD}),
    ]


#: The step builder of each device layer kind (``arch.executable.format.LAYER_KINDS``); a
#: depthwise conv (kind ``gemm``) is built by :func:`dw_steps` instead.
BUILDERS: dict[str, Callable[[Plan, Layer, Halves], list[Step]]] = {
    "gemm": gemm_steps,
    "matmul": gemm_steps,
    "pool": pool_steps,
    "add": eltwise_steps,
    "scale": eltwise_steps,
    "upsample": upsample_steps,
    "norm": norm_steps,
}


def run(plan: Plan) -> Plan:
    accel = plan.accel_layers()
    built: list[list[Step]] = []
    halves: list[Halves] = []
    for number, layer in enumerate(accel):
        build = BUILDERS[layer.kind]
        if layer.gemm is not None and layer.gemm.depthwise:
            build = dw_steps
        hoist = number > 0 and prefetch.eligible(layer)
        # the half the layer before does not use in its last step
        first = (halves[-1].first + len(built[-1])) % 2 if hoist else 0
        halves.append(Halves(plan, layer, first))
        in_use = frozenset[int]()
        if number > 0:  # its first tile's PARAM slot: one the layer before does not read
            in_use = prefetch.params_in_use(accel[number - 1], built[-1], plan.config)
            halves[-1].param_shift = prefetch.free_slot(halves[-1].param, in_use)
        steps = build(plan, layer, halves[-1])
        layer.prefetched = []
        if number > 0:  # (any layer's first PARAM lines; a GEMM layer's in the free halves)
            act, wgt = halves[-2].act_step, halves[-2].wgt
            window = prefetch.Window(
                act=range(first * act, (first + 1) * act) if hoist else range(0),
                wgt=range(first * wgt, (first + 1) * wgt) if hoist else range(0),
                line=max(plan.config.rows, plan.config.cols),  # ACT / ACC line bytes
                idle=prefetch.idle_cycles(built[-1], plan.config),
                params_in_use=in_use,
            )
            layer.prefetched = prefetch.hoist(
                steps[0], accel[number - 1], built[-1], window, plan.config
            )
        if uses_table(layer):  # the previous layer's barrier keeps its stores from this load
            steps[0].loads.insert(0, load_table(plan, layer))
        built.append(steps)
    for number, (layer, steps) in enumerate(zip(accel, built, strict=True)):
        after = accel[number + 1].prefetched if number + 1 < len(accel) else []
        ops = _with_tokens(steps, release_last=bool(after))
        ops += _layer_end(number, layer, after, pop=len(steps) >= 2)
        layer.perf_index = number
        for op in ops:
            op.layer = layer.index
        layer.ops = ops
    return plan

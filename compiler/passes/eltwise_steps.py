"""The steps of layers that ACCUM copies tiles of into ACC: add, scale (see
:mod:`compiler.passes.schedule`), and nearest upsampling / depth_to_space."""

from __future__ import annotations

import itertools

from arch import isa
from compiler.constants import zero_point_bias
from compiler.errors import Unplaceable
from compiler.passes.step_ops import Halves, accum_tile, load_params, load_tile, store_tile
from compiler.passes.steps import Step, groups
from compiler.plan import DescSpec, Layer, Op, Plan


def eltwise_steps(plan: Plan, layer: Layer, halves: Halves) -> list[Step]:
    """add: two ACCUMs requantize both inputs' tiles into ACC (PARAM sets a and b); scale: one
    ACCUM copies x's tile, times the gate's line of each channel block (use_gate) if it has a
    gate. Then one STORE requantizes (and applies the layer's table)."""
    tiling = layer.tiling
    assert tiling is not None
    out = plan.tensors[layer.output]
    blocks = out.channels // plan.dim
    add = layer.kind == "add"
    streams = layer.inputs if add else layer.inputs[:1]
    gate = layer.inputs[1] if not add and len(layer.inputs) == 2 else None
    zp_bias = zero_point_bias(plan, layer)  # inputs with zero points: a bias in the a-set
    steps: list[Step] = []
    for tile, ((nb0, nbc), (oy0, rows)) in enumerate(
        itertools.product(groups(blocks, tiling.n_blocks), groups(out.h, tiling.rows_per_tile))
    ):
        mt = rows * out.w
        half = len(steps) % 2
        act_base, acc_base = half * halves.act, (tile % 2) * halves.acc
        slot = halves.slot(tile)
        step = Step(tile=tile, first_of_tile=True)
        step.loads.append(load_params(plan, layer, slot, nb0, nbc))  # a-set (and output) params
        if add:
            step.loads.append(load_params(plan, layer, slot + nbc, blocks + nb0, nbc))  # b-set
        for which, name in enumerate(streams):
            step.loads.append(load_tile(plan, name, act_base + which * nbc * mt, oy0, mt, nb0, nbc))
        gating: dict[str, int] = {}
        if gate is not None:
            gate_addr = act_base + nbc * mt
            if gate_addr + nbc > 1 << isa.GATE_ADDR_BITS:
                raise Unplaceable(
                    layer.name,
                    layer.node.op,
                    f"gate lines {gate_addr}..{gate_addr + nbc - 1} are past the ACT lines a "
                    f"gate_addr reaches ({1 << isa.GATE_ADDR_BITS})",
                    f"an ACT half of at most {(1 << isa.GATE_ADDR_BITS) // 2} lines",
                )
            step.loads.append(load_tile(plan, gate, gate_addr, 0, 1, nb0, nbc))
            gating = {"use_gate": 1, "gate_addr": gate_addr}
        for which in range(len(streams)):
            fields = {
                "acc_addr": acc_base,
                "act_addr": act_base + which * nbc * mt,
                "param_addr": slot + which * nbc,
                "m": mt,
                "n_iter": nbc,
                "acc_n_stride": mt,
                "act_n_stride": mt,
                "use_bias": int(which == 0 and zp_bias is not None),
                "use_res": 1,
                "accumulate": which,
            }
            step.compute.append(Op(isa.Opcode.ACCUM, fields=fields | gating))
        step.store.append(store_tile(plan, layer, acc_base, slot, oy0, mt, nb0, nbc))
        steps.append(step)
    return steps


def upsample_steps(plan: Plan, layer: Layer, halves: Halves) -> list[Step]:
    """Nearest upsampling by (sh, sw): a tile of input pixels is copied into ACC by ACCUM
    (requant by 1), then stored sh*sw times, once per position (dy, dx) of each input pixel's
    copies in the output. depth_to_space: channel group g = dy*sw + dx of the input tile is
    copied and stored at position (dy, dx) only (each group starts on a line: layout)."""
    tiling = layer.tiling
    assert tiling is not None
    dim = plan.dim
    src, out = plan.tensors[layer.inputs[0]], plan.tensor(layer.output)
    node = layer.node
    shuffle = node.op == "depth_to_space"
    sh, sw = node.attrs["block"] if shuffle else node.attrs["scale"]
    positions = list(itertools.product(range(sh), range(sw)))
    copies = [[p] for p in positions] if shuffle else [positions]
    blocks = out.channels // dim
    steps: list[Step] = []
    for tile, ((nb0, nbc), (iy0, rows), stored) in enumerate(
        itertools.product(
            groups(blocks, tiling.n_blocks), groups(src.h, tiling.rows_per_tile), copies
        )
    ):
        mt = rows * src.w
        act_base = (len(steps) % 2) * halves.act
        acc_base = (tile % 2) * halves.acc
        slot = halves.slot(tile)
        first = nb0 + (positions.index(stored[0]) * blocks if shuffle else 0)
        step = Step(tile=tile, first_of_tile=True)
        step.loads.append(load_params(plan, layer, slot, nb0, nbc))
        step.loads.append(load_tile(plan, layer.inputs[0], act_base, iy0, mt, first, nbc))
        step.compute.append(accum_tile(acc_base, act_base, slot, mt, nbc, 1, 0, use_bias=0))
        pixel = out.pixel_stride
        for dy, dx in stored:
            start = out.offset + ((iy0 * sh + dy) * out.w + dx) * pixel + nb0 * dim
            loops: list[tuple[int, ...]] = [
                (nbc, dim, mt),
                (rows, sh * out.w * pixel, src.w),
                (src.w, sw * pixel, 1),
            ]
            desc = DescSpec(isa.Mem.ACC, acc_base, out.name, start, loops)
            store = {
                "param_addr": slot,
                "param_loop": isa.DESC_LOOPS - len(loops),
                "clamp_lo": -128,
                "clamp_hi": 127,
            }
            step.store.append(Op(isa.Opcode.STORE, fields=store, desc=desc))
        steps.append(step)
    return steps

"""A convolution's steps on input tiles loaded once (``Tiling.input_reuse``), with CONV."""

from __future__ import annotations

import itertools

from arch import isa
from arch.reference import zero_point
from compiler.passes import ramp
from compiler.passes.steps import Step, groups, weight_symbol
from compiler.passes.tile import input_tile_lines
from compiler.plan import DescSpec, Layer, Op, Plan


class InputReuse:
    """A convolution on input tiles loaded once (``Tiling.input_reuse``): a k group is whole
    channel blocks, each step loads their input tiles (halo included) and runs one CONV on
    them. The layer's first step runs one CONV per ramp part (:mod:`compiler.passes.ramp`),
    on its own copy of its weights in part order (from chunk ``ramp_chunk``). A CONV's weight
    tiles are in its order: taps outer, channel blocks inner (``layer.chunk_order``)."""

    def __init__(self, plan: Plan, layer: Layer) -> None:
        shape, tiling = layer.gemm, layer.tiling
        assert shape is not None and tiling is not None
        self.plan, self.layer, self.shape = plan, layer, shape
        self.taps = shape.kernel[0] * shape.kernel[1]
        blocks = shape.in_channels // plan.dim
        self.unit_groups = groups(blocks, tiling.k_group // self.taps)
        self.k_groups = [(c0 * self.taps, cc * self.taps) for c0, cc in self.unit_groups]
        self.ramp_runs = self.runs(self.unit_groups[0][1], ramped=True)
        self.ramp_chunk = shape.chunks(plan.dim)  # the ramp copy's chunks follow the layer's
        walks = [(c0, self.runs(cc, ramped=False)) for c0, cc in self.unit_groups]
        layer.chunk_order = [
            tap * blocks + c0 + r0 + cb
            for c0, runs in [*walks, (self.unit_groups[0][0], self.ramp_runs)]
            for r0, rc in runs
            for tap in range(self.taps)
            for cb in range(rc)
        ]

    def runs(self, blocks: int, ramped: bool) -> list[tuple[int, int]]:
        """(first channel block, blocks) of each CONV of a k group of ``blocks`` blocks."""
        sizes = ramp.parts(blocks, self.plan.config) if ramped else [blocks]
        return list(zip(itertools.accumulate([0, *sizes[:-1]]), sizes, strict=True))

    def step(
        self,
        step: Step,
        gi: int,
        kept: tuple[bool, bool],
        bases: tuple[int, int, int],
        oy0: int,
        rows: int,
        nbc: int,
        weight_offset: int,
        ramped: bool,
    ) -> None:
        """Add k group ``gi``'s loads and CONVs for output rows oy0.. (``rows``) and ``nbc``
        output blocks to ``step``, but the activations and the weights the step's halves still
        hold (``kept``); ``ramped`` (the layer's first step): a CONV per ramp part, each with
        its own token, on the ramp copy of the weights at ``weight_offset``."""
        plan, shape, dim = self.plan, self.shape, self.plan.dim
        act_base, wgt_base, acc_base = bases
        keep_act, keep = kept
        src = plan.tensor(self.layer.inputs[0])
        (kh, kw), stride = shape.kernel, shape.stride[0]
        pitch = isa.window_span(shape.out_w, kw, stride)
        tile_lines = input_tile_lines(self.layer, rows)
        y0, x0 = oy0 * stride - shape.pads[0], -shape.pads[1]
        c0 = self.unit_groups[gi][0]
        runs = self.ramp_runs if ramped else self.runs(self.unit_groups[gi][1], ramped=False)
        for part, (r0, rc) in enumerate(runs):
            before = step.loads[-1] if part else None
            desc = DescSpec(
                isa.Mem.ACT,
                act_base + r0 * tile_lines,
                src.name,
                src.offset + (y0 * src.w + x0) * src.pixel_stride + (c0 + r0) * dim,
                [
                    (rc, dim, tile_lines, 0, 0),
                    (isa.window_span(rows, kh, stride), src.w * src.pixel_stride, pitch, 1, 0),
                    (pitch, src.pixel_stride, 1, 0, 1),
                ],
                y0=y0,
                x0=x0,
                height=src.h,
                width=src.w,
                pad_value=zero_point(plan.graph, self.layer.inputs[0]),  # real 0
            )
            if not keep_act:
                step.loads.append(Op(isa.Opcode.LOAD, desc=desc))
            run_wgt = r0 * self.taps * nbc * dim  # WGT lines of the runs before this one
            if not keep:
                wdesc = DescSpec(
                    isa.Mem.WGT,
                    wgt_base + run_wgt,
                    weight_symbol(self.layer),
                    weight_offset + run_wgt * dim,
                    [(rc * self.taps * nbc * dim, dim, 1)],
                )
                step.loads.append(Op(isa.Opcode.LOAD, desc=wdesc))
            fields = {
                "wgt_addr": wgt_base + run_wgt,
                "act_addr": act_base + r0 * tile_lines,
                "acc_addr": acc_base,
                "m": rows * shape.out_w,
                "k_iter": rc,
                "n_iter": nbc,
                "act_k_stride": tile_lines,
                "out_w": shape.out_w,
                "kh": kh,
                "kw": kw,
                "stride": stride,
                "accumulate": int(gi > 0 or part > 0),
            }
            step.compute.append(Op(isa.Opcode.CONV, fields=fields))
            if before is not None:
                step.parts.append((before, step.compute[-1]))

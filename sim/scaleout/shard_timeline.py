"""The timeline of a sharded run: each piece's recorded spans and token moves, moved onto the
merged run's cycles.

A piece runs from its checkpoint (a warm-up layer first, :mod:`sim.runtime.checkpoint`): its
instruction indices count from that layer's first instruction and its cycles from its own start.
Here the warm-up is dropped, indices become the program's, and times are shifted so that the
piece's first layer starts where the merged run puts it (:func:`sim.scaleout.shards._merge`;
the warm-up's token moves count at that start, so the queue depths carry on):
one track per unit over the whole run, as a sequential run has it, with each shard's stretch
timed by its own simulator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from arch.executable import Executable
from sim.runtime import checkpoint
from sim.runtime.checkpoint import Piece
from sim.runtime.execute import Finished
from sim.runtime.timeline import ProgramTimeline


def local_starts(done: Mapping[Piece, Finished]) -> dict[Piece, int]:
    """Each piece's first layer's start in its own run's cycles (read before the merge
    rewrites the windows)."""
    return {piece: fin.layers[0].cycle_window[0] for piece, fin in done.items() if fin.layers}


def merge(
    exe: Executable, done: Mapping[Piece, Finished], local: Mapping[Piece, int]
) -> list[ProgramTimeline]:
    """One :class:`ProgramTimeline` per device program the pieces ran, from the cycle the
    merged run starts it at; ``local``: :func:`local_starts`, ``done``'s layers already carry
    the merged windows. Pieces whose backend recorded nothing add nothing."""
    by_program: dict[int, list[Piece]] = {}
    for piece in sorted(local, key=lambda p: (p.program, p.first)):
        by_program.setdefault(piece.program, []).append(piece)
    timelines = []
    for index, pieces in sorted(by_program.items()):
        program = exe.programs[index]
        first_cycle = done[pieces[0]].layers[0].cycle_window[0]
        spans, tokens = [], []
        for piece in pieces:
            fin = done[piece]
            base = checkpoint.first_insn(exe, piece)
            lo = program.layers[piece.first].insn_range[0]
            hi = program.layers[piece.stop - 1].insn_range[1]
            start, end = local[piece], local[piece] + sum(layer.cycles for layer in fin.layers)
            shift = fin.layers[0].cycle_window[0] - first_cycle - start
            for span in fin.device.spans:
                if lo <= span.index + base < hi:
                    spans.append(
                        dataclasses.replace(span, index=span.index + base, start=span.start + shift)
                    )
            # (the warm-up's moves count at the piece's start: the queues hold what it left)
            tokens += [
                dataclasses.replace(move, time=max(move.time, start) + shift)
                for move in fin.device.tokens
                if move.time < end
            ]
        if spans:
            timelines.append(ProgramTimeline(program, spans, tokens, first_cycle))
    return timelines

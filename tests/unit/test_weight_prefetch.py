"""A GEMM layer's first weights are loaded by the layer before it, during that layer's last
step (``compiler/passes/schedule.py``, ``Layer.prefetched``), on the ISA simulator.

A chain of four convolutions is compiled with tilings that give its layers one, two and three
steps (so the last step uses either WGT half), on im2col lines and on input tiles, and run with
the prefetch and without it (``schedule._prefetches`` off), on the same tilings:

- both are bit-exact, and the prefetch makes the network faster;
- the loads the prefetch writes are not read by any compute the previous layer may still run
  when they start (its computes after the release they wait for);
- each layer's counters stay its own instructions': the layer before reads exactly the
  prefetched bytes more, the layer itself exactly those fewer, and the total is unchanged.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from arch import isa
from arch.config import PRESETS
from compiler.frontend import compile_front
from compiler.passes import schedule
from compiler.plan import Op, Tiling
from tests.unit.test_backend_passes import Onnx, passes, run

STEPS = {1: 12, 2: 6, 3: 4}  # steps of a layer -> its output rows per m tile (12x12 output)


def _chain():
    g = Onnx(seed=53)
    y = g.node("Relu", [g.conv("c1", "x", 32, 32, 3)], "r1")
    y = g.node("Relu", [g.conv("c2", y, 32, 32, 1)], "r2")
    y = g.node("Relu", [g.conv("c3", y, 32, 32, 3)], "r3")
    y = g.conv("c4", y, 32, 48, 3)
    return compile_front(g.model([1, 32, 12, 12], g.node("Relu", [y], "relu")))


def _wgt_lines(op: Op) -> range:
    """The WGT lines a GEMM or CONV reads."""
    f = op.fields
    taps = f.get("kh", 1) * f.get("kw", 1) if op.opcode == "conv" else 1
    return range(f["wgt_addr"], f["wgt_addr"] + taps * f["k_iter"] * f["n_iter"] * 16)


def _read_bytes(ops: list[Op]) -> int:
    """DRAM bytes read for these loads (a default-config line is 16 bytes): their lines, their
    instruction words and descriptors, and the COMPUTE SYNC that waits for them."""
    lines = sum(math.prod(loop[0] for loop in op.desc.loops) for op in ops)
    words = len(ops) * (isa.INSN_BYTES + isa.DESC_BYTES) + isa.INSN_BYTES
    return lines * 16 + words if ops else 0


@pytest.mark.parametrize("reuse", [0, 1])
@pytest.mark.parametrize("steps", [(3, 1, 2, 3), (2, 3, 1, 2), (1, 2, 3, 1)])
def test_the_next_layers_first_weights_load_during_the_last_step(monkeypatch, steps, reuse):
    graph = _chain()
    tilings = {
        name: Tiling(
            rows_per_tile=STEPS[count],
            n_blocks=3,
            k_group=18,
            estimate=0,
            input_reuse=reuse if name != "c2" else 0,
        )
        for name, count in zip(("c1", "c2", "c3", "c4"), steps, strict=True)
    }
    config = PRESETS["default"]
    x = np.random.default_rng(53).standard_normal((1, 32, 12, 12)).astype(np.float32)
    plan = passes(graph, config, tilings=tilings)
    accel = plan.accel_layers()
    assert [layer.name for layer in accel] == ["c1", "c2", "c3", "c4"]
    assert not accel[0].prefetched
    for before, layer in zip(accel, accel[1:], strict=False):
        assert layer.prefetched and all(op.desc.mem == "WGT" for op in layer.prefetched)
        # The prefetch waits for the release of the last compute with push_prev; the computes
        # after it may run while the prefetch writes WGT: none may read those lines.
        start = next(i for i, op in enumerate(before.ops) if op is layer.prefetched[0])
        releases = [
            i for i, op in enumerate(before.ops[:start]) if "push_prev" in op.deps
            and op.opcode in ("gemm", "conv")
        ]
        waits = "pop_next" in layer.prefetched[0].deps
        assert waits == (len(releases) > 0)
        after = before.ops[releases[-1] + 1 : start] if waits else before.ops[:start]
        written = {
            line
            for op in layer.prefetched
            for line in range(
                op.desc.local_base, op.desc.local_base + math.prod(lp[0] for lp in op.desc.loops)
            )
        }
        for op in after:
            if op.opcode in ("gemm", "conv"):
                assert not written & set(_wgt_lines(op)), (before.name, op.fields)
    prefetched = run(plan, x)

    monkeypatch.setattr(schedule, "_prefetches", lambda layer: False)
    plain_plan = passes(graph, config, tilings=tilings)
    assert not any(layer.prefetched for layer in plain_plan.accel_layers())
    plain = run(plain_plan, x)

    assert prefetched.bit_exact and plain.bit_exact
    assert prefetched.cycles < plain.cycles, (prefetched.cycles, plain.cycles)
    # Each layer's counters are its own instructions': the layer before reads the prefetched
    # bytes, the layer itself does not - exactly, but for the instruction words fetch reads
    # ahead of a PERF record (at most three full queues). Over the network: the same bytes,
    # and one more instruction word per prefetch.
    lookahead = 3 * config.queue_depth * isa.INSN_BYTES
    by_name = {la.name: la for la in plain.layers}
    moved = [_read_bytes(layer.prefetched) for layer in accel] + [0]
    for number, layer in enumerate(accel):
        got = next(la for la in prefetched.layers if la.name == layer.name)
        want = by_name[layer.name].dram_read_bytes - moved[number] + moved[number + 1]
        assert abs(got.dram_read_bytes - want) <= lookahead, (layer.name, got, want)
    extra = (len(accel) - 1) * isa.INSN_BYTES
    assert prefetched.counters["dram_read_bytes"] == plain.counters["dram_read_bytes"] + extra

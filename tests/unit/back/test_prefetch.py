"""A layer's first loads issued by the layer before it, during that layer's last step
(``compiler/passes/prefetch.py``, ``Layer.prefetched``), on the ISA simulator.

A chain of four convolutions is compiled with tilings that give its layers one, two and three
steps (so the last step uses either half), on im2col lines and on input tiles, and run with the
prefetch and without it (``prefetch.hoist`` off), on the same tilings:

- both are bit-exact, and the prefetch makes the network faster;
- the lines the prefetch writes are not read by any compute or residual STORE the previous
  layer may still run when it starts (its instructions after the release it waits for);
- each layer's counters stay its own instructions': the layer before reads the prefetched
  bytes, the layer itself does not, and the total is unchanged.

On one token row (a decode step's linear layers) the layer before also loads the later ramp
parts' weights that fit in its last GEMMs' time, and the layer's parameters in a PARAM slot it
leaves free: faster than the first part's weights alone, which is faster than no early loads.

Activations are loaded early only where no store the layer before may still run writes them:
a pair of convolutions where they are, where they are not, and where they are not but the
check is switched off (the ISA simulator then shows the wrong output it would give).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from arch import isa
from arch.config import PRESETS
from compiler.frontend import compile_front
from compiler.passes import prefetch
from compiler.plan import DescSpec, Layer, Op, Tiling
from tests.unit.back.test_backend_passes import Onnx, passes, run

STEPS = {1: 12, 2: 6, 3: 4}  # steps of a layer -> its output rows per m tile (12x12 output)


def _chain():
    g = Onnx(seed=53)
    y = g.node("Relu", [g.conv("c1", "x", 32, 32, 3)], "r1")
    y = g.node("Relu", [g.conv("c2", y, 32, 32, 1)], "r2")
    y = g.node("Relu", [g.conv("c3", y, 32, 32, 3)], "r3")
    y = g.conv("c4", y, 32, 48, 3)
    return compile_front(g.model([1, 32, 12, 12], g.node("Relu", [y], "relu")))


def _reads(op: Op) -> dict[isa.Mem, set[int]]:
    """The WGT and ACT lines a GEMM, CONV or STORE reads (a bound: an ACT k block's lines are
    ``act_k_stride`` apart; a residual STORE reads a line per ACC line it stores)."""
    f = op.fields
    if op.opcode is isa.Opcode.STORE:
        lines = math.prod(loop[0] for loop in op.desc.loops)
        along = op.desc.loops[f["param_loop"] - (isa.DESC_LOOPS - len(op.desc.loops))][0]
        table = range(f["table_addr"], 256) if f.get("use_table") else range(0)
        return {
            isa.Mem.ACT: set(range(f["res_addr"], f["res_addr"] + lines))
            if f.get("use_res")
            else set(),
            isa.Mem.PARAM: {*range(f["param_addr"], f["param_addr"] + along), *table},
        }
    taps = f.get("kh", 1) * f.get("kw", 1) if op.opcode is isa.Opcode.CONV else 1
    wgt = range(f["wgt_addr"], f["wgt_addr"] + taps * f["k_iter"] * f["n_iter"] * 16)
    act = range(f["act_addr"], f["act_addr"] + f["k_iter"] * f["act_k_stride"])
    return {isa.Mem.WGT: set(wgt), isa.Mem.ACT: set(act)}


def _read_bytes(ops: list[Op]) -> int:
    """DRAM bytes read for these loads (a default-config line is 16 bytes, 256 in PARAM): their
    lines, their instruction words and descriptors, and the COMPUTE SYNC that waits for them."""
    line = {isa.Mem.PARAM: 256}
    lines = sum(math.prod(lp[0] for lp in op.desc.loops) * line.get(op.desc.mem, 16) for op in ops)
    words = len(ops) * (isa.INSN_BYTES + isa.DESC_BYTES) + isa.INSN_BYTES
    return lines + words if ops else 0


def _assert_nothing_pending_reads_what_it_writes(before: Layer, layer: Layer) -> None:
    """The prefetch waits for the release of the last compute with push_prev (if any); the
    computes and residual STOREs after it may run while the prefetch writes: none may read
    the lines it writes."""
    start = next(i for i, op in enumerate(before.ops) if op is layer.prefetched[0])
    releases = [
        i
        for i, op in enumerate(before.ops[:start])
        if "push_prev" in op.deps and op.opcode in (isa.Opcode.GEMM, isa.Opcode.CONV)
    ]
    waits = "pop_next" in layer.prefetched[0].deps
    assert waits == (len(releases) > 0)
    after = before.ops[releases[-1] + 1 : start] if waits else before.ops[:start]
    for load in layer.prefetched:
        mem, base = load.desc.mem, load.desc.local_base
        written = set(range(base, base + math.prod(lp[0] for lp in load.desc.loops)))
        for op in after:
            if op.opcode in (isa.Opcode.GEMM, isa.Opcode.CONV, isa.Opcode.STORE):
                assert not written & _reads(op).get(mem, set()), (before.name, op.fields)


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
        # no activations (c1's stores pending): the first ramp part's weights, the later
        # parts' that fit in the array time of the layer before's last step, and parameters
        # in PARAM lines the layer before no longer reads
        mems = [op.desc.mem for op in layer.prefetched]
        assert isa.Mem.WGT in mems and set(mems) <= {isa.Mem.WGT, isa.Mem.PARAM}
        _assert_nothing_pending_reads_what_it_writes(before, layer)
    prefetched = run(plan, x)

    monkeypatch.setattr(prefetch, "hoist", lambda *args: [])
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


def _pair():
    g = Onnx(seed=59)
    y = g.node("Relu", [g.conv("c1", "x", 32, 32, 3)], "r1")
    y = g.conv("c2", y, 32, 32, 1)
    return compile_front(g.model([1, 32, 24, 24], g.node("Relu", [y], "relu")))


@pytest.mark.parametrize(
    ("c1_rows", "c1_blocks", "c2_rows", "hoisted"),
    [
        (4, 2, 4, True),  # c2's first rows were stored by c1's first tile, long done
        (4, 2, 24, False),  # c2's first part reads every row: c1's last tiles may still store
        (4, 1, 24, True),  # ... but only channel block 0, which c1's first n group stored
        # c1 in 3 tiles: its last step but one is tile 1's, whose computes do not wait for
        # tile 0's store (a tile waits for the store two before it)
        (8, 2, 4, False),
    ],
)
def test_activations_load_early_only_when_no_pending_store_writes_them(
    monkeypatch, c1_rows, c1_blocks, c2_rows, hoisted
):
    """c1 (3x3, m tiles of ``c1_rows`` rows, one or two n groups) then c2 (1x1): c2's first ACT
    lines are loaded at c1's end when no store of c1 that may still run writes a byte they read.
    Bit-exact either way; and where they may not, loading them anyway (the DRAM check off) reads
    what c1 has not stored yet, which the ISA simulator - it runs a ready load before a later
    store - shows as a wrong output."""
    graph = _pair()
    tilings = {
        "c1": Tiling(
            rows_per_tile=c1_rows, n_blocks=c1_blocks, k_group=18, estimate=0, input_reuse=0
        ),
        "c2": Tiling(rows_per_tile=c2_rows, n_blocks=2, k_group=2, estimate=0, input_reuse=0),
    }
    x = np.random.default_rng(59).standard_normal((1, 32, 24, 24)).astype(np.float32)
    plan = passes(graph, PRESETS["default"], tilings=tilings)
    c1, c2 = plan.accel_layers()
    assert (isa.Mem.ACT in [op.desc.mem for op in c2.prefetched]) == hoisted
    assert isa.Mem.WGT in [op.desc.mem for op in c2.prefetched]
    _assert_nothing_pending_reads_what_it_writes(c1, c2)
    assert run(plan, x).bit_exact
    # (c1 in 3 tiles: its tile 0 store runs long before in any order; no token orders it)
    if not hoisted and c1_rows == 4:
        monkeypatch.setattr(prefetch, "_overlap", lambda load, store, line: False)
        unchecked = passes(graph, PRESETS["default"], tilings=tilings)
        assert isa.Mem.ACT in [op.desc.mem for op in unchecked.accel_layers()[1].prefetched]
        assert not run(unchecked, x).bit_exact


def _bytes(desc: DescSpec, line: int, checked: bool = True) -> set[int]:
    """Every DRAM byte a descriptor's lines cover (``checked``: only lines inside its checks),
    loop by loop."""
    loops = [(*loop, 0, 0)[:5] for loop in desc.loops]
    out = set()
    for idx in itertools.product(*(range(loop[0]) for loop in loops)):
        y = desc.y0 + sum(i * loop[3] for i, loop in zip(idx, loops, strict=True))
        x = desc.x0 + sum(i * loop[4] for i, loop in zip(idx, loops, strict=True))
        outside = (desc.height and not 0 <= y < desc.height) or (
            desc.width and not 0 <= x < desc.width
        )
        if checked and outside:
            continue
        start = desc.offset + sum(i * loop[1] for i, loop in zip(idx, loops, strict=True))
        out |= set(range(start, start + line))
    return out


def _random_desc(rng: np.random.Generator, symbol: str, line: int) -> DescSpec:
    """1-3 loops of 1-3 lines, DRAM strides of 1-4 lines (some half a line more), y/x steps
    of 0 or 1, and padding checks that may cut some lines."""
    loops = [
        (
            int(rng.integers(1, 4)),
            int(rng.integers(1, 5)) * line + int(rng.choice([0, 0, line // 2])),
            1,
            int(rng.integers(0, 2)),
            int(rng.integers(0, 2)),
        )
        for _ in range(int(rng.integers(1, 4)))
    ]
    return DescSpec(
        isa.Mem.ACT,
        0,
        symbol,
        int(rng.integers(0, 12)) * line // 2,
        loops,
        y0=int(rng.integers(-1, 2)),
        x0=int(rng.integers(-1, 2)),
        height=int(rng.integers(0, 4)),
        width=int(rng.integers(0, 4)),
    )


def test_overlap_is_a_shared_byte_of_two_descriptors():
    """``prefetch._overlap`` against the byte sets walked loop by loop: seeded random loop
    nests, padding checks in y and x (which a transposing STORE does not skip), two symbols;
    lines that touch do not overlap, a shared byte does."""
    rng = np.random.default_rng(61)
    seen = {True: 0, False: 0}
    for _ in range(300):
        line = int(rng.choice([4, 16]))
        load = _random_desc(rng, "t", line)
        store = _random_desc(rng, str(rng.choice(["t", "t", "u"])), line)
        transpose = bool(rng.integers(0, 2))
        written = _bytes(store, line, checked=not transpose)
        want = store.symbol == load.symbol and bool(_bytes(load, line) & written)
        op = Op(isa.Opcode.STORE, fields={"transpose": int(transpose)}, desc=store)
        assert prefetch._overlap(load, op, line) == want, (load, store, line, transpose)
        seen[want] += 1
    assert min(seen.values()) > 30, seen


def _token_row():
    """Linear layers on one token row: a decode step's (every weight read once)."""
    g = Onnx(seed=67)
    y = g.node("Relu", [g.gemm("fc1", "x", 64, 256)], "r1")
    y = g.node("Relu", [g.gemm("fc2", y, 256, 64)], "r2")
    y = g.node("Relu", [g.gemm("fc3", y, 64, 256)], "r3")
    y = g.gemm("fc4", y, 256, 64)
    return compile_front(g.model([1, 64], g.node("Relu", [y], "relu")))


def test_a_token_rows_later_weights_and_parameters_load_while_the_layer_before_computes(
    monkeypatch,
):
    """One token row: each layer's first step is loaded in ramp parts. The layer before
    loads, at its end, more than the first part's weights - the later parts that fit in the
    time of its own last GEMMs - and the layer's parameters, in a PARAM slot it does not read
    itself. Bit-exact; faster than the schedule that loaded only the first part's weights early,
    which is faster than no early loads."""
    graph = _token_row()
    config = PRESETS["default"]
    x = np.random.default_rng(67).standard_normal((1, 64)).astype(np.float32)
    plan = passes(graph, config)
    accel = plan.accel_layers()
    assert [layer.name for layer in accel] == ["fc1", "fc2", "fc3", "fc4"]
    for before, layer in zip(accel, accel[1:], strict=False):
        mems = [op.desc.mem for op in layer.prefetched]
        assert mems.count(isa.Mem.WGT) >= 2, (layer.name, mems)  # more than the first part
        assert isa.Mem.PARAM in mems, (layer.name, mems)
        _assert_nothing_pending_reads_what_it_writes(before, layer)
    early = run(plan, x)

    monkeypatch.setattr(prefetch, "free_slot", lambda lines, in_use: 0)
    monkeypatch.setattr(prefetch, "idle_cycles", lambda steps, config: 0.0)
    first_part = passes(graph, config)
    for layer in first_part.accel_layers()[1:]:  # the schedule before: the first part's weights
        assert [op.desc.mem for op in layer.prefetched] == [isa.Mem.WGT], layer.name
    first = run(first_part, x)
    monkeypatch.setattr(prefetch, "hoist", lambda *args: [])
    none = run(passes(graph, config), x)

    assert early.bit_exact and first.bit_exact and none.bit_exact
    assert early.cycles < first.cycles < none.cycles, (early.cycles, first.cycles, none.cycles)

"""Constrained-random DMA descriptors on the RTL, aimed at the holes coverage found in the
regression (docs/coverage.md): all four loop levels in use, negative DRAM strides, padding checks
in y only, in x only and in both, pad values - on loads, and on stores (which skip the lines
outside the checks; the store address generator had the lowest line coverage).

A load program LOADs one random descriptor into consecutive ACT lines, copies them to ACC (POOL,
window 1) and STOREs them contiguously; a store program loads consecutive lines and STOREs them
through the random descriptor into a guard-filled buffer. Expected: numpy's own walk of the loop
nest as docs/isa.md defines it (not the simulator's), then every DRAM byte equal to the ISA
simulator's, guard bands included.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from arch import isa
from arch.config import PRESETS
from tests.instruction.rtl_compare import assert_same_dram, run_both
from tests.programs import Builder

CONFIG = PRESETS["tiny"]
MAX_LINES = 48
SEED = 20
GUARD = 0x5A


def random_nest(rng: np.random.Generator, d: int) -> list[tuple[int, int, int, int, int]]:
    """Four (count, dram_stride, local_stride, ystep, xstep) levels, outermost first, with at
    most MAX_LINES lines; DRAM strides in lines, either sign; local lines consecutive."""
    while True:
        counts = [int(c) for c in rng.integers(1, 5, 4)]
        if np.prod(counts) <= MAX_LINES and sum(c > 1 for c in counts) >= 3:
            break
    levels = []
    inner = 1
    for count in reversed(counts):
        stride = int(rng.integers(-6, 7)) * d  # lines are line-aligned in DRAM (else DRAM_RANGE)
        levels.append((count, stride, inner, int(rng.integers(-1, 3)), int(rng.integers(-1, 3))))
        inner *= count
    return levels[::-1]


def walk(levels, base: int, y0: int, x0: int, height: int, width: int):
    """(dram address or None for padding) of each line, in local order."""
    lines = []
    for index in itertools.product(*(range(level[0]) for level in levels)):
        addr = base + sum(i * level[1] for i, level in zip(index, levels, strict=True))
        y = y0 + sum(i * level[3] for i, level in zip(index, levels, strict=True))
        x = x0 + sum(i * level[4] for i, level in zip(index, levels, strict=True))
        padded = (height and not 0 <= y < height) or (width and not 0 <= x < width)
        lines.append(None if padded else addr)
    return lines


def descriptor_case(rng: np.random.Generator, kind: str):
    d = CONFIG.rows
    b = Builder(CONFIG)
    source = rng.integers(-128, 128, (160, d), dtype=np.int8)
    src = b.put(source)
    levels = random_nest(rng, d)
    checks = {
        "none": (0, 0),
        "y": (int(rng.integers(2, 5)), 0),
        "x": (0, int(rng.integers(2, 5))),
        "y_and_x": (int(rng.integers(2, 5)), int(rng.integers(2, 5))),
    }
    height, width = checks[kind]
    y0, x0 = int(rng.integers(-2, 2)), int(rng.integers(-2, 2))
    pad = int(rng.integers(-128, 128))
    # A base that keeps every line read inside the source (padding lines read nothing).
    for _ in range(1000):
        base = src + int(rng.integers(0, source.shape[0])) * d
        addrs = walk(levels, base, y0, x0, height, width)
        if all(a is None or src <= a <= src + source.size - d for a in addrs):
            break
    else:
        raise AssertionError("no base keeps the lines inside the source")
    n = len(addrs)
    ones = np.ones(d, dtype=np.int64)
    b.load_params(b.put_params(mult=ones, shift=0 * ones), 1)
    load = b.desc(
        "ACT",
        0,
        base,
        [lv for lv in levels],
        y0=y0,
        x0=x0,
        height=height,
        width=width,
        pad_value=pad,
    )
    b.emit("load", "push_next", desc=load)
    b.emit(
        "pool", "pop_prev,push_next", act_addr=0, acc_addr=0, m=n, window=1, n_iter=1, mode="SUM"
    )
    out = b.alloc(n * d, name="output")
    store = b.desc("ACC", 0, out, [(n, d, 1)])
    b.emit("store", "pop_prev", desc=store, param_addr=0, param_loop=0, clamp_lo=-128, clamp_hi=127)
    raw = b.dram.view(np.int8)
    expected = np.stack(
        [np.full(d, pad, np.int8) if a is None else raw[a : a + d].copy() for a in addrs]
    )
    return b, (out, expected, levels)


def store_case(rng: np.random.Generator, kind: str):
    d = CONFIG.rows
    b = Builder(CONFIG)
    levels = random_nest(rng, d)
    height, width = {"none": (0, 0), "y": (3, 0), "x": (0, 3), "y_and_x": (3, 3)}[kind]
    y0, x0 = int(rng.integers(-2, 2)), int(rng.integers(-2, 2))
    n = int(np.prod([level[0] for level in levels]))
    lines = rng.integers(-128, 128, (n, d), dtype=np.int8)
    src = b.put(lines)
    size = 160 * d
    out = b.alloc(size, name="output")
    b.dram[out : out + size] = GUARD
    for _ in range(1000):
        base = out + int(rng.integers(0, size // d)) * d
        addrs = walk(levels, base, y0, x0, height, width)
        if all(a is None or out <= a <= out + size - d for a in addrs):
            break
    else:
        raise AssertionError("no base keeps the stored lines inside the buffer")
    # An identity PARAM line for each index of the outermost loop (STORE's param_loop 0).
    ones = np.ones(levels[0][0] * d, dtype=np.int64)
    b.load_params(b.put_params(mult=ones, shift=0 * ones), levels[0][0])
    b.load_lines("ACT", 0, src, n, d, deps="push_next")
    b.emit(
        "pool", "pop_prev,push_next", act_addr=0, acc_addr=0, m=n, window=1, n_iter=1, mode="SUM"
    )
    store = b.desc("ACC", 0, base, list(levels), y0=y0, x0=x0, height=height, width=width)
    b.emit("store", "pop_prev", desc=store, param_addr=0, param_loop=0, clamp_lo=-128, clamp_hi=127)
    expected = np.full(size, GUARD, np.uint8)
    for line, addr in zip(lines, addrs, strict=True):
        if addr is not None:  # lines in loop order: a later line to the same address wins
            expected[addr - out : addr - out + d] = line.view(np.uint8)
    return b, (out, expected, levels)


@pytest.mark.simulator
def test_random_store_descriptors_skip_and_write_like_numpy(tmp_path):
    rng = np.random.default_rng(SEED + 1)
    programs, checks = {}, {}
    for n in range(12):
        kind = ("none", "y", "x", "y_and_x")[n % 4]
        programs[f"store{n}_{kind}"], checks[f"store{n}_{kind}"] = store_case(rng, kind)
    for outcome in run_both(CONFIG, programs, tmp_path):
        assert outcome.rtl.done, f"{outcome.name}: {outcome.rtl.error_code}"
        assert_same_dram(outcome)
        out, expected, levels = checks[outcome.name]
        got = outcome.rtl.dram[out : out + expected.size]
        np.testing.assert_array_equal(got, expected, err_msg=f"{outcome.name}: {levels}")


@pytest.mark.simulator
def test_random_descriptors_match_numpy_and_the_isa_simulator(tmp_path):
    rng = np.random.default_rng(SEED)
    programs, checks = {}, {}
    for n in range(12):
        kind = ("none", "y", "x", "y_and_x")[n % 4]
        name = f"desc{n}_{kind}"
        programs[name], checks[name] = descriptor_case(rng, kind)
    negative = sum(any(lv[1] < 0 for lv in check[2]) for check in checks.values())
    assert negative >= 6, "the draw should exercise negative strides"
    for outcome in run_both(CONFIG, programs, tmp_path):
        assert outcome.rtl.done, f"{outcome.name}: {outcome.rtl.error_code}"
        assert_same_dram(outcome)
        out, expected, levels = checks[outcome.name]
        got = outcome.rtl.dram[out : out + expected.size].view(np.int8).reshape(expected.shape)
        np.testing.assert_array_equal(got, expected, err_msg=f"{outcome.name}: {levels}")


def test_walk_follows_the_isa_definition():
    """The reference walk itself, on a hand-checked nest: 2 x 3 lines, y padding on the last."""
    levels = [(1, 0, 0, 0, 0), (1, 0, 0, 0, 0), (2, -100, 3, 1, 0), (3, 10, 1, 0, 1)]
    assert walk(levels, 1000, 0, 0, 1, 0) == [1000, 1010, 1020, None, None, None]
    assert walk(levels, 1000, 0, -1, 0, 2) == [None, 1010, 1020, None, 910, 920]
    assert len(levels) == isa.DESC_LOOPS

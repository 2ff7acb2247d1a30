"""Directed cases of the requantization rounding rule, as accelerator programs.

Requantization rounds half up: ``floor(x * mult / 2**shift + 1/2)`` (-2.5 -> -2, 2.5 -> 3). With
random multipliers and large shifts an exact tie almost never happens, so these cases make them:
multipliers +-1, shifts 1..3, odd negative and positive accumulators, outputs around the clamp
bounds -128 / 127 and ReLU's 0, plus the extremes of shift 62. Expected values come from
:func:`exact_requant` (Python integers and fractions), never from the code under test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from arch.config import AccelConfig
from tests.programs import Builder

ROWS = 32  # accumulators per channel
CLAMPS = ((-128, 127), (0, 127), (-3, 2))  # int8 saturation, ReLU, a narrow window around 0
INT32_MIN = -(1 << 31)


def exact_requant(x: int, mult: int, shift: int) -> int:
    """The ISA's rule in exact arithmetic: the nearest integer to x * mult / 2**shift, ties up."""
    return math.floor(Fraction(x * mult, 1 << shift) + Fraction(1, 2))


def exact_store(acc: np.ndarray, mult, shift, lo: int, hi: int) -> np.ndarray:
    """(rows, channels) int8 outputs of STORE for per-channel ``mult``/``shift``."""
    out = np.empty(acc.shape, dtype=np.int8)
    for (i, c), value in np.ndenumerate(acc):
        out[i, c] = min(hi, max(lo, exact_requant(int(value), int(mult[c]), int(shift[c]))))
    return out


@dataclass
class TieProgram:
    """A program and what each of its output regions must hold: ``{clamp: (addr, expected)}``."""

    name: str
    builder: Builder
    outputs: dict[tuple[int, int], tuple[int, np.ndarray]]

    def read(self, dram: np.ndarray, clamp: tuple[int, int]) -> np.ndarray:
        addr, expected = self.outputs[clamp]
        return dram[addr : addr + expected.size].view(np.int8).reshape(expected.shape)


def _pad_channels(columns: dict[str, list[int]], dim: int, rng: np.random.Generator) -> None:
    """Pad every column to whole lines with random small-shift channels (never all alike)."""
    while len(columns["mult"]) % dim:
        columns["mult"].append(int(rng.integers(-(1 << 12), 1 << 12)))
        columns["shift"].append(int(rng.integers(1, 4)))
        columns["bias"].append(int(rng.integers(-(1 << 14), 1 << 14)))
        columns["res_mult"].append(1)
        columns["res_shift"].append(0)


def _emit(b: Builder, columns: dict[str, list[int]], x: np.ndarray) -> dict[tuple[int, int], int]:
    """LOAD x (rows, channels) and PARAM; ACCUM bias + requant(x); one STORE per clamp."""
    d, channels = b.dim, x.shape[1]
    blocks = channels // d
    params = b.put_params(**{k: np.array(v, dtype=np.int64) for k, v in columns.items()})
    lines = np.ascontiguousarray(x.reshape(ROWS, blocks, d).transpose(1, 0, 2))  # block-major
    src = b.put(lines)
    b.load_params(params, blocks)
    b.accumulate_lines(src, ROWS, blocks, strides=(ROWS, ROWS))
    addrs = {}
    for n, (lo, hi) in enumerate(CLAMPS):
        out = b.empty(ROWS, 1, channels)
        desc = b.desc("ACC", 0, out.addr, [(blocks, d, ROWS), (ROWS, channels, 1)])
        deps = "pop_prev" if n == 0 else ""
        b.emit("store", deps, desc=desc, param_addr=0, param_loop=2, clamp_lo=lo, clamp_hi=hi)
        addrs[(lo, hi)] = out.addr
    return addrs


def store_ties(config: AccelConfig, seed: int) -> TieProgram:
    """Ties in STORE's requantization: acc = bias + x (x in -16..15, a permutation per channel),
    mult +-1 and shift 1..3 with the bias putting the result around 0, -128 and 127; and shift
    62 with |acc * mult| up to 2**62 (-2**31 * 2**30 / 2**62 is exactly -1/2)."""
    rng = np.random.default_rng(seed)
    columns: dict[str, list[int]] = {
        k: [] for k in ("mult", "shift", "bias", "res_mult", "res_shift")
    }
    for mult in (1, -1):
        for shift in (1, 2, 3):
            for center in (0, -128, 127):
                columns["mult"].append(mult)
                columns["shift"].append(shift)
                columns["bias"].append(center * mult << shift)
                columns["res_mult"].append(1)
                columns["res_shift"].append(0)
    for mult in (1 << 30, -(1 << 30), INT32_MIN):
        columns["mult"].append(mult)
        columns["shift"].append(62)
        columns["bias"].append(INT32_MIN + 16)  # acc = -2**31 .. -2**31 + 31
        columns["res_mult"].append(1)
        columns["res_shift"].append(0)
    _pad_channels(columns, config.rows, rng)
    channels = len(columns["mult"])
    x = np.stack([rng.permutation(np.arange(-16, 16)) for _ in range(channels)], axis=1)
    b = Builder(config)
    addrs = _emit(b, columns, x.astype(np.int8))
    acc = x.astype(np.int64) + np.array(columns["bias"], dtype=np.int64)
    outputs = {
        clamp: (addrs[clamp], exact_store(acc, columns["mult"], columns["shift"], *clamp))
        for clamp in CLAMPS
    }
    return TieProgram("store_ties", b, outputs)


def residual_ties(config: AccelConfig, seed: int) -> TieProgram:
    """Ties in ACCUM's residual requantization: acc = bias + requant(x, res_mult, res_shift)
    with res_mult +-1, res_shift 1..3, bias 0 / -120 / 120 (so the sums cross -128 and 127),
    x int8 with every residue mod 8 among the rows; STORE is the identity (mult 1, shift 0)."""
    rng = np.random.default_rng(seed)
    columns: dict[str, list[int]] = {
        k: [] for k in ("mult", "shift", "bias", "res_mult", "res_shift")
    }
    for res_mult in (1, -1):
        for res_shift in (1, 2, 3):
            for bias in (0, -120, 120):
                columns["mult"].append(1)
                columns["shift"].append(0)
                columns["bias"].append(bias)
                columns["res_mult"].append(res_mult)
                columns["res_shift"].append(res_shift)
    _pad_channels(columns, config.rows, rng)
    channels = len(columns["mult"])
    edges = np.array([-128, 127, -1, 1, -2, 2, -3, 3, -4, 4, -12, 12, -5, 5, -127, 126])
    rest = np.setdiff1d(np.arange(-128, 128), edges)
    x = np.stack(
        [
            rng.permutation(np.concatenate([edges, rng.choice(rest, ROWS - edges.size, False)]))
            for _ in range(channels)
        ],
        axis=1,
    )
    b = Builder(config)
    addrs = _emit(b, columns, x.astype(np.int8))
    acc = np.empty(x.shape, dtype=np.int64)
    for (i, c), value in np.ndenumerate(x):
        scaled = exact_requant(int(value), columns["res_mult"][c], columns["res_shift"][c])
        acc[i, c] = columns["bias"][c] + scaled
    outputs = {
        clamp: (addrs[clamp], exact_store(acc, columns["mult"], columns["shift"], *clamp))
        for clamp in CLAMPS
    }
    return TieProgram("residual_ties", b, outputs)


def assert_outputs(name: str, clamp: tuple[int, int], got: np.ndarray, want: np.ndarray) -> None:
    """``got == want``, else the first differing (row, channel) with both values."""
    bad = np.argwhere(got != want)
    if bad.size:
        where = tuple(int(i) for i in bad[0])
        raise AssertionError(
            f"{name} clamp {clamp}: {len(bad)} values differ, first at (row, channel) {where}: "
            f"expected {int(want[where])}, got {int(got[where])}"
        )


def tie_programs(config: AccelConfig, seed: int = 0) -> list[TieProgram]:
    return [store_ties(config, seed), residual_ties(config, seed + 1)]

"""The norm unit's row scalar (``hdl_gen/norm_scalar.py``) in Amaranth's simulator, against
``arch.norm_ops`` computed apart: ``(R, t)`` of the reciprocal square root of LayerNorm's
variance term and the Softmax sum's reciprocal, each final exactly ``NORM_RSQRT_CYCLES`` /
``NORM_RECIP_CYCLES`` cycles after its start (the cycles the ISA simulator charges a row).

Seeded random terms over the whole range (every bit length, so every normalization shift),
the ends (1, 2**50 - 1; a sum of 0, read as 1, and 2**31 - 1), perfect squares and their
neighbours (where a digit of the root flips), powers of two and one less (where the divider's
quotient carries). The results are read one cycle early and on time: a scalar one cycle late
or early fails, as does a wrong bit.
"""

from __future__ import annotations

import math

import numpy as np
from amaranth.sim import Simulator

from arch import norm_ops
from arch.isa.formats import NORM_RECIP_CYCLES, NORM_RSQRT_CYCLES
from hdl_gen.norm_scalar import SUM_BITS, V_BITS, NormScalar


def _variance_terms(rng: np.random.Generator) -> list[int]:
    terms = [1, 2, 3, (1 << V_BITS) - 1]
    for length in range(1, V_BITS + 1):
        terms.append(int(rng.integers(1 << (length - 1), 1 << length, dtype=np.uint64)))
    for root in (int(rng.integers(2, 1 << 24)) for _ in range(12)):
        terms += [root * root - 1, root * root, root * root + 1]
    terms += [1 << b for b in range(0, V_BITS, 7)] + [(1 << b) - 1 for b in range(2, V_BITS, 7)]
    return terms


def _sums(rng: np.random.Generator) -> list[int]:
    sums = [0, 1, 2, 3, (1 << SUM_BITS) - 1]
    for length in range(1, SUM_BITS + 1):
        sums.append(int(rng.integers(1 << (length - 1), 1 << length)))
    return sums + [1 << b for b in range(0, SUM_BITS, 5)] + [(1 << b) - 1 for b in range(2, 31, 5)]


def _expected_recip(s: int) -> tuple[int, int]:
    safe = max(s, 1)
    length = safe.bit_length()
    return ((1 << (length + 15)) + safe // 2) // safe, length


def _run(terms: list[int], sums: list[int]) -> tuple[list, list]:
    dut = NormScalar()
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    rsqrt, recip = [], []

    async def one(ctx, start, port, value, cycles: int, outs) -> tuple[int, ...]:
        """Strobe ``start`` with ``value`` on ``port``; ``r`` a cycle before its last, then
        ``outs`` on time."""
        ctx.set(port, value)
        ctx.set(start, 1)
        await ctx.tick()
        ctx.set(start, 0)
        for _ in range(cycles - 2):
            await ctx.tick()
        early = ctx.get(dut.r)
        await ctx.tick()
        return (early, *(ctx.get(out) for out in outs))

    async def bench(ctx) -> None:
        for v in terms:
            rsqrt.append(
                await one(ctx, dut.start_rsqrt, dut.v, v, NORM_RSQRT_CYCLES, (dut.r, dut.t))
            )
        for s in sums:
            recip.append(
                await one(ctx, dut.start_recip, dut.s, s, NORM_RECIP_CYCLES, (dut.r, dut.l))
            )

    sim.add_testbench(bench)
    sim.run()
    return rsqrt, recip


def test_the_row_scalar_is_norm_ops_on_time():
    rng = np.random.default_rng(2711)
    terms, sums = _variance_terms(rng), _sums(rng)
    rsqrt, recip = _run(terms, sums)
    r_want, t_want = norm_ops.row_rsqrt(np.array(terms, dtype=np.int64))
    early_rsqrt = 0
    for v, (early, r, t), rw, tw in zip(terms, rsqrt, r_want, t_want, strict=True):
        assert (r, t) == (int(rw), int(tw)), v
        k = (62 - v.bit_length()) // 2
        assert int(rw) == ((1 << 46) + math.isqrt(v << 2 * k) // 2) // math.isqrt(v << 2 * k)
        early_rsqrt += early != r
    early_recip = 0
    for s, (early, r, length) in zip(sums, recip, strict=True):
        assert (r, length) == _expected_recip(s), s
        early_recip += early != r
    # one cycle before its last, the scalar has not all its bits yet (for all but a few terms
    # whose last bits are those it held)
    assert early_rsqrt > len(terms) // 2 and early_recip > len(sums) // 2

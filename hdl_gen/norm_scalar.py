"""The norm unit's row scalar: a reciprocal square root (LayerNorm, RMSNorm) or a reciprocal
(Softmax) per row, several result bits per cycle, bit-exact with :mod:`arch.norm_ops`."""

from __future__ import annotations

from amaranth import Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from arch.isa.formats import (
    NORM_DIV_BITS_PER_CYCLE,
    NORM_ISQRT_BITS_PER_CYCLE,
    NORM_RECIP_CYCLES,
    NORM_RSQRT_CYCLES,
)

V_BITS = 50  # C*S2 - S1**2 + E < 2**16 * 2**33 + 2**31 for rows of at most 65 535 channels
SUM_BITS = 31  # Softmax: sum of e < 2**15 * 2**16
ROOT_BITS = 31  # isqrt of the 62-bit normalized V
R_BITS = 17  # the reciprocal R is at most 2**16
T_BITS = 6  # the normalize shift t = 34 - k is 4..34
L_BITS = 5  # bit length of the Softmax sum, 1..31
ISQRT_STEPS = ROOT_BITS - 1  # after the load, which decides the always-set top bit
DIV_STEPS = R_BITS - 1  # after the load, which also takes the first quotient bit
# Each cycle chains several steps of the same recurrence (the same bits, sooner).
ISQRT_CYCLES, DIV_CYCLES = (
    ISQRT_STEPS // NORM_ISQRT_BITS_PER_CYCLE,
    DIV_STEPS // NORM_DIV_BITS_PER_CYCLE,
)
assert ISQRT_CYCLES * NORM_ISQRT_BITS_PER_CYCLE == ISQRT_STEPS
assert DIV_CYCLES * NORM_DIV_BITS_PER_CYCLE == DIV_STEPS
assert 1 + ISQRT_CYCLES + 1 + DIV_CYCLES == NORM_RSQRT_CYCLES
assert 1 + DIV_CYCLES == NORM_RECIP_CYCLES


def bit_length(m: Module, value: Value, name: str) -> Signal:
    """``value.bit_length()`` of an unsigned value (a priority encoder)."""
    length = Signal(range(len(value) + 1), name=name)
    for bit in range(len(value)):
        with m.If(value[bit]):  # later assignments win: the highest set bit
            m.d.comb += length.eq(bit + 1)
    return length


class NormScalar(wiring.Component):
    """The row scalar of :func:`arch.norm_ops.row_rsqrt` or of the Softmax reciprocal.

    ``start_rsqrt`` with ``v`` (LayerNorm, RMSNorm): ``k = (62 - bitlen(v)) // 2``, an exact
    digit-by-digit ``q = isqrt(v << 2k)`` (31 result bits; the load decides the top one, then
    ``NORM_ISQRT_BITS_PER_CYCLE`` a cycle), then a restoring divider ``r = (2**46 + q // 2) //
    q`` (17 quotient bits: the first in the cycle it loads, then ``NORM_DIV_BITS_PER_CYCLE`` a
    cycle): ``r`` and ``t = 34 - k`` are final ``NORM_RSQRT_CYCLES`` (16) cycles after the
    start cycle, counting it.

    ``start_recip`` with ``s`` (Softmax, the row's sum of ``e``, 0 read as 1): ``l =
    bitlen(s)`` and ``r = (2**(l+15) + s // 2) // s`` on the same divider, final
    ``NORM_RECIP_CYCLES`` (5) cycles after the start cycle, counting it.

    Attributes
    ----------
    start_rsqrt, start_recip : In(1)
        Strobes: begin with ``v`` or ``s``.
    v : In(V_BITS), s : In(SUM_BITS)
        The variance term (>= 1) and the Softmax sum, read in the start cycle.
    r : Out(R_BITS), t : Out(T_BITS), l : Out(L_BITS)
        The results, held until the next start.
    """

    def __init__(self) -> None:
        super().__init__(
            {
                "start_rsqrt": In(1),
                "start_recip": In(1),
                "v": In(V_BITS),
                "s": In(SUM_BITS),
                "r": Out(R_BITS),
                "t": Out(T_BITS),
                "l": Out(L_BITS),
            }
        )

    def elaborate(self, platform: object) -> Module:
        m = Module()
        root_rem, root = Signal(2 * ROOT_BITS + 1), Signal(2 * ROOT_BITS + 1)
        one = Signal(2 * ROOT_BITS + 1)
        divisor, rem, low = Signal(ROOT_BITS), Signal(ROOT_BITS + 1), Signal(R_BITS)
        count = Signal(range(max(ISQRT_CYCLES, DIV_CYCLES) + 1))

        # isqrt load: v << 2k has bit length 61 or 62, so its root's top bit (2**30) is set.
        v_length = bit_length(m, self.v, "v_length")
        k = Signal(range(32))
        m.d.comb += k.eq((62 - v_length) >> 1)
        normalized = Signal(2 * ROOT_BITS)
        m.d.comb += normalized.eq(self.v << (k << 1))
        top = 1 << (2 * ROOT_BITS - 2)

        def isqrt_step(rem: Value, q: Value, bit: Value) -> tuple[Value, Value, Value]:
            """One digit: with t = q + bit, take it when it fits the remainder."""
            width = len(root)
            trial = (q + bit)[:width]
            fits = rem >= trial
            rem = Mux(fits, rem - trial, rem)[:width]
            return rem, Mux(fits, (q >> 1) + bit, q >> 1)[:width], bit >> 2

        # Divider load + first step, from the root (rsqrt) or from the sum (recip).
        s_safe = Signal(SUM_BITS)
        m.d.comb += s_safe.eq(Mux(self.s == 0, 1, self.s))
        s_length = bit_length(m, s_safe, "s_length")
        lead = Signal(range(SUM_BITS + 16))  # the numerator's leading bit, l + 15
        m.d.comb += lead.eq(s_length + 15)
        load_d, load_n = Signal(ROOT_BITS), Signal(2 * ROOT_BITS - 15)  # 47-bit numerator
        with m.If(self.start_recip):
            m.d.comb += [
                load_d.eq(s_safe),
                load_n.eq((Value.cast(1) << lead) + (s_safe >> 1)),
            ]
        with m.Else():
            q = root[:ROOT_BITS]
            m.d.comb += [load_d.eq(q), load_n.eq((1 << 46) + (q >> 1))]
        loading = Signal()
        step_d = Mux(loading, load_d, divisor)
        step_rem = Mux(loading, load_n >> R_BITS, rem)
        step_low = Mux(loading, load_n[:R_BITS], low)
        step_quo = Mux(loading, 0, self.r)

        def div_step(d: Value, r: Value, lo: Value, quo: Value) -> tuple[Value, Value, Value]:
            """One restoring step: the next numerator bit in, a quotient bit out."""
            shifted = ((r << 1) | lo[-1])[: ROOT_BITS + 2]
            take = shifted >= d
            remainder = Mux(take, shifted - d, shifted)[: len(rem)]
            return remainder, (lo << 1)[:R_BITS], ((quo << 1) | take)[:R_BITS]

        def divide(steps: int) -> None:
            r, lo, quo = step_rem, step_low, step_quo
            for _ in range(steps):
                r, lo, quo = div_step(step_d, r, lo, quo)
            m.d.sync += [divisor.eq(step_d), rem.eq(r), low.eq(lo), self.r.eq(quo)]

        with m.FSM(name="scalar"):
            with m.State("IDLE"):
                with m.If(self.start_rsqrt):
                    m.d.sync += [
                        root_rem.eq(normalized - top),
                        root.eq(top),
                        one.eq(top >> 2),
                        self.t.eq(34 - k),
                        count.eq(0),
                    ]
                    m.next = "ISQRT"
                with m.Elif(self.start_recip):
                    m.d.comb += loading.eq(1)
                    divide(1)
                    m.d.sync += [self.l.eq(s_length), count.eq(0)]
                    m.next = "DIVIDE"
            with m.State("ISQRT"):
                state: tuple[Value, Value, Value] = (root_rem, root, one)
                for _ in range(NORM_ISQRT_BITS_PER_CYCLE):
                    state = isqrt_step(*state)
                m.d.sync += [
                    root_rem.eq(state[0]),
                    root.eq(state[1]),
                    one.eq(state[2]),
                    count.eq(count + 1),
                ]
                with m.If(count == ISQRT_CYCLES - 1):
                    m.next = "DIVIDE_LOAD"
            with m.State("DIVIDE_LOAD"):
                m.d.comb += loading.eq(1)
                divide(1)
                m.d.sync += count.eq(0)
                m.next = "DIVIDE"
            with m.State("DIVIDE"):
                divide(NORM_DIV_BITS_PER_CYCLE)
                m.d.sync += count.eq(count + 1)
                with m.If(count == DIV_CYCLES - 1):
                    m.next = "IDLE"
        return m

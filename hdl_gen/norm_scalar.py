"""The norm unit's row scalar: a reciprocal square root (LayerNorm, RMSNorm) or a reciprocal
(Softmax) per row, one bit per cycle, bit-exact with :mod:`arch.norm_ops`."""

from __future__ import annotations

from amaranth import Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from arch.isa.formats import NORM_RECIP_CYCLES, NORM_RSQRT_CYCLES

V_BITS = 50  # C*S2 - S1**2 + E < 2**16 * 2**33 + 2**31 for rows of at most 65 535 channels
SUM_BITS = 31  # Softmax: sum of e < 2**15 * 2**16
ROOT_BITS = 31  # isqrt of the 62-bit normalized V
R_BITS = 17  # the reciprocal R is at most 2**16
T_BITS = 6  # the normalize shift t = 34 - k is 4..34
L_BITS = 5  # bit length of the Softmax sum, 1..31
ISQRT_STEPS = ROOT_BITS - 1  # after the load, which decides the always-set top bit
DIV_STEPS = R_BITS - 1  # after the load, which also takes the first quotient bit
assert 1 + ISQRT_STEPS + 1 + DIV_STEPS == NORM_RSQRT_CYCLES
assert 1 + DIV_STEPS == NORM_RECIP_CYCLES


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
    one per cycle), then a restoring divider ``r = (2**46 + q // 2) // q`` (17 quotient bits,
    the first in the cycle it loads): ``r`` and ``t = 34 - k`` are final
    ``NORM_RSQRT_CYCLES`` (48) cycles after the start cycle, counting it.

    ``start_recip`` with ``s`` (Softmax, the row's sum of ``e``, 0 read as 1): ``l =
    bitlen(s)`` and ``r = (2**(l+15) + s // 2) // s`` on the same divider, final
    ``NORM_RECIP_CYCLES`` (17) cycles after the start cycle, counting it.

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
        count = Signal(range(max(ISQRT_STEPS, DIV_STEPS) + 1))

        # isqrt load: v << 2k has bit length 61 or 62, so its root's top bit (2**30) is set.
        v_length = bit_length(m, self.v, "v_length")
        k = Signal(range(32))
        m.d.comb += k.eq((62 - v_length) >> 1)
        normalized = Signal(2 * ROOT_BITS)
        m.d.comb += normalized.eq(self.v << (k << 1))
        top = 1 << (2 * ROOT_BITS - 2)
        # isqrt step: with t = root + one, take it when it fits the remainder.
        trial = Signal.like(root)
        m.d.comb += trial.eq(root + one)
        fits = root_rem >= trial

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
        shifted = Signal(ROOT_BITS + 2)
        m.d.comb += shifted.eq((step_rem << 1) | step_low[-1])
        take = shifted >= step_d

        def divide() -> None:
            m.d.sync += [
                divisor.eq(step_d),
                rem.eq(Mux(take, shifted - step_d, shifted)),
                low.eq(step_low << 1),
                self.r.eq((step_quo << 1) | take),
            ]

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
                    divide()
                    m.d.sync += [self.l.eq(s_length), count.eq(0)]
                    m.next = "DIVIDE"
            with m.State("ISQRT"):
                m.d.sync += [
                    root_rem.eq(Mux(fits, root_rem - trial, root_rem)),
                    root.eq(Mux(fits, (root >> 1) + one, root >> 1)),
                    one.eq(one >> 2),
                    count.eq(count + 1),
                ]
                with m.If(count == ISQRT_STEPS - 1):
                    m.next = "DIVIDE_LOAD"
            with m.State("DIVIDE_LOAD"):
                m.d.comb += loading.eq(1)
                divide()
                m.d.sync += count.eq(0)
                m.next = "DIVIDE"
            with m.State("DIVIDE"):
                divide()
                m.d.sync += count.eq(count + 1)
                with m.If(count == DIV_STEPS - 1):
                    m.next = "IDLE"
        return m

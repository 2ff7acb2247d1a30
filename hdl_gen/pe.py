"""Processing element of the weight-stationary systolic array."""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class ProcessingElement(wiring.Component):
    """Holds two weights (banks 0 and 1) and computes ``psum_out = psum_in + a_in * w[bank_in]``.

    The activation and its bank bit move one PE to the right per cycle, the partial sum one PE
    down. Two weight banks let the next tile's weights load while the current tile streams; the
    bank bit travels with each activation so every PE switches exactly when the new tile reaches it.

    Parameters
    ----------
    in_bits, w_bits, acc_bits : int
        Signed widths of activations, weights and partial sums (partial sums wrap).
    top : bool
        A PE of the first row: nothing is above it, so it has no ``psum_in`` and
        ``psum_out = a_in * w[bank_in]``.

    Attributes
    ----------
    a_in, bank_in, psum_in : In
        Activation and its bank from the left, partial sum from above (not on the top row).
    a_out, bank_out, psum_out : Out
        Registered, to the right and below.
    w_en, w_bank, w_data : In
        Write ``w_data`` into weight bank ``w_bank``.
    """

    def __init__(
        self, in_bits: int = 8, w_bits: int = 8, acc_bits: int = 32, top: bool = False
    ) -> None:
        self.w_bits = w_bits
        self.top = top
        above = {} if top else {"psum_in": In(signed(acc_bits))}
        super().__init__(
            {
                "a_in": In(signed(in_bits)),
                "bank_in": In(1),
                **above,
                "a_out": Out(signed(in_bits)),
                "bank_out": Out(1),
                "psum_out": Out(signed(acc_bits)),
                "w_en": In(1),
                "w_bank": In(1),
                "w_data": In(signed(w_bits)),
            }
        )

    def elaborate(self, platform: object) -> Module:
        m = Module()
        weights = [Signal(signed(self.w_bits), name=f"w{bank}") for bank in range(2)]
        with m.If(self.w_en):
            with m.If(self.w_bank):
                m.d.sync += weights[1].eq(self.w_data)
            with m.Else():
                m.d.sync += weights[0].eq(self.w_data)
        weight = Mux(self.bank_in, weights[1], weights[0])
        product = self.a_in * weight
        # The datapath registers have no reset (nothing reads them before valid data has
        # flowed through: see SystolicArray), which saves a reset mux per register per cycle.
        a_out = Signal.like(self.a_out, reset_less=True)
        bank_out = Signal.like(self.bank_out, reset_less=True)
        psum_out = Signal.like(self.psum_out, reset_less=True)
        m.d.sync += [
            a_out.eq(self.a_in),
            bank_out.eq(self.bank_in),
            psum_out.eq(product if self.top else self.psum_in + product),
        ]
        m.d.comb += [self.a_out.eq(a_out), self.bank_out.eq(bank_out), self.psum_out.eq(psum_out)]
        return m

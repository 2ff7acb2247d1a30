"""Processing element of the weight-stationary systolic array."""

from __future__ import annotations

from amaranth import Cat, Module, Signal, signed
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out


class ProcessingElement(wiring.Component):
    """Holds two weights (banks 0 and 1) and computes ``psum_out = psum_in + a_in * w[bank_in]``.

    The activation moves one PE to the right per cycle, the partial sum one PE down. Two weight
    banks let the next tile's weights load while the current tile streams; ``bank_in`` is the
    bank of the vector whose activation is at ``a_in`` (the array delays it along its
    anti-diagonals), so every PE switches exactly when the new tile reaches it.

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
        Activation from the left, its bank, partial sum from above (not on the top row).
    a_out, psum_out : Out
        Registered, to the right and below.
    w_en, w_bank, w_data : In
        Write ``w_data`` into weight bank ``w_bank``.
    """

    def __init__(
        self, in_bits: int = 8, w_bits: int = 8, acc_bits: int = 32, top: bool = False
    ) -> None:
        self.in_bits, self.w_bits, self.acc_bits = in_bits, w_bits, acc_bits
        self.top = top
        above = {} if top else {"psum_in": In(signed(acc_bits))}
        super().__init__(
            {
                "a_in": In(signed(in_bits)),
                "bank_in": In(1),
                **above,
                "a_out": Out(signed(in_bits)),
                "psum_out": Out(signed(acc_bits)),
                "w_en": In(1),
                "w_bank": In(1),
                "w_data": In(signed(w_bits)),
            }
        )

    def elaborate(self, platform: object) -> Module:
        m = Module()
        # The two weight banks are a 2-word register file: a write touches one word, a read
        # selects by the bank bit travelling with the activation. No reset: the weight loader
        # writes every row of a bank before the bank counts as loaded (GemmEngine), as the
        # datapath registers below. Verilator then updates a weight only when it is written.
        m.submodules.weights = weights = memory.Memory(shape=signed(self.w_bits), depth=2, init=[])
        write = weights.write_port()
        read = weights.read_port(domain="comb")
        m.d.comb += [
            write.en.eq(self.w_en),
            write.addr.eq(self.w_bank),
            write.data.eq(self.w_data),
            read.addr.eq(self.bank_in),
        ]
        weight = read.data
        # The MAC is written at the accumulator's width: the activation is sign-extended in the
        # expression, so the multiply's result is the exact in_bits x w_bits product already
        # extended to acc_bits, and the sum is a plain add modulo 2**acc_bits. The hardware is
        # the same 8x8 multiplier and 32-bit adder (synthesis trims the extension: area.md is
        # unchanged); Verilator computes one 32-bit multiply and add instead of sign-extending
        # a 16-bit product and a 33-bit sum (docs/performance-history.md, section 7).
        spare = max(self.acc_bits - self.w_bits - self.in_bits, 0)
        a_wide = Cat(self.a_in, self.a_in[-1].replicate(spare)).as_signed()
        product = (a_wide * weight).as_unsigned()[: self.acc_bits]
        # The datapath registers have no reset (nothing reads them before valid data has
        # flowed through: see SystolicArray), which saves a reset mux per register per cycle.
        a_out = Signal.like(self.a_out, reset_less=True)
        psum_out = Signal.like(self.psum_out, reset_less=True)
        m.d.sync += [
            a_out.eq(self.a_in),
            psum_out.eq(product if self.top else self.psum_in.as_unsigned() + product),
        ]
        m.d.comb += [self.a_out.eq(a_out), self.psum_out.eq(psum_out)]
        return m

"""Weight-stationary systolic array with input skew and output deskew."""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from arch.config import AccelConfig
from hdl_gen.pe import ProcessingElement


def array_signature(config: AccelConfig) -> wiring.Signature:
    """The array's ports, seen from the array (its driver uses the flipped signature)."""
    c = config
    return wiring.Signature(
        {
            "a": In(data.ArrayLayout(signed(c.in_bits), c.rows)),
            "bank": In(1),
            "out": Out(data.ArrayLayout(signed(c.acc_bits), c.cols)),
            "w_en": In(1),
            "w_row": In(range(c.rows)),
            "w_bank": In(1),
            "w_data": In(data.ArrayLayout(signed(c.w_bits), c.cols)),
            "w_transposed": In(1),
        }
    )


def array_latency(config: AccelConfig) -> int:
    """Cycles from a vector at ``a`` to its line at ``out``: the input register, ``rows`` PEs
    down and ``cols - 1`` deskew stages."""
    return config.rows + config.cols


class SystolicArray(wiring.Component):
    """``rows`` x ``cols`` PEs computing ``out[c] = sum_r a[r] * W[r][c]`` for one activation
    vector per cycle, a fixed :attr:`latency` cycles later, as a full (deskewed) line.

    Row r of the input is delayed r cycles before entering PE(r, 0); column c of the result is
    delayed ``cols - 1 - c`` cycles after leaving PE(rows - 1, c), so whole vectors go in and whole
    lines come out. The array has no valid signal: a caller tracks which outputs matter with a
    delay line of :attr:`latency` (idle inputs should be zero, but any value only affects
    outputs nobody reads). So the skew, deskew and PE datapath registers have no reset.

    Attributes
    ----------
    a : In(array of rows signed activations)
    bank : In(1)
        Weight bank the vector ``a`` multiplies with.
    out : Out(array of cols signed accumulators)
    w_en, w_row, w_bank, w_data : In
        Write weight row ``w_row`` (cols weights) of bank ``w_bank``.
    w_transposed : In(1)
        Write ``w_data`` as column ``w_row`` instead (PE(r, c) takes ``w_data[r]`` when
        ``w_row == c``): a tile stored as its columns' lines loads as it would from its rows
        (the array is square, :class:`~arch.config.AccelConfig`).
    """

    def __init__(self, config: AccelConfig) -> None:
        self.config = config
        self.latency = array_latency(config)
        super().__init__(array_signature(config))

    def elaborate(self, platform: object) -> Module:
        m = Module()
        c = self.config
        pes = [
            [ProcessingElement(c.in_bits, c.w_bits, c.acc_bits, top=r == 0) for _ in range(c.cols)]
            for r in range(c.rows)
        ]
        for r, row in enumerate(pes):
            for col, pe in enumerate(row):
                m.submodules[f"pe_{r}_{col}"] = pe
                m.d.comb += [
                    pe.w_en.eq(self.w_en & (self.w_row == Mux(self.w_transposed, col, r))),
                    pe.w_bank.eq(self.w_bank),
                    pe.w_data.eq(Mux(self.w_transposed, self.w_data[r], self.w_data[col])),
                ]
                if col > 0:
                    m.d.comb += pe.a_in.eq(row[col - 1].a_out)
                if r > 0:
                    m.d.comb += pe.psum_in.eq(pes[r - 1][col].psum_out)

        # Input skew: row r waits 1 + r cycles (the first register is the input register).
        for r in range(c.rows):
            a = self.a[r]
            for stage in range(r + 1):
                a_next = Signal(signed(c.in_bits), name=f"skew_{r}_{stage}", reset_less=True)
                m.d.sync += a_next.eq(a)
                a = a_next
            m.d.comb += pes[r][0].a_in.eq(a)

        # The bank of a vector reaches PE(r, c) with its activation, 1 + r + c cycles after
        # `bank`: one delay line whose stage r + c + 1 feeds the whole anti-diagonal r + c (a
        # bank bit registered in every PE beside its activation would hold the same values).
        bank = self.bank
        delayed = [bank]
        for stage in range(1, c.rows + c.cols):
            bank_next = Signal(name=f"bank_delay_{stage}", reset_less=True)
            m.d.sync += bank_next.eq(bank)
            bank = bank_next
            delayed.append(bank)
        for r, row in enumerate(pes):
            for col, pe in enumerate(row):
                m.d.comb += pe.bank_in.eq(delayed[1 + r + col])

        # Output deskew: column c waits cols - 1 - c cycles.
        for col in range(c.cols):
            value = pes[c.rows - 1][col].psum_out
            for stage in range(c.cols - 1 - col):
                delayed = Signal(signed(c.acc_bits), name=f"deskew_{col}_{stage}", reset_less=True)
                m.d.sync += delayed.eq(value)
                value = delayed
            m.d.comb += self.out[col].eq(value)
        return m

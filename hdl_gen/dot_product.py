"""Streaming signed dot product: the smallest component that exercises the whole tool chain."""

from __future__ import annotations

from amaranth import Module, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out


class DotProduct(wiring.Component):
    """Two-stage pipelined dot product of two signed vectors, with stream handshakes.

    Parameters
    ----------
    lanes : int
        Vector length.
    in_bits : int
        Width of each signed element.
    out_bits : int
        Width of the signed result (wraps modulo ``2**out_bits``).

    Attributes
    ----------
    operands : In(stream.Signature(Struct{a, b}))
        Pairs of vectors.
    result : Out(stream.Signature(signed(out_bits)))
        ``sum(a[i] * b[i])``, one per accepted operand pair, in order.
    """

    def __init__(self, lanes: int = 4, in_bits: int = 8, out_bits: int = 32) -> None:
        for name, value in (("Lanes", lanes), ("Input width", in_bits), ("Output width", out_bits)):
            if not isinstance(value, int) or value <= 0:
                raise TypeError(f"{name} must be a positive integer, not {value!r}")
        self.lanes, self.in_bits, self.out_bits = lanes, in_bits, out_bits
        vector = data.ArrayLayout(signed(in_bits), lanes)
        operands = data.StructLayout({"a": vector, "b": vector})
        super().__init__(
            {
                "operands": In(stream.Signature(operands)),
                "result": Out(stream.Signature(signed(out_bits))),
            }
        )

    def elaborate(self, platform: object) -> Module:
        m = Module()
        products = Signal(data.ArrayLayout(signed(2 * self.in_bits), self.lanes))
        products_valid = Signal()
        advance_out = ~self.result.valid | self.result.ready
        advance_in = ~products_valid | advance_out
        m.d.comb += self.operands.ready.eq(advance_in)

        with m.If(advance_in):
            m.d.sync += products_valid.eq(self.operands.valid)
            a, b = self.operands.payload.a, self.operands.payload.b
            for i in range(self.lanes):
                m.d.sync += products[i].eq(a[i] * b[i])
        with m.If(advance_out):
            m.d.sync += self.result.valid.eq(products_valid)
            total = sum(products[i] for i in range(self.lanes))
            m.d.sync += self.result.payload.eq(total)
        return m

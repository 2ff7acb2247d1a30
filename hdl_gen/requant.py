"""Requantization arithmetic shared by the store unit (outputs) and ACCUM (residuals).

Each step is a named signal, not an expression: an Amaranth expression used twice is emitted
twice, and Verilator evaluates every copy on every cycle. The product of a ``w``-bit and a
``v``-bit signed value has magnitude at most ``2**(w + v - 2)``, so the rounded quotient, and
that plus a small zero point, fit the product's own width: no step needs wider arithmetic
(which Verilator simulates with multi-word loops above 64 bits).
"""

from __future__ import annotations

from amaranth import Module, Mux, Signal, Value, signed
from amaranth.hdl import ValueCastable


def requantize(
    m: Module, value: Value | ValueCastable, mult: Value, shift: Value, name: str
) -> Signal:
    """``(value * mult + 2**(shift-1)) >> shift`` (round half up), exactly, as a signed signal
    of the product's width.

    Computed as ``(p >> s) + bit s-1 of p``, which equals the rounded form for every
    two's-complement ``p`` and avoids a variable left shift of a wide constant.
    """
    value = Value.cast(value).as_signed()
    product = Signal(signed(len(value) + len(mult)), name=f"{name}_product")
    m.d.comb += product.eq(value * mult.as_signed())
    truncated = product >> shift
    half = (product >> (shift - 1).as_unsigned()[: len(shift)])[0]
    rounded = Signal(signed(len(product)), name=name)  # exact: see above
    m.d.comb += rounded.eq(truncated + Mux(shift == 0, 0, half))
    return rounded


def clamp(m: Module, value: Value, lo: Value, hi: Value, name: str) -> Signal:
    """``min(max(value, lo), hi)`` for signed values, as a signal of ``value``'s width."""
    lo, hi = lo.as_signed(), hi.as_signed()
    clamped = Signal(signed(len(value)), name=name)
    m.d.comb += clamped.eq(Mux(value < lo, lo, Mux(value > hi, hi, value)))
    return clamped

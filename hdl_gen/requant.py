"""Requantization arithmetic shared by the store unit (outputs) and ACCUM (residuals)."""

from __future__ import annotations

from amaranth import Mux, Value
from amaranth.hdl import ValueCastable


def requantize(value: Value | ValueCastable, mult: Value, shift: Value) -> Value:
    """``(value * mult + 2**(shift-1)) >> shift`` (round half up), exactly, as a signed value.

    Computed as ``(p >> s) + bit s-1 of p``, which equals the rounded form for every
    two's-complement ``p`` and avoids a variable left shift of a wide constant.
    """
    product = (Value.cast(value).as_signed() * mult.as_signed()).as_signed()
    truncated = product >> shift
    half = (product >> (shift - 1).as_unsigned()[: len(shift)])[0]
    return (truncated + Mux(shift == 0, 0, half)).as_signed()


def clamp(value: Value, lo: Value, hi: Value) -> Value:
    """``min(max(value, lo), hi)`` for signed values."""
    lo, hi = lo.as_signed(), hi.as_signed()
    return Mux(value < lo, lo, Mux(value > hi, hi, value)).as_signed()

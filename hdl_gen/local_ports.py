"""The units' side of the local memories (ACT, WGT, PARAM, ACC): port signatures and widths."""

from __future__ import annotations

from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from arch import isa
from arch.config import AccelConfig

# A local line address plus a carry bit: a pointer that runs past the end of a memory is caught
# (LOCAL_RANGE) instead of wrapping, and a memory of 2**LOCAL_ADDR_BITS lines has a size.
POINTER_BITS = isa.LOCAL_ADDR_BITS + 1


def read_port(data_bits: int) -> wiring.Signature:
    """A unit's side of a synchronous local-memory read port (data the cycle after ``en``)."""
    addr = isa.LOCAL_ADDR_BITS
    return wiring.Signature({"addr": Out(addr), "en": Out(1), "data": In(data_bits)})


def write_port(data_bits: int) -> wiring.Signature:
    """A unit's side of a local-memory write port."""
    addr = isa.LOCAL_ADDR_BITS
    return wiring.Signature({"addr": Out(addr), "data": Out(data_bits), "en": Out(1)})


def param_line_bits(config: AccelConfig) -> int:
    """Bits of a PARAM line: one parameter entry per column."""
    return config.cols * isa.PARAM_ENTRY_BYTES * 8


def param_view(line: object, config: AccelConfig) -> data.View:
    """A PARAM line as an array of ``cols`` parameter entries."""
    layout = data.ArrayLayout(isa.PARAM_ENTRY.layout, config.cols)
    return data.View(layout, line)

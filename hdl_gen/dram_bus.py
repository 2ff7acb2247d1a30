"""Signatures of the DRAM links: reads are an address stream out and an always-accepted data
stream back (in request order); writes are one stream of (address, data, byte strobes)."""

from __future__ import annotations

from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from arch.isa import DRAM_ADDR_BITS


def read_request(tag_bits: int = 0) -> stream.Signature:
    if tag_bits:
        return stream.Signature(data.StructLayout({"addr": DRAM_ADDR_BITS, "tag": tag_bits}))
    return stream.Signature(DRAM_ADDR_BITS)


def read_response(bus_bytes: int, tag_bits: int = 0) -> stream.Signature:
    """Read data; the receiver must always accept it (it reserved room when it asked)."""
    if tag_bits:
        layout = data.StructLayout({"data": bus_bytes * 8, "tag": tag_bits})
        return stream.Signature(layout, always_ready=True)
    return stream.Signature(bus_bytes * 8, always_ready=True)


def read_signature(bus_bytes: int, tag_bits: int = 0) -> wiring.Signature:
    """The requester's side of a read link."""
    return wiring.Signature(
        {"req": Out(read_request(tag_bits)), "resp": In(read_response(bus_bytes, tag_bits))}
    )


def write_signature(bus_bytes: int) -> stream.Signature:
    layout = data.StructLayout({"addr": DRAM_ADDR_BITS, "data": bus_bytes * 8, "strb": bus_bytes})
    return stream.Signature(layout)

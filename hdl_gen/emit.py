"""Turn Amaranth components into reproducible Verilog files."""

from __future__ import annotations

import re
from pathlib import Path

from amaranth.back import verilog
from amaranth.lib import wiring

# Amaranth writes an `initial` block setting every memory word to zero. SRAMs have no reset value
# (programs write before they read, and the ISA simulator holds them to that), and thousands of
# zero assignments only slow down Verilator, so they are dropped.
_ZERO_MEMORY_INIT = re.compile(r"  initial begin\n(?:    \S+\[\d+\] = \d+'h0+;\n)+  end\n")


def to_verilog(component: wiring.Component, name: str) -> str:
    """Verilog text of ``component`` with top module ``name``; no source paths embedded."""
    return _ZERO_MEMORY_INIT.sub("", verilog.convert(component, name=name, emit_src=False))


def write_verilog(component: wiring.Component, name: str, path: Path) -> Path:
    """Write the Verilog of ``component`` to ``path``; leave the file untouched if unchanged."""
    text = to_verilog(component, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path

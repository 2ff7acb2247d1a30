"""Turn Amaranth components into reproducible Verilog files."""

from __future__ import annotations

from pathlib import Path

from amaranth.back import verilog
from amaranth.lib import wiring


def to_verilog(component: wiring.Component, name: str) -> str:
    """Verilog text of ``component`` with top module ``name``; no source paths embedded."""
    return verilog.convert(component, name=name, emit_src=False)


def write_verilog(component: wiring.Component, name: str, path: Path) -> Path:
    """Write the Verilog of ``component`` to ``path``; leave the file untouched if unchanged."""
    text = to_verilog(component, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path

"""Turn Amaranth components into reproducible Verilog files, and name their FSM states."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from amaranth.back import verilog
from amaranth.hdl import Fragment, ValueCastable
from amaranth.hdl._ir import PortDirection
from amaranth.lib import wiring

# Amaranth writes an `initial` block setting every memory word to zero. SRAMs have no reset value
# (programs write before they read, and the ISA simulator holds them to that), and thousands of
# zero assignments only slow down Verilator, so they are dropped.
_ZERO_MEMORY_INIT = re.compile(r"  initial begin\n(?:    \S+\[\d+\] = \d+'h0+;\n)+  end\n")
# Temporaries the backend names `\$123` / `\$auto$...` get a leading underscore: Verilator leaves
# `_`-names out of waveforms, which would otherwise carry every wide intermediate value.
_TEMPORARY = re.compile(r"\\\$")
# A one-word memory's address has no bits; the backend declares it `wire [-1:0] name;` (two bits
# in Verilog, and Verilator's ASCRANGE warning). Such a wire is never read or driven: dropped.
_ZERO_WIDTH_WIRE = re.compile(r"^  wire \[-1:0\] (\S+?) ?;\n", re.M)


def convert(component: wiring.Component, name: str) -> tuple[str, dict[str, dict[int, str]]]:
    """Verilog text of ``component`` with top module ``name`` (no source paths embedded), and
    its FSM state names: ``{"accel.load.frame_state": {0: "IDLE", ...}}``, paths below the top
    (for waveform viewers; the Verilog itself carries only the numbers)."""
    ports = {}
    for path, member, value in component.signature.flatten(component):
        if isinstance(value, ValueCastable):
            value = value.as_value()
        flow = PortDirection.Input if member.flow == wiring.In else PortDirection.Output
        ports["__".join(map(str, path))] = (value, flow)
    fragment = Fragment.get(component, None)
    text, names = verilog.convert_fragment(fragment, ports, name, emit_src=False)
    states: dict[str, dict[int, str]] = {}
    for signal, hierarchy in names.items():
        # Amaranth names an FSM's state register `<fsm>_state`, decoding n to "<STATE>/n".
        if signal.decoder is None or not hierarchy[-1].endswith("_state"):
            continue
        decoded = {}
        for value in range(2 ** len(signal)):
            try:
                decoded[value] = signal.decoder(value).rsplit("/", 1)[0]
            except (KeyError, IndexError):
                continue
        states[".".join(hierarchy[1:])] = decoded
    text = _drop_zero_width_wires(_ZERO_MEMORY_INIT.sub("", text))
    text = _TEMPORARY.sub(r"\\_$", text)
    return text, dict(sorted(states.items()))


def _drop_zero_width_wires(text: str) -> str:
    """``text`` without the declarations of zero-width wires that nothing else in their module
    names (any other use keeps the declaration)."""
    modules = re.split(r"(?=^module )", text, flags=re.M)
    for i, module in enumerate(modules):
        for found in reversed(list(_ZERO_WIDTH_WIRE.finditer(module))):
            rest = module[: found.start()] + module[found.end() :]
            if not re.search(re.escape(found.group(1)) + r"(?![\w$])", rest):
                module = rest
        modules[i] = module
    return "".join(modules)


def write_by_content(component: wiring.Component, name: str, directory: Path) -> tuple[Path, str]:
    """Write the Verilog of ``component`` to ``directory/<name>-<digest>.v`` (named by its
    content, so builds of the same design share it); returns the path and the digest."""
    text = convert(component, name)[0]
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    path = directory / f"{name}-{digest}.v"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path, digest

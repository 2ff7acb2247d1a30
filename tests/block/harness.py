"""Build one Amaranth component as a Verilator model for a cocotb block test."""

from __future__ import annotations

from amaranth.lib import wiring

from hdl_gen.emit import write_by_content
from sim.verilate.build import BUILD_ROOT, BuildSpec, BuiltModel, build


def port_names(component: wiring.Component) -> list[str]:
    """Top-level Verilog port names Amaranth gives the component's signature members."""
    names = ["clk", "rst"]
    for path, _flow, _value in component.signature.flatten(component):
        names.append("__".join(str(part) for part in path))
    return names


def build_block(component: wiring.Component, name: str) -> BuiltModel:
    """Generate Verilog (named by content) and build it with only the ports public."""
    path, digest = write_by_content(component, name, BUILD_ROOT / "gen")
    public = tuple(
        f'public_flat_rw -module "{name}" -var "{port}"' for port in port_names(component)
    )
    return build(BuildSpec(name, digest, (path,), name, public))

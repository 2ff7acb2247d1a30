"""The accelerator's top ports are written once (hdl_gen/top_ports.py: Accelerator and SimTop
take their signatures from it). The copies written by hand - the testbench top, the drivers'
port names and the C++ bench main - are parsed here and must agree with it, names and widths."""

import re
from pathlib import Path

from amaranth.hdl import Shape
from amaranth.lib.wiring import In

from arch import isa
from arch.config import PRESETS
from hdl_gen.accelerator import Accelerator
from hdl_gen.sim_top import TOP_NAME, SimTop
from hdl_gen.top_ports import INSIDE_TESTBENCH, TOP_PORTS
from sim.backends import harness
from sim.backends.accelerator import TB_TOP_V, accelerator_spec

ROOT = Path(__file__).resolve().parents[3]
BENCH_MAIN = ROOT / "sim" / "csrc" / "bench_main.cpp"
# Each driver's way of naming a port of the testbench top (cocotb handles, pyverilator's block).
DRIVERS = {
    ROOT / "sim" / "backends" / "cocotb_job.py": (r"\bdut\.(\w+)",),
    ROOT / "sim" / "backends" / "pyverilator.py": (r'\bdut\["(\w+)"\]', r"\.io\.(\w+)"),
}
CLOCK_AND_RESET = {"clk": ("input", 1), "rst": ("input", 1)}
WAVE_GATE = {"wave_on": ("output", 1)}  # tb_top's own output (waveform builds only)


def expected_ports() -> dict[str, tuple[str, int]]:
    """Name -> (direction, width) of every port of the generated top, from its signature."""
    top = SimTop(PRESETS["tiny"])
    ports = dict(CLOCK_AND_RESET)
    for name, member in top.signature.members.items():
        direction = "input" if member.flow == In else "output"
        ports[name] = (direction, Shape.cast(member.shape).width)
    return ports


def parameters(text: str) -> dict[str, int]:
    """tb_top's parameters: the defaults in its header, as the accelerator's build sets them."""
    values = {name: int(value) for name, value in re.findall(r"parameter (\w+) = (\d+)", text)}
    for arg in accelerator_spec(PRESETS["tiny"], waves="fst").extra_args:
        if arg.startswith("-G"):
            name, value = arg[2:].split("=")
            values[name] = int(value)
    return values


def width(bounds: str, params: dict[str, int]) -> int:
    """The width of a ``[msb:0]`` range (``[31:0]``, ``[NAME-1:0]``), 1 without one ("")."""
    if not bounds:
        return 1
    found = re.fullmatch(r"\[\s*(?:(\d+)|(\w+)\s*-\s*1)\s*:\s*0\s*\]", bounds)
    assert found, f"cannot read the range {bounds!r}"
    return int(found[1]) + 1 if found[1] else params[found[2]]


def tb_top_ports(text: str) -> dict[str, tuple[str, int]]:
    """Name -> (direction, width) of the ports in tb_top's module header."""
    params = parameters(text)
    header = text[text.index("module tb_top") : text.index(");")]
    declared = re.findall(r"\b(input|output)\s+wire\s*(\[[^\]]*\])?\s*(\w+)", header)
    return {name: (direction, width(bounds, params)) for direction, bounds, name in declared}


def tb_top_inside(text: str) -> dict[str, tuple[str, int]]:
    """The generated top's outputs that tb_top keeps as wires: name -> ("output", width)."""
    params = parameters(text)
    wires = re.findall(r"^\s*wire\s*(\[[^\]]*\])?\s*(\w+);", text, flags=re.M)
    return {name: ("output", width(bounds, params)) for bounds, name in wires}


def dut_connections(text: str) -> dict[str, str]:
    """Port -> expression of tb_top's instance of the generated top."""
    instance = re.search(rf"\b{TOP_NAME} dut \((.*?)\);", text, flags=re.S)
    assert instance, f"no `{TOP_NAME} dut (...)` in tb_top.v"
    return dict(re.findall(r"\.(\w+)\((\w+)\)", instance[1]))


def disagreements(text: str) -> list[str]:
    """What tb_top.v (its text) gets wrong about the generated top's ports."""
    ports = expected_ports()
    problems = []
    inside = {name: ports[name] for name in INSIDE_TESTBENCH}
    outside = {name: port for name, port in ports.items() if name not in inside}
    if tb_top_ports(text) != {**outside, **WAVE_GATE}:
        problems.append(f"ports {tb_top_ports(text)} != {outside} + {WAVE_GATE}")
    wires = tb_top_inside(text)
    if any(wires.get(name) != port for name, port in inside.items()):
        problems.append(f"wires {wires} lack {inside}")
    connections = dut_connections(text)
    if set(connections) != set(ports):
        problems.append(f"dut connects {sorted(connections)}, the top has {sorted(ports)}")
    for name, (direction, _) in ports.items():
        # Every input but the clock reaches the design through a register (see tb_top.v).
        registered = direction == "input" and name != "clk"
        want = f"{name}_q" if registered else name
        if connections.get(name) != want:
            problems.append(f".{name}({connections.get(name)}) should be .{name}({want})")
        if registered and not re.search(rf"^\s*{name}_q <= {name};", text, flags=re.M):
            problems.append(f"{name}_q is not registered from {name}")
    return problems


def test_the_accelerator_and_the_simulation_top_share_the_port_table():
    accel = Accelerator(PRESETS["tiny"]).signature.members
    top = SimTop(PRESETS["tiny"]).signature.members
    assert list(top) == list(TOP_PORTS)
    assert [name for name in accel if name in TOP_PORTS] == list(TOP_PORTS)
    assert all(accel[name] == member == top[name] for name, member in TOP_PORTS.items())
    launch = [name for name, member in TOP_PORTS.items() if name in isa.Launch.FIELDS]
    assert tuple(launch) == isa.Launch.FIELDS


def test_tb_top_agrees_with_the_port_table():
    assert disagreements(TB_TOP_V.read_text()) == []


def test_a_tb_top_out_of_step_is_caught():
    text = TB_TOP_V.read_text()
    # A launch register left out of the header, a wrong width, a port not registered.
    dropped = re.sub(r"^\s*input\s+wire \[31:0\]\s+desc_count,\n", "", text, flags=re.M)
    narrowed = text.replace(
        "output wire [31:0]                error_index", "output wire [15:0] error_index"
    )
    unregistered = text.replace(".desc_base(desc_base_q)", ".desc_base(desc_base)")
    for doctored in (dropped, narrowed, unregistered):
        assert doctored != text
        assert disagreements(doctored)


def test_the_drivers_name_the_testbench_ports():
    ports = expected_ports()
    inputs = [name for name, (direction, _) in ports.items() if direction == "input"]
    outputs = [name for name in ports if name not in inputs and name not in INSIDE_TESTBENCH]
    assert harness.LAUNCH_PORTS == isa.Launch.FIELDS
    assert tuple(inputs) == harness.TOP_INPUTS
    assert tuple(outputs) == harness.TOP_OUTPUTS
    for path, patterns in DRIVERS.items():
        text = path.read_text()
        used = {name for pattern in patterns for name in re.findall(pattern, text)}
        assert used and used <= set(ports) - set(INSIDE_TESTBENCH), path


def test_the_bench_main_sets_and_reads_the_testbench_ports():
    text = BENCH_MAIN.read_text()
    ports = tb_top_ports(TB_TOP_V.read_text())
    used = set(re.findall(r"\btop->(\w+)", text)) - {"eval", "final"}
    assert used <= set(ports)
    for field in isa.Launch.FIELDS:
        assert re.search(rf"top->{field} = args\.{field};", text), field
    # The PERF port is read as 32-bit words, highest first.
    words = re.search(r"for \(int w = (\d+); w >= 0; --w\)", text)
    assert words and (int(words[1]) + 1) * 32 == ports["perf"][1]

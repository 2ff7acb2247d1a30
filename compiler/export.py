"""The back end's last step: a compiled plan as an :class:`arch.executable.Executable`.

The accelerator layers become one device program (its DRAM image, launch registers, layer table
and the DRAM place of every tensor it reads or writes); a host layer (a final Softmax) becomes a
host step after it; the quantized graph becomes the reference the run is checked against.
"""

from __future__ import annotations

from typing import Any

from arch.config import AccelConfig
from arch.executable import (
    DeviceProgram,
    DramTensor,
    Executable,
    HostStep,
    LayerEntry,
    ReferenceGraph,
    RefNode,
    Region,
    TensorSpec,
)
from arch.executable.format import TILING_KEYS
from arch.isa import Launch
from compiler.errors import CompileError
from compiler.ir import Graph, Node
from compiler.plan import Plan

REASON_MAX = 1000  # characters of a host step's reason kept in the executable


def reference_graph(graph: Graph) -> ReferenceGraph:
    """The quantized graph as plain data."""
    return ReferenceGraph(
        nodes=[
            RefNode(n.name, n.op, list(n.inputs), n.output, dict(n.attrs), dict(n.params))
            for n in graph.nodes
        ],
        tensors={
            name: TensorSpec(name, t.shape, t.scale, t.zero_point)
            for name, t in graph.tensors.items()
        },
        inputs=list(graph.inputs),
        outputs=list(graph.outputs),
    )


def _dram_tensor(plan: Plan, name: str) -> DramTensor:
    placed = plan.tensor(name)  # a flatten output shares its input's bytes
    im2col: dict[str, Any] = {}
    if placed.layout == "im2col":
        node = next(layer.node for layer in plan.layers if name in layer.inputs)
        im2col = {k: tuple(node.attrs[k]) for k in ("kernel", "stride", "pads")}
        im2col["pad_value"] = plan.graph.tensors[name].zero_point  # real 0 pads the rows
    return DramTensor(
        name,
        placed.addr,
        placed.h,
        placed.w,
        placed.channels,
        placed.logical_channels,
        placed.layout,
        **im2col,
        pixel_bytes=placed.pixel_bytes if placed.pixel_stride != placed.channels else 0,
    )


def device_program(plan: Plan, name: str = "device0") -> DeviceProgram:
    """The plan's accelerator layers as one device program."""
    if plan.image is None or plan.program is None:
        raise CompileError(None, None, "the plan has not been emitted")
    accel = plan.accel_layers()
    produced = {layer.output for layer in plan.layers if layer.target == "accel"}
    consumed_on_host = {t for layer in plan.layers if layer.target == "host" for t in layer.inputs}
    graph = plan.graph
    inputs = [t for t in graph.inputs if t in plan.tensors]
    outputs = [t for t in produced if t in consumed_on_host or t in graph.outputs]
    names = dict.fromkeys([*inputs, *(layer.output for layer in accel), *sorted(outputs)])
    return DeviceProgram(
        name=name,
        image=plan.image,
        launch=Launch.from_dict({k: plan.launch[k] for k in Launch.FIELDS}),
        regions=[Region(n, addr, size) for n, addr, size in plan.regions],
        perf_base=plan.symbols["perf"],
        layers=[
            LayerEntry(
                layer.name,
                layer.node.op,
                layer.kind,
                layer.macs,
                layer.output,
                layer.insn_range,
                layer.perf_index,
                {k: getattr(layer.tiling, k) for k in TILING_KEYS} if layer.tiling else None,
            )
            for layer in accel
        ],
        tensors={t: _dram_tensor(plan, t) for t in names},
        inputs=inputs,
        outputs=sorted(outputs),
        instructions=len(plan.program.insns),
    )


def host_step(nodes: list[Node], reasons: dict[str, str]) -> HostStep:
    """One step for the host nodes between two device programs: named by its first node, its
    inputs those its nodes read from before it, its reason each node's (once)."""
    produced = {node.output for node in nodes}
    inputs = list(dict.fromkeys(n for node in nodes for n in node.inputs if n not in produced))
    reason = "; ".join(dict.fromkeys(reasons[n.name] for n in nodes if reasons.get(n.name)))
    op = nodes[0].op if len(nodes) == 1 else "host"
    return HostStep(nodes[0].name, op, inputs, [n.output for n in nodes], reason[:REASON_MAX])


def assemble(model: str, graph: Graph, steps: list[Plan | Node], config: AccelConfig) -> Executable:
    """The executable of a partitioned graph: each emitted plan a device program, the host
    nodes between two of them one host step, in order; ``graph`` (the whole quantized graph)
    is the reference."""
    out: list[DeviceProgram | HostStep] = []
    hosts: list[Node] = []
    for step in [*steps, None]:
        if not isinstance(step, Plan) and step is not None:
            hosts.append(step)
            continue
        if hosts:
            out.append(host_step(hosts, graph.host_reasons))
            hosts = []
        if step is not None:
            programs = len([s for s in out if isinstance(s, DeviceProgram)])
            out.append(device_program(step, f"device{programs}"))
    return Executable(model, config, out, reference_graph(graph))


def to_executable(plan: Plan, model: str) -> Executable:
    """The executable of one emitted plan: its device program, then its host layers in order."""
    hosts = [layer.node for layer in plan.layers if layer.target == "host"]
    return assemble(model, plan.graph, [plan, *hosts], plan.config)

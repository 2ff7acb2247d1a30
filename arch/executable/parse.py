"""Parsing the manifest's steps and reference graph into :mod:`arch.executable.format`
objects, each field checked as it is read (:mod:`arch.executable.reader`)."""

from __future__ import annotations

import math
from typing import Any

from arch import isa
from arch.config import AccelConfig
from arch.executable.container import TENSOR_MAX_ELEMENTS
from arch.executable.format import (
    HOST_OPS,
    LAYER_KINDS,
    LAYOUTS,
    TILING_KEYS,
    DeviceProgram,
    DramTensor,
    HostStep,
    LayerEntry,
    ReferenceGraph,
    RefNode,
    Region,
    TensorSpec,
)
from arch.executable.program_checks import check_program_image
from arch.executable.reader import (
    Reader,
    get_field,
    is_int,
    read_int,
    read_ints,
    read_names,
    read_path_name,
    read_text,
    short,
)
from arch.isa import IsaError, Launch
from arch.reference import REFERENCE_OPS, ReferenceError, check_graph


def parse_reference(reader: Reader, data: Any) -> ReferenceGraph:
    what = "reference"
    tensors = {
        name: _ref_tensor(reader, name, entry)
        for name, entry in get_field(reader, data, "tensors", dict, what).items()
    }
    inputs = read_names(reader, get_field(reader, data, "inputs", list, what), "reference inputs")
    for tensor in inputs:
        if tensor not in tensors:
            reader.fail(f"reference input {short(tensor)} is not in the tensor table")
    known = set(inputs)
    nodes = [
        _ref_node(reader, i, entry, tensors, known)
        for i, entry in enumerate(get_field(reader, data, "nodes", list, what))
    ]
    outputs = read_names(
        reader, get_field(reader, data, "outputs", list, what), "reference outputs"
    )
    for tensor in outputs:
        if tensor not in known:
            reader.fail(f"reference output {short(tensor)} is produced by no node")
    graph = ReferenceGraph(nodes, tensors, inputs, outputs)
    if len(inputs) != 1:
        reader.fail(f"the reference graph must have one input, not {short(inputs)}")
    if tensors[inputs[0]].scale is None:
        reader.fail(f"reference input {short(inputs[0])} has no scale (the host quantizes it)")
    try:
        check_graph(graph)
    except ReferenceError as exc:
        reader.fail(f"reference {exc}")
    return graph


def _ref_tensor(reader: Reader, name: str, entry: Any) -> TensorSpec:
    """A tensor of the reference graph: its shape, scale (None: fp32) and zero point."""
    where = f"reference tensor {short(name)}"
    shape = get_field(reader, entry, "shape", list, where)
    if not 1 <= len(shape) <= 8:  # device tensors are (1, C, H, W) or (1, F); host ones any
        reader.fail(f"{where}: shape {short(shape)} must have 1 to 8 dimensions")
    dims = read_ints(reader, shape, len(shape), f"{where} shape", 1, TENSOR_MAX_ELEMENTS)
    if (len(dims) in (2, 4) and dims[0] != 1) or math.prod(dims) > TENSOR_MAX_ELEMENTS:
        reader.fail(
            f"{where}: shape {dims} must have batch 1 and at most {TENSOR_MAX_ELEMENTS} elements"
        )
    if "scale" not in entry:
        reader.fail(f"{where}: field 'scale' is missing (a number, or null for fp32)")
    scale = entry["scale"]
    if scale is not None and (
        not isinstance(scale, float | int)
        or isinstance(scale, bool)
        or not math.isfinite(scale)
        or not scale > 0
    ):
        reader.fail(f"{where}: scale must be a positive number or null, not {short(scale)}")
    zero_point = entry.get("zero_point", 0)  # absent: symmetric
    if (
        not isinstance(zero_point, int)
        or isinstance(zero_point, bool)
        or not -128 <= zero_point <= 127
    ):
        reader.fail(f"{where}: zero_point must be an integer in -128..127, not {short(zero_point)}")
    return TensorSpec(name, dims, scale, zero_point)


def _ref_node(
    reader: Reader, i: int, entry: Any, tensors: dict[str, TensorSpec], known: set[str]
) -> RefNode:
    """Node ``i`` of the reference graph, its inputs among the tensors ``known`` (produced
    before it); adds its output to ``known``."""
    where = f"reference node {i}"
    name = read_text(reader, entry, "name", where)
    where = f"reference node {i} ({short(name)})"
    op = get_field(reader, entry, "op", str, where)
    if op not in REFERENCE_OPS:
        reader.fail(f"{where}: op {short(op)} is not one of {', '.join(REFERENCE_OPS)}")
    node_inputs = read_names(
        reader, get_field(reader, entry, "inputs", list, where), f"{where} inputs"
    )
    output = get_field(reader, entry, "output", str, where)
    for tensor in (*node_inputs, output):
        if tensor not in tensors:
            reader.fail(f"{where}: tensor {short(tensor)} is not in the tensor table")
    missing = [t for t in node_inputs if t not in known]
    if missing:
        reader.fail(f"{where}: input {short(missing[0])} is not produced before it")
    if output in known:
        reader.fail(f"{where}: output {short(output)} is already an input or node output")
    known.add(output)
    attrs = {
        key: tuple(value) if isinstance(value, list) else value
        for key, value in get_field(reader, entry, "attrs", dict, where).items()
    }
    params = {
        key: reader.array(member, f"{where} param {short(key)}")
        for key, member in get_field(reader, entry, "params", dict, where).items()
    }
    return RefNode(name, op, node_inputs, output, attrs, params)


def parse_device(reader: Reader, data: dict, index: int, config: AccelConfig) -> DeviceProgram:
    where = f"step {index}"
    name = read_path_name(reader, data, "name", where)
    image = reader.array(
        get_field(reader, data, "image", str, where),
        f"{where} image",
        ("uint8",),
        config.dram_bytes,
        "the config's DRAM",
    )
    if image.ndim != 1:
        reader.fail(f"{where} image is {image.shape} bytes; it must be 1-D")
    try:
        launch = Launch.from_dict(get_field(reader, data, "launch", dict, where))
    except IsaError as exc:
        reader.fail(f"{where}: {exc}")
    instructions = read_int(reader, data, "instructions", where, 1, 1 << 32)
    perf_base = read_int(reader, data, "perf_base", where, 0, config.dram_bytes)
    if launch.insn_base + instructions * isa.INSN_BYTES > image.size:
        reader.fail(f"{where}: {instructions} instructions at {launch.insn_base} overrun the image")
    if launch.desc_base + launch.desc_count * isa.DESC_BYTES > image.size:
        reader.fail(
            f"{where}: {launch.desc_count} descriptors at {launch.desc_base} overrun the image"
        )
    regions = _regions(reader, data, where, config)
    memory = _Memory(reader, where, max([image.size, *(r.addr + r.nbytes for r in regions)]))
    tensors = {}
    for tname, t in get_field(reader, data, "tensors", dict, where).items():
        tensors[tname] = _dram_tensor(reader, f"{where} tensor {short(tname)}", tname, t, config)
        memory.inside(tensors[tname].addr, tensors[tname].nbytes, f"tensor {short(tname)}")
    layers = [
        _layer(reader, f"{where} layer {i}", i, entry, (instructions, perf_base), tensors, memory)
        for i, entry in enumerate(get_field(reader, data, "layers", list, where))
    ]
    inputs = read_names(reader, get_field(reader, data, "inputs", list, where), f"{where} inputs")
    outputs = read_names(
        reader, get_field(reader, data, "outputs", list, where), f"{where} outputs"
    )
    for tname in (*inputs, *outputs):
        if tname not in tensors:
            reader.fail(f"{where}: tensor {short(tname)} has no place in DRAM")
    program = DeviceProgram(
        name, image, launch, regions, perf_base, layers, tensors, inputs, outputs, instructions
    )
    check_program_image(reader, where, program)
    return program


class _Memory:
    """A device program's memory: its image and regions, ``[0, end)``."""

    def __init__(self, reader: Reader, where: str, end: int) -> None:
        self.reader, self.where, self.end = reader, where, end

    def inside(self, addr: int, nbytes: int, what: str) -> None:
        if addr < 0 or addr + nbytes > self.end:
            self.reader.fail(
                f"{self.where}: {what} spans [{addr}, {addr + nbytes}), outside the program's "
                f"memory (0..{self.end}: its image and regions)"
            )


def _regions(reader: Reader, data: dict, where: str, config: AccelConfig) -> list[Region]:
    regions = []
    for entry in get_field(reader, data, "regions", list, where):
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)):
            reader.fail(f"{where}: a region must be [name, addr, bytes], not {short(entry)}")
        addr, nbytes = read_ints(reader, entry[1:], 2, f"{where} region {short(entry[0])}", None)
        if addr < 0 or nbytes < 0 or addr + nbytes > config.dram_bytes:
            reader.fail(
                f"{where}: region {short(entry[0])} spans [{addr}, {addr + nbytes}), outside the "
                f"config's DRAM (0..{config.dram_bytes})"
            )
        regions.append(Region(entry[0], addr, nbytes))
    return regions


def _dram_tensor(reader: Reader, what: str, tname: str, t: Any, config: AccelConfig) -> DramTensor:
    layout = get_field(reader, t, "layout", str, what)
    if layout not in LAYOUTS:
        reader.fail(f"{what}: layout {short(layout)} is not one of {', '.join(LAYOUTS)}")
    addr = read_int(reader, t, "addr", what, None)
    h, w, channels, logical = (
        read_int(reader, t, k, what, 1, config.dram_bytes)
        for k in ("h", "w", "channels", "logical_channels")
    )
    im2col = layout == "im2col"
    tensor = DramTensor(
        tname,
        addr,
        h,
        w,
        channels,
        logical_channels=logical,
        layout=layout,
        kernel=read_ints(reader, t.get("kernel"), 2, f"{what} kernel", 1) if im2col else None,
        stride=read_ints(reader, t.get("stride"), 2, f"{what} stride", 1) if im2col else None,
        pads=read_ints(reader, t.get("pads"), 4, f"{what} pads") if im2col else None,
        pixel_bytes=read_int(reader, t, "pixel_bytes", what, 0, config.dram_bytes)
        if "pixel_bytes" in t
        else 0,
        pad_value=read_int(reader, t, "pad_value", what, -128, 127) if "pad_value" in t else 0,
    )
    if tensor.pixel_bytes and (im2col or tensor.pixel_bytes < channels):
        reader.fail(
            f"{what}: pixel_bytes {tensor.pixel_bytes} must be 0 or >= channels "
            f"({channels}), and 0 for an im2col tensor"
        )
    return tensor


def _layer(
    reader: Reader,
    what: str,
    i: int,
    entry: Any,
    program: tuple[int, int],
    tensors: dict[str, DramTensor],
    memory: _Memory,
) -> LayerEntry:
    """Layer ``i`` of a device program of ``program`` = (instructions, perf_base)."""
    instructions, perf_base = program
    insn_range = get_field(reader, entry, "insn_range", list, what)
    start, end = read_ints(reader, insn_range, 2, f"{what} insn_range", None)
    if not 0 <= start <= end <= instructions:
        reader.fail(f"{what}: instructions [{start}, {end}) outside 0..{instructions}")
    perf_index = read_int(reader, entry, "perf_index", what, None)
    record = isa.PERF_RECORD.nbytes
    memory.inside(perf_base + perf_index * record, record, f"PERF record of layer {i}")
    if perf_index != i:
        reader.fail(f"{what}: PERF record {perf_index}; layer i writes record i")
    output = get_field(reader, entry, "output", str, what)
    if output not in tensors:
        reader.fail(f"{what}: output {short(output)} has no place in DRAM")
    kind = get_field(reader, entry, "kind", str, what)
    if kind not in LAYER_KINDS:
        reader.fail(f"{what}: kind {short(kind)} is not one of {', '.join(LAYER_KINDS)}")
    tiling = entry.get("tiling")
    if tiling is not None and not (
        isinstance(tiling, dict)
        and sorted(tiling) == sorted(TILING_KEYS)
        and all(is_int(v) and 0 <= v < 1 << 62 for v in tiling.values())
    ):
        reader.fail(
            f"{what}: tiling must be null or an object of exactly {', '.join(TILING_KEYS)} "
            f"(integers >= 0), not {short(tiling)}"
        )
    name = read_text(reader, entry, "name", what)
    op = get_field(reader, entry, "op", str, what)
    macs = read_int(reader, entry, "macs", what)
    return LayerEntry(name, op, kind, macs, output, (start, end), perf_index, tiling)


def parse_host(reader: Reader, data: dict, index: int) -> HostStep:
    where = f"step {index}"
    op = get_field(reader, data, "op", str, where)
    if op not in HOST_OPS:
        reader.fail(f"{where}: host op {short(op)} is not one of {', '.join(HOST_OPS)}")
    return HostStep(
        read_text(reader, data, "name", where),
        op,
        read_names(reader, get_field(reader, data, "inputs", list, where), f"{where} inputs"),
        read_names(reader, get_field(reader, data, "outputs", list, where), f"{where} outputs"),
        read_text(reader, data, "reason", where) if data.get("reason") else "",
    )

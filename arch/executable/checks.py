"""Consistency checks of a parsed executable: its steps against the reference graph, each
DRAM tensor against its graph tensor, and each host node's ONNX model."""

from __future__ import annotations

import math

from arch import host_runtime
from arch.executable.format import (
    HOST_OPS,
    DeviceProgram,
    DramTensor,
    Executable,
    HostStep,
    ReferenceGraph,
    TensorSpec,
)
from arch.executable.reader import Reader, short
from arch.host_runtime import HostModelError

#: Reference ops whose output is a view of their inputs' bytes (no layer writes it), or of
#: bytes the image holds (constant).
VIEW_OPS = (
    "constant",
    "flatten",
    "concat",
    "split_heads",
    "split_heads_t",
    "merge_heads",
    "map_to_tokens",
    "tokens_to_map",
    "select_token",
)


def check_steps(reader: Reader, exe: Executable) -> None:
    """The steps against the reference graph: every tensor a step reads or writes is in it and
    produced before; each DRAM tensor holds its graph tensor; each device layer writes the
    output of a node of its op; each host step is the nodes of its outputs."""
    ref = exe.reference
    if not exe.programs:
        reader.fail("the executable has no device program")
    available = set(ref.inputs)
    for index, step in enumerate(exe.steps):
        where = f"step {index} ({short(step.name)})"
        names = [*step.inputs, *step.outputs]
        if isinstance(step, DeviceProgram):
            names += [*step.tensors, *(layer.output for layer in step.layers)]
        for tensor in names:
            if tensor not in ref.tensors:
                reader.fail(f"{where}: tensor {short(tensor)} is not in the graph")
        for tensor in step.inputs:
            if tensor not in available:
                reader.fail(f"{where}: input {short(tensor)} is produced by no step before it")
        for tensor in step.outputs:
            if tensor in available:
                reader.fail(f"{where}: output {short(tensor)} is already produced before it")
        if isinstance(step, HostStep):
            _check_host(reader, where, step, ref)
        else:
            _check_program(reader, where, step, ref)
        available.update(step.outputs)
    for tensor in ref.outputs:
        if tensor not in available:
            reader.fail(f"graph output {short(tensor)} is produced by no step")


def _check_host(reader: Reader, where: str, step: HostStep, ref: ReferenceGraph) -> None:
    """A host step is the reference nodes of its outputs, in order: of its op (``host`` for
    several), reading what steps before it or its earlier nodes produce - its ``inputs``, in
    the order its nodes first read them."""
    nodes = [ref.producer(name) for name in step.outputs]
    op = nodes[0].op if len(nodes) == 1 and nodes[0] is not None else "host"
    produced: set[str] = set()
    reads: list[str] = []
    for node in nodes:
        if node is None or node.op not in HOST_OPS:
            break
        reads += [n for n in node.inputs if n not in produced and n not in reads]
        produced.add(node.output)
    else:
        if step.outputs and step.op == op and reads == step.inputs:
            return
    reader.fail(
        f"{where}: a host step must be the reference nodes of its outputs (host ops, in order), "
        "with their op and the inputs they read from before it"
    )


def check_host_models(reader: Reader, ref: ReferenceGraph) -> None:
    """onnxruntime loads every host node's model, whose inputs are the node's feeds and whose
    outputs include its fetch."""
    for node in ref.nodes:
        if node.op != "host":
            continue
        where = f"reference node {short(node.name)} (host)"
        try:
            session = host_runtime.session(node.params["model"].tobytes())
        except HostModelError as exc:
            reader.fail(f"{where}: its ONNX model: {exc}")
        inputs = sorted(i.name for i in session.get_inputs())
        outputs = [o.name for o in session.get_outputs()]
        if inputs != sorted(node.attrs["feeds"]) or node.attrs["fetch"] not in outputs:
            reader.fail(
                f"{where}: its ONNX model takes {short(inputs)} and gives {short(outputs)}; "
                f"the node feeds {short(list(node.attrs['feeds']))} and fetches "
                f"{short(node.attrs['fetch'])}"
            )


def _check_program(reader: Reader, where: str, program: DeviceProgram, ref: ReferenceGraph) -> None:
    written = [layer.output for layer in program.layers]
    for i, layer in enumerate(program.layers):
        node = ref.producer(layer.output)
        if node is None or node.op != layer.op:
            reader.fail(
                f"{where} layer {i}: op {short(layer.op)} writing {short(layer.output)}; the "
                f"reference node writing it is {'none' if node is None else repr(node.op)}"
            )
        if layer.output in written[:i]:
            reader.fail(f"{where} layer {i}: output {short(layer.output)} is written twice")

    def written_here(tensor: str) -> bool:
        """Written by a layer, or a view (flatten, concat) of tensors that are."""
        if tensor in written or tensor in program.inputs:
            return True
        node = ref.producer(tensor)
        return node is not None and node.op in VIEW_OPS and all(map(written_here, node.inputs))

    for tensor in program.outputs:
        if not written_here(tensor):
            reader.fail(f"{where}: output {short(tensor)} is written by none of its layers")
    for name, t in program.tensors.items():
        _check_dram_tensor(reader, f"{where} tensor {short(name)}", t, ref.tensors[name])
        if t.layout == "im2col" and (name not in program.inputs or name in written):
            reader.fail(f"{where} tensor {short(name)}: only an input the host writes is im2col")


def _check_dram_tensor(reader: Reader, what: str, t: DramTensor, spec: TensorSpec) -> None:
    """``t`` holds the graph's ``spec``: as (1, C, H, W) pixels of C channels, (1, F) as
    h x w pixels of F / (h w) channels, im2col rows of the conv over (1, C, H, W), or tokens
    (1, T, 1, F) as T pixels of F."""
    shape = spec.shape
    if spec.scale is None:
        reader.fail(f"{what}: its graph tensor has no scale; a tensor in DRAM is int8")
    if t.logical_channels > t.channels:
        reader.fail(f"{what}: logical_channels {t.logical_channels} > channels {t.channels}")
    if t.layout == "im2col":
        assert t.kernel is not None and t.stride is not None and t.pads is not None
        (kh, kw), (sy, sx), (top, left, bottom, right) = t.kernel, t.stride, t.pads
        if len(shape) != 4:
            reader.fail(f"{what}: an im2col tensor holds a (1, C, H, W) tensor, not {shape}")
        out = ((shape[2] + top + bottom - kh) // sy + 1, (shape[3] + left + right - kw) // sx + 1)
        if (t.h, t.w) != out or t.logical_channels != shape[1]:
            reader.fail(
                f"{what}: im2col of {shape} by a {kh}x{kw} kernel, stride {t.stride}, pads "
                f"{t.pads} is {out[0]}x{out[1]} rows of {shape[1]} channels, not {t.h}x{t.w} of "
                f"{t.logical_channels}"
            )
        if t.channels < kh * kw * t.logical_channels:
            reader.fail(f"{what}: {t.channels} channels hold no {kh}x{kw}x{shape[1]} rows")
        return
    if t.layout == "tokens_t":
        if (
            len(shape) != 4
            or shape[2] != 1
            or t.w != 1
            or shape[3] % t.h
            or t.logical_channels != shape[1]
        ):
            reader.fail(f"{what}: tokens_t {t.h}x{t.w} of {t.logical_channels}; graph {shape}")
        if t.channels % (shape[3] // t.h) or t.channels // (shape[3] // t.h) < shape[1]:
            reader.fail(
                f"{what}: {t.channels} channels hold no {shape[3] // t.h} heads of {shape[1]}"
            )
        return
    if t.layout != "heads" and t.h * t.w * t.logical_channels != math.prod(shape):
        reader.fail(
            f"{what}: {t.h}x{t.w} pixels of {t.logical_channels} channels do not hold its graph "
            f"tensor {shape}"
        )
    if t.layout == "heads":
        if len(shape) != 4 or (t.h, t.w, t.logical_channels) != (shape[2], 1, shape[3]):
            reader.fail(f"{what}: heads {t.h}x{t.w} of {t.logical_channels}; graph {shape}")
        if t.channels % shape[1] or t.channels // shape[1] < shape[3]:
            reader.fail(f"{what}: {t.channels} channels hold no {shape[1]} heads of {shape[3]}")
        return
    if t.layout == "tokens":
        if (
            len(shape) != 4
            or shape[2] != 1
            or (t.h, t.w, t.logical_channels)
            != (
                shape[1],
                1,
                shape[3],
            )
        ):
            reader.fail(f"{what}: tokens {t.h}x{t.w} of {t.logical_channels}; graph {shape}")
        return
    if len(shape) == 4 and (t.logical_channels, t.h, t.w) != shape[1:]:
        reader.fail(
            f"{what}: {t.h}x{t.w} pixels of {t.logical_channels} channels; its graph tensor is "
            f"{shape}"
        )

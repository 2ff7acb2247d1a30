"""emit: encode the program and descriptor table and build the DRAM image (weights, PARAM
lines and the constants' codes)."""

from __future__ import annotations

import numpy as np

from arch import isa
from arch.asm import Program
from compiler.constants import param_lines, weight_bytes
from compiler.errors import Unplaceable
from compiler.passes.steps import param_symbol, weight_symbol
from compiler.plan import Layer, Op, Plan, TensorPlacement


def _descriptor(plan: Plan, op: Op) -> dict:
    spec = op.desc
    assert spec is not None
    base = plan.symbols[spec.symbol] + spec.offset
    return isa.descriptor(
        spec.mem,
        spec.local_base,
        base,
        spec.loops,
        y0=spec.y0,
        x0=spec.x0,
        height=spec.height,
        width=spec.width,
        pad_value=spec.pad_value,
    )


def constant_pixels(plan: Plan, layer: Layer) -> np.ndarray:
    """A constant's codes as DRAM pixels: (pixels, channels padded to lines) bytes, token t
    (tokens) or pixel (y, x) (nhwc) a row of its channels; heads (1, H, M, N): row m holds
    each head's N, padded per head."""
    q = layer.node.params["value"]  # (1, C, H, W); tokens (1, T, 1, F); heads (1, H, M, N)
    placed = plan.tensor(layer.output)
    if placed.layout == "heads":
        _, heads, m, n = q.shape
        padded = np.zeros((m, heads, placed.channels // heads), np.int8)
        padded[:, :, :n] = q[0].transpose(1, 0, 2)
        return padded.reshape(m, placed.channels).view(np.uint8)
    rows = q[0, :, 0, :] if placed.layout == "tokens" else q[0].reshape(q.shape[1], -1).T
    out = np.zeros((rows.shape[0], placed.channels), np.int8)
    out[:, : rows.shape[1]] = rows
    return out.view(np.uint8)


def pixel_addresses(placed: TensorPlacement, channels: int) -> np.ndarray:
    """The DRAM address of each byte of each pixel of a placed tensor (views resolved)."""
    starts = placed.addr + np.arange(placed.h * placed.w) * placed.pixel_stride
    return starts[:, None] + np.arange(channels)[None, :]


def run(plan: Plan) -> Plan:
    program = Program()
    for layer in plan.accel_layers():
        start = len(program.insns)
        for op in layer.ops:
            fields = dict(op.fields)
            if op.desc is not None:
                program.descs.append(_descriptor(plan, op))
                fields["desc"] = len(program.descs) - 1
            if op.dram is not None:
                fields["dram_addr"] = plan.symbols[op.dram[0]] + op.dram[1]
            try:
                program.insns.append(isa.make(op.opcode, op.deps, **fields))
            except isa.IsaError as exc:
                raise Unplaceable(
                    layer.name, layer.node.op, f"cannot encode {op.opcode.name.lower()}: {exc}"
                ) from None
        layer.insn_range = (start, len(program.insns))
        plan.notes[start] = layer.name
    program.insns.append(isa.make("end"))
    plan.program = program

    image = np.zeros(plan.launch["image_bytes"], dtype=np.uint8)

    def place(symbol: str, blob: np.ndarray) -> None:
        addr = plan.symbols[symbol]
        image[addr : addr + blob.size] = blob

    place("program", np.frombuffer(program.insn_bytes(), dtype=np.uint8))
    place("descriptors", np.frombuffer(program.desc_bytes(), dtype=np.uint8))
    for layer in plan.accel_layers():
        if layer.kind == "gemm":
            place(weight_symbol(layer), weight_bytes(layer, plan.dim))
        place(param_symbol(layer), param_lines(plan, layer))
    for layer in plan.layers:
        if layer.kind == "constant":
            pixels = constant_pixels(plan, layer)
            image[pixel_addresses(plan.tensor(layer.output), pixels.shape[1])] = pixels
    plan.image = image
    plan.launch.update(
        insn_base=plan.symbols["program"],
        desc_base=plan.symbols["descriptors"],
        desc_count=len(program.descs),
    )
    return plan

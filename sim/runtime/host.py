"""The host side of a run: quantize the input, write tensors into a device program's DRAM in the
layout its first layer wants, read tensors back as NCHW arrays, and run the host steps."""

from __future__ import annotations

import dataclasses

import numpy as np

from arch import host_runtime
from arch.executable import DeviceProgram, DramTensor, HostStep, ReferenceGraph
from arch.reference import evaluate_node
from sim import knobs


def _im2col(q: np.ndarray, tensor: DramTensor) -> np.ndarray:
    """(C, H, W) int8 -> (OH*OW, kh*kw*C) rows in (ky, kx, c) order, padded with the
    tensor's ``pad_value`` (its zero point: real 0)."""
    assert tensor.kernel and tensor.stride and tensor.pads  # checked when loaded
    c = q.shape[0]
    (kh, kw), stride, pads = tensor.kernel, tensor.stride, tensor.pads
    spec = ((0, 0), (pads[0], pads[2]), (pads[1], pads[3]))
    padded = np.pad(q, spec, constant_values=np.int8(tensor.pad_value))
    oh, ow = tensor.h, tensor.w
    rows = np.empty((oh, ow, kh, kw, c), dtype=np.int8)
    for ky in range(kh):
        for kx in range(kw):
            window = padded[
                :, ky : ky + stride[0] * oh : stride[0], kx : kx + stride[1] * ow : stride[1]
            ]
            rows[:, :, ky, kx, :] = window.transpose(1, 2, 0)
    return rows.reshape(oh * ow, kh * kw * c)


def tensor_bytes(tensor: DramTensor, q: np.ndarray) -> np.ndarray:
    """An int8 tensor ((1,C,H,W), (1,F) or tokens (1,T,1,F)) laid out as ``tensor`` says: its
    bytes, one row of ``channels`` per pixel."""
    if tensor.layout == "tokens_t":  # the bytes of its (1, H, F/H, T) heads
        _, t, _, f = q.shape
        heads = f // tensor.h
        return tensor_bytes(
            _as_heads(tensor), q.reshape(1, t, heads, tensor.h).transpose(0, 2, 3, 1)
        )
    if tensor.layout == "heads":  # (1, H, M, N): row m holds each head's N, padded per head
        _, heads, m, n = q.shape
        rows = np.zeros((m, heads, tensor.channels // heads), dtype=np.int8)
        rows[:, :, :n] = q[0].transpose(1, 0, 2)
        return rows.reshape(m, tensor.channels).view(np.uint8)
    if tensor.layout == "tokens":  # (1, T, 1, F): token t is pixel t
        q = q.reshape(q.shape[1], q.shape[3]).T[:, :, None]
    else:
        q = q.reshape(q.shape[1], 1, 1) if q.ndim == 2 else q[0]
    rows = _im2col(q, tensor) if tensor.layout == "im2col" else q.transpose(1, 2, 0)
    rows = rows.reshape(tensor.h * tensor.w, -1)
    out = np.zeros((tensor.h * tensor.w, tensor.channels), dtype=np.int8)
    out[:, : rows.shape[1]] = rows
    return out.view(np.uint8)


def device_image(program: DeviceProgram, values: dict[str, np.ndarray]) -> np.ndarray:
    """The program's DRAM image with its input tensors in place, up to the end of its map."""
    image = np.zeros(program.dram_end, dtype=np.uint8)
    image[: program.image.size] = program.image
    for name in program.inputs:
        tensor = program.tensors[name]
        image[pixel_addresses(tensor)] = tensor_bytes(tensor, values[name])
    return image


def _as_heads(tensor: DramTensor) -> DramTensor:
    """A tokens_t tensor seen as the heads (1, H, F/H, T) whose bytes it has."""
    return dataclasses.replace(tensor, layout="heads")


def pixel_addresses(tensor: DramTensor) -> np.ndarray:
    """DRAM addresses of the tensor's bytes, one row of ``channels`` per pixel."""
    starts = tensor.addr + np.arange(tensor.h * tensor.w) * tensor.pixel_stride
    return starts[:, None] + np.arange(tensor.channels)[None, :]


def tensor_addresses(tensor: DramTensor, shape: tuple[int, ...]) -> np.ndarray:
    """The DRAM byte address of every element, in the graph's logical shape."""
    pixels = pixel_addresses(tensor).reshape(tensor.h, tensor.w, tensor.channels)
    if tensor.layout == "tokens_t":  # element (t, h*d_h + d) is head h's (d, t)
        _, t, _, f = shape
        heads = f // tensor.h
        by_head = tensor_addresses(_as_heads(tensor), (1, heads, tensor.h, t))
        return by_head.transpose(0, 3, 1, 2).reshape(shape)
    if tensor.layout == "tokens":
        return pixels[:, :, : tensor.logical_channels].reshape(shape)
    if tensor.layout == "heads":
        _, heads, m, n = shape
        rows = pixels.reshape(m, heads, tensor.channels // heads)[:, :, :n]
        return rows.transpose(1, 0, 2)[None]
    if len(shape) == 4:
        return pixels[:, :, : shape[1]].transpose(2, 0, 1)[None]
    # (1, F): flatten in NCHW order
    c = tensor.logical_channels
    return pixels[:, :, :c].transpose(2, 0, 1).reshape(1, -1)


def read_tensor(tensor: DramTensor, dram: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A tensor from DRAM, in the graph's logical shape ((1,C,H,W) or (1,F), tokens, heads)."""
    return dram[tensor_addresses(tensor, shape)].view(np.int8)


def run_host_step(step: HostStep, values: dict[str, np.ndarray], graph: ReferenceGraph) -> None:
    """Run ``step``: the reference nodes producing its outputs, in order, on the run's values
    of their inputs (:func:`arch.reference.evaluate_node`); each output joins ``values``."""
    for output in step.outputs:
        node = graph.producer(output)
        assert node is not None  # checked when the executable was loaded
        values[output] = evaluate_node(graph, node, [values[name] for name in node.inputs])


def apply_time_bound() -> None:
    """Bound every later onnxruntime run (host steps, the reference's host nodes, calibration)
    to ``COSIM_HOST_STEP_SECONDS`` (:class:`~sim.knobs.KnobError` for a value that is not a
    number of seconds)."""
    host_runtime.set_time_bound(knobs.HOST_STEP_SECONDS.seconds())

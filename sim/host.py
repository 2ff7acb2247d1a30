"""The host side of a run: write the quantized input in the layout the first layer wants, and
read tensors back from DRAM as NCHW arrays."""

from __future__ import annotations

import numpy as np

from arch.reference import quantize_input
from compiler.plan import DramTensor, Plan


def _im2col(
    q: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int], pads, out_hw
) -> np.ndarray:
    """(C, H, W) int8 -> (OH*OW, kh*kw*C) rows in (ky, kx, c) order, zero padded."""
    c, h, w = q.shape
    kh, kw = kernel
    padded = np.pad(q, ((0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh, ow = out_hw
    rows = np.empty((oh, ow, kh, kw, c), dtype=np.int8)
    for ky in range(kh):
        for kx in range(kw):
            window = padded[
                :, ky : ky + stride[0] * oh : stride[0], kx : kx + stride[1] * ow : stride[1]
            ]
            rows[:, :, ky, kx, :] = window.transpose(1, 2, 0)
    return rows.reshape(oh * ow, kh * kw * c)


def input_bytes(plan: Plan, x: np.ndarray) -> tuple[DramTensor, np.ndarray]:
    """Quantize the fp32 network input and lay it out as the first layer reads it."""
    name = plan.graph.inputs[0]
    tensor = plan.tensors[name]
    q = quantize_input(x, tensor.scale)
    q = q.reshape(q.shape[1], 1, 1) if q.ndim == 2 else q[0]
    if tensor.layout == "im2col":
        node = next(layer.node for layer in plan.layers if name in layer.inputs)
        rows = _im2col(
            q, node.attrs["kernel"], node.attrs["stride"], node.attrs["pads"], (tensor.h, tensor.w)
        )
    else:
        rows = q.transpose(1, 2, 0).reshape(tensor.h * tensor.w, -1)
    out = np.zeros((tensor.h * tensor.w, tensor.channels), dtype=np.int8)
    out[:, : rows.shape[1]] = rows
    return tensor, out.reshape(-1).view(np.uint8)


def read_tensor(plan: Plan, dram: np.ndarray, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A tensor from DRAM, in the graph's logical shape ((1,C,H,W) or (1,F))."""
    tensor = plan.tensor(name)
    raw = dram[tensor.addr : tensor.addr + tensor.nbytes].view(np.int8)
    pixels = raw.reshape(tensor.h, tensor.w, tensor.channels)
    if len(shape) == 4:
        c = shape[1]
        return pixels[:, :, :c].transpose(2, 0, 1)[None].copy()
    # (1, F): flatten in NCHW order
    c = tensor.logical_channels
    return pixels[:, :, :c].transpose(2, 0, 1).reshape(1, -1).copy()

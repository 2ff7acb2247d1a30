"""The window of a 2-D conv or pool: kernel, stride, explicit pads, dilation."""

from __future__ import annotations

import onnx

from ..errors import CompileError
from .read import (
    attrs_of,
)
from .state import ImportState


def conv_window(
    st: ImportState, node: onnx.NodeProto, name: str, x: tuple[int, ...], kernel: tuple[int, ...]
) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int, int, int], tuple[int, int]]:
    """Kernel, stride, explicit pads and dilation of a 2-D window op."""
    op, attrs = node.op_type, attrs_of(node)
    if len(kernel) != 2:
        raise CompileError(name, op, f"{len(kernel)}-D kernel is not supported", "2-D")
    if "kernel_shape" in attrs and tuple(attrs["kernel_shape"]) != tuple(kernel):
        raise CompileError(
            name,
            op,
            f"kernel_shape {attrs['kernel_shape']} does not match the weight {tuple(kernel)}",
        )
    k = (int(kernel[0]), int(kernel[1]))
    strides = tuple(attrs.get("strides", (1, 1)))
    dilations = tuple(attrs.get("dilations", (1, 1)))
    if len(strides) != 2 or min(strides) < 1:
        raise CompileError(name, op, f"strides {strides} are not supported", "2 positive ints")
    if len(dilations) != 2 or min(dilations) < 1:
        raise CompileError(name, op, f"dilations {dilations} are not supported", "2 ints >= 1")
    d = (int(dilations[0]), int(dilations[1]))
    s = (int(strides[0]), int(strides[1]))
    span = (d[0] * (k[0] - 1) + 1, d[1] * (k[1] - 1) + 1)  # the kernel's reach
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad == "NOTSET":
        pads = tuple(int(p) for p in attrs.get("pads", (0, 0, 0, 0)))
        if len(pads) != 4 or min(pads) < 0:
            raise CompileError(name, op, f"pads {pads} are not supported", "4 ints >= 0")
    elif auto_pad == "VALID":
        pads = (0, 0, 0, 0)
    elif auto_pad == "SAME_UPPER":
        total = [max(0, (-(-x[2 + a] // s[a]) - 1) * s[a] + span[a] - x[2 + a]) for a in range(2)]
        pads = (
            total[0] // 2,
            total[1] // 2,
            total[0] - total[0] // 2,
            total[1] - total[1] // 2,
        )
    else:
        raise CompileError(
            name, op, f"auto_pad {auto_pad} is not supported", "NOTSET, VALID, SAME_UPPER"
        )
    if attrs.get("ceil_mode", 0):
        pads = ceil_pads(st, node, name, x, k, s, pads)
    return k, s, (pads[0], pads[1], pads[2], pads[3]), d


def pool_window(
    st: ImportState, node: onnx.NodeProto, name: str, x: tuple[int, ...], kernel: tuple[int, ...]
) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int, int, int]]:
    """Kernel, stride and explicit (top, left, bottom, right) pads of a 2-D window op
    (a pool's; :meth:`_conv_window` also gives a convolution's dilation)."""
    k, s, pads, d = conv_window(st, node, name, x, kernel)
    if d != (1, 1):
        raise CompileError(name, node.op_type, f"dilation {d} is not supported", "1")
    return k, s, pads


def ceil_pads(
    st: ImportState,
    node: onnx.NodeProto,
    name: str,
    x: tuple[int, ...],
    k: tuple[int, int],
    s: tuple[int, int],
    pads: tuple[int, ...],
) -> tuple[int, ...]:
    """ceil_mode=1 as extra bottom/right padding, where that is exact: a MaxPool's padding
    never wins (it pads with -infinity; the array with the smallest int8, which no window
    of at least one real value can lose to). onnxruntime divides an AveragePool's edge
    windows by their size clipped to the padded input, not by the kernel size as the
    array's one rescale does, so those go to the host."""
    size = [x[2 + a] + pads[a] + pads[a + 2] for a in range(2)]
    floor = [(size[a] - k[a]) // s[a] + 1 for a in range(2)]
    ceil = [-(-(size[a] - k[a]) // s[a]) + 1 for a in range(2)]
    if floor == ceil:  # both give the same windows: ceil_mode changes nothing
        return pads
    if node.op_type != "MaxPool":
        raise CompileError(
            name,
            node.op_type,
            f"ceil_mode=1 gives {ceil[0]}x{ceil[1]} outputs, not {floor[0]}x{floor[1]}, and "
            "its edge windows are averaged over fewer values than the kernel's",
            "ceil_mode=0, or ceil_mode=1 where it gives the same shape",
        )
    for a in range(2):  # the last window must start inside the input or its top/left pad
        if (ceil[a] - 1) * s[a] >= x[2 + a] + pads[a]:
            raise CompileError(
                name, node.op_type, f"ceil_mode=1 gives a window of padding only (axis {a})"
            )
    extra = [(ceil[a] - 1) * s[a] + k[a] - size[a] for a in range(2)]
    return (pads[0], pads[1], pads[2] + extra[0], pads[3] + extra[1])

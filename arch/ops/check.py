"""The checks an op's output-shape rule runs on one node: every failure names the node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

from arch.isa import INT32_MAX, INT32_MIN, MAX_SHIFT, TABLE_ENTRIES
from arch.ops.quant import zero_point
from arch.ops.spec import ReferenceError, RefGraph, RefNode

__all__ = ["MAX_ELEMENTS", "NodeCheck", "short"]

#: The most elements a tensor the reference evaluates may have, a padded input included
#: (ResNet-50 at 224x224: 3.2 M at most).
MAX_ELEMENTS = 1 << 26


def short(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class NodeCheck:
    """Checks of one node; every failure names the node."""

    def __init__(self, graph: RefGraph, node: RefNode) -> None:
        self.graph, self.node = graph, node

    def fail(self, message: str) -> NoReturn:
        raise ReferenceError(f"node {short(self.node.name)} ({self.node.op}): {message}")

    def ints(self, key: str, count: int, minimum: int) -> tuple[int, ...]:
        value = self.node.attrs[key]
        if (
            not isinstance(value, tuple)
            or len(value) != count
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            or min(value) < minimum
        ):
            self.fail(f"attr {key!r} must be {count} integers >= {minimum}, not {short(value)}")
        return value

    def positive(self, key: str) -> int:
        """Attr ``key``, an integer >= 1."""
        value = self.node.attrs[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            self.fail(f"attr {key!r} must be an integer >= 1, not {short(value)}")
        return value

    def shape(self, name: str, ndim: int, what: str) -> tuple[int, ...]:
        shape = tuple(self.graph.tensors[name].shape)
        if len(shape) != ndim:
            form = "(1, C, H, W)" if ndim == 4 else "(1, F)"
            self.fail(f"{what} {short(name)} must be {form}, not {shape}")
        return shape

    def param_shapes(self, shapes: Mapping[str, tuple[int, ...]]) -> None:
        for key, shape in shapes.items():
            if self.node.params[key].shape != shape:
                self.fail(
                    f"param {key!r} has shape {self.node.params[key].shape}; expected {shape}"
                )

    def rescale(self, mult: str, shift: str) -> None:
        m, s = self.node.params[mult], self.node.params[shift]
        if m.size and (int(m.min()) < INT32_MIN or int(m.max()) > INT32_MAX):
            self.fail(f"param {mult!r} must be in the int32 range")
        if s.size and (int(s.min()) < 0 or int(s.max()) > MAX_SHIFT):
            self.fail(f"param {shift!r} must be in 0..{MAX_SHIFT}")

    def clamp(self) -> None:
        """The STORE post-processing params: clamp bounds, and the table of a table act."""
        lo, hi = (int(v) for v in self.node.params["clamp"])
        if not -128 <= lo <= hi <= 127:
            self.fail(f"clamp [{lo}, {hi}] must satisfy -128 <= lo <= hi <= 127")
        if self.node.attrs["act"] == "table":
            self.param_shapes({"table": (TABLE_ENTRIES,)})

    def rescaled(self) -> None:
        """One per-tensor rescale (``mult``, ``shift``) and the STORE's post-processing."""
        self.param_shapes({"mult": (1,), "shift": (1,), "clamp": (2,)})
        self.rescale("mult", "shift")
        self.clamp()

    def same_quantization(self) -> bool:
        """Whether the output has the first input's scale and zero point."""
        x, y = self.node.inputs[0], self.node.output
        t = self.graph.tensors
        return (t[x].scale, zero_point(self.graph, x)) == (t[y].scale, zero_point(self.graph, y))

    def window(
        self, x: tuple[int, ...], kernel: tuple[int, ...], dilation: tuple[int, ...]
    ) -> tuple[int, int]:
        """Output height and width of a window op over ``x`` (floor mode)."""
        stride, pads = self.ints("stride", 2, 1), self.ints("pads", 4, 0)
        eh, ew = (dilation[i] * (kernel[i] - 1) + 1 for i in (0, 1))
        oh = (x[2] + pads[0] + pads[2] - eh) // stride[0] + 1
        ow = (x[3] + pads[1] + pads[3] - ew) // stride[1] + 1
        padded = x[1] * (x[2] + pads[0] + pads[2]) * (x[3] + pads[1] + pads[3])
        if padded > MAX_ELEMENTS:
            self.fail(f"the padded input has {padded} elements, more than {MAX_ELEMENTS}")
        if oh < 1 or ow < 1:
            self.fail(f"kernel {kernel[0]}x{kernel[1]} does not fit the padded input")
        return oh, ow

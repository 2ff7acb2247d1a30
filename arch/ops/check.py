"""The checks an op's output-shape rule runs on one node: every failure names the node."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from arch.isa import INT32_MAX, INT32_MIN, MAX_SHIFT, TABLE_ENTRIES
from arch.ops.spec import ReferenceError, RefGraph, RefNode

__all__ = ["MAX_ELEMENTS", "NodeCheck", "short", "window_output"]

#: The most elements a tensor the reference evaluates may have, a padded input included
#: (ResNet-50 at 224x224: 3.2 M at most).
MAX_ELEMENTS = 1 << 26


def short(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def window_output(
    hw: tuple[int, ...],
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    pads: tuple[int, ...],
    dilation: tuple[int, ...] = (1, 1),
) -> tuple[int, int]:
    """Output height and width of a convolution or pool window over an ``hw`` input (ONNX
    floor mode, ``pads`` = top, left, bottom, right); ValueError if the window does not fit."""
    eh, ew = (dilation[i] * (kernel[i] - 1) + 1 for i in (0, 1))
    oh = (hw[0] + pads[0] + pads[2] - eh) // stride[0] + 1
    ow = (hw[1] + pads[1] + pads[3] - ew) // stride[1] + 1
    if oh < 1 or ow < 1:
        raise ValueError(
            f"kernel {kernel[0]}x{kernel[1]} does not fit the padded input "
            f"{hw[0] + pads[0] + pads[2]}x{hw[1] + pads[1] + pads[3]}"
        )
    return oh, ow


def _reference_error(node: RefNode, message: str) -> Exception:
    return ReferenceError(f"node {short(node.name)} ({node.op}): {message}")


class NodeCheck:
    """Checks of one node; every failure names the node, as a :class:`ReferenceError` or as
    the error ``error(node, message)`` gives (the compiler's verifier raises its own)."""

    def __init__(
        self,
        graph: RefGraph,
        node: RefNode,
        error: Callable[[RefNode, str], Exception] = _reference_error,
    ) -> None:
        self.graph, self.node, self._error = graph, node, error

    def fail(self, message: str) -> NoReturn:
        raise self._error(self.node, message)

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
        """The shape of tensor ``name``: ``ndim`` axes, a batch of 1."""
        shape = tuple(self.graph.tensors[name].shape)
        if len(shape) != ndim or shape[0] != 1:
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

    def rescaled(self, xs: object = None) -> None:
        """One per-tensor rescale (``mult``, ``shift``) and the STORE's post-processing (an op's
        whole ``check_quantized`` when that is all it has)."""
        self.param_shapes({"mult": (1,), "shift": (1,), "clamp": (2,)})
        self.rescale("mult", "shift")
        self.clamp()

    def window(
        self, x: tuple[int, ...], kernel: tuple[int, ...], dilation: tuple[int, ...]
    ) -> tuple[int, int]:
        """Output height and width of a window op over ``x`` (floor mode)."""
        stride, pads = self.ints("stride", 2, 1), self.ints("pads", 4, 0)
        padded = x[1] * (x[2] + pads[0] + pads[2]) * (x[3] + pads[1] + pads[3])
        if padded > MAX_ELEMENTS:
            self.fail(f"the padded input has {padded} elements, more than {MAX_ELEMENTS}")
        try:
            return window_output((x[2], x[3]), kernel, stride, pads, dilation)
        except ValueError as exc:
            self.fail(str(exc))

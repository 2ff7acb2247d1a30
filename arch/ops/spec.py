"""What an IR op is, written once: :class:`OpSpec` and the graph protocols its functions read.

An op's spec sits beside its evaluator in its family's module (:mod:`arch.ops`); everything
else that tells ops apart - :mod:`arch.reference`'s tables, the compiler's verifier, quantizer
and placement (:mod:`compiler.op_rules`) - is derived from the specs or keyed by their names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from arch.ops.check import NodeCheck

__all__ = [
    "ACTS",
    "RESIDUAL_PARAMS",
    "TABLE_PARAMS",
    "OpSpec",
    "QuantizedRule",
    "RefGraph",
    "RefNode",
    "RefTensor",
    "ReferenceError",
    "Shape",
    "attrs_error",
]

Shape = tuple[int, ...]


class ReferenceError(ValueError):
    """The graph or its input cannot be evaluated."""


class RefTensor(Protocol):
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def scale(self) -> float | None: ...


class RefNode(Protocol):
    name: str
    op: str
    inputs: list[str]
    output: str
    attrs: dict[str, Any]
    params: dict[str, np.ndarray]


class RefGraph(Protocol):
    @property
    def nodes(self) -> Sequence[RefNode]: ...
    @property
    def tensors(self) -> Mapping[str, RefTensor]: ...
    @property
    def inputs(self) -> Sequence[str]: ...
    @property
    def outputs(self) -> Sequence[str]: ...
    @property
    def quantized(self) -> bool: ...


#: One node on its input values -> its output value (int8; a softmax's fp32).
Evaluator = Callable[[RefGraph, RefNode, list[np.ndarray]], np.ndarray]
#: The output shape of a node from its input shapes, after checking its attrs and the shape of
#: its weight (the :class:`~arch.ops.check.NodeCheck` fails naming the node). It reads nothing
#: that quantization sets, so the compiler checks fp32 graphs with it too.
ShapeRule = Callable[["NodeCheck", list[Shape]], Shape]
#: The checks of a quantized node beyond its params' dtypes: the shapes and ranges of its int8
#: params (per-channel lengths, multipliers, shifts, clamps) and the scales it must share.
QuantizedRule = Callable[["NodeCheck", list[Shape]], None]
#: The multiply-accumulates one node does (the reference's budget, the compiler's reports).
MacCount = Callable[[RefGraph, RefNode], int]

#: Values of the ``act`` attr.
ACTS: tuple[str | None, ...] = (None, "relu", "relu6", "table")
#: The params a conv or gemm with a residual (second) input reads besides its own.
RESIDUAL_PARAMS: dict[str, str] = {"res_mult": "int64", "res_shift": "int64"}
#: The param a conv, gemm, add or scale whose ``act`` is ``"table"`` reads besides its own: the
#: activation as :data:`arch.isa.TABLE_ENTRIES` int8 outputs, one per saturated int8 code.
TABLE_PARAMS: dict[str, str] = {"table": "int8"}


def _no_macs(graph: RefGraph, node: RefNode) -> int:
    return 0


def _nothing_quantized(check: NodeCheck, xs: list[Shape]) -> None:
    """An op with no int8 params and no scale rule of its own."""


@dataclass(frozen=True)
class OpSpec:
    """One IR op of the quantized graph, as the integer reference defines it.

    Construction checks every field and fails naming the op and the field, so an op with a
    missing or malformed part fails at import, not as a KeyError in a later pass.
    """

    name: str  # the op's name in the IR and in executables
    #: the attrs of its nodes, exactly these (``act``: one of :data:`ACTS`)
    attrs: frozenset[str]
    #: the params it reads, name -> numpy dtype name, exactly these (a residual input adds
    #: :data:`RESIDUAL_PARAMS`, a ``table`` act :data:`TABLE_PARAMS`)
    params: Mapping[str, str]
    arity: tuple[int, int]  # fewest and most inputs (0: a constant)
    #: the output has the scale and zero point of every input: the op moves or selects int8
    #: codes and never rescales (the compiler gives it no scale of its own)
    keeps_scale: bool
    output_shape: ShapeRule  # checks a node's attrs and shapes and gives its output shape
    evaluate: Evaluator  # the node's output, bit for bit what the accelerator must give
    #: checks a quantized node's int8 params and scales (after ``output_shape``)
    check_quantized: QuantizedRule = field(default=_nothing_quantized)
    macs: MacCount = field(default=_no_macs)  # multiply-accumulates of one node
    #: a second input is a residual added before the STORE (it reads :data:`RESIDUAL_PARAMS`)
    residual: bool = False
    #: attrs its nodes may also carry; a node without one means the op's documented default
    optional_attrs: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise TypeError(f"op name must be an identifier, not {self.name!r}")
        for name in ("attrs", "optional_attrs"):
            names = getattr(self, name)
            if not isinstance(names, frozenset) or not all(isinstance(a, str) for a in names):
                self._fail(name, f"must be a frozenset of names, not {names!r}")
        if not isinstance(self.params, Mapping):
            self._fail("params", f"must map names to dtypes, not {self.params!r}")
        for key, dtype in self.params.items():
            try:
                np.dtype(dtype)
            except TypeError:
                self._fail("params", f"{key!r} has no numpy dtype {dtype!r}")
        lo, hi = self.arity if isinstance(self.arity, tuple) and len(self.arity) == 2 else (0, -1)
        if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi):
            self._fail("arity", f"must be (lo, hi) with 0 <= lo <= hi, not {self.arity!r}")
        for flag in ("keeps_scale", "residual"):
            if not isinstance(getattr(self, flag), bool):
                self._fail(flag, f"must be a bool, not {getattr(self, flag)!r}")
        if self.residual and self.arity[1] < 2:
            self._fail("residual", "needs a second input (arity)")
        for name in ("output_shape", "evaluate", "check_quantized", "macs"):
            if not callable(getattr(self, name)):
                self._fail(name, f"must be a function, not {getattr(self, name)!r}")

    def attrs_error(self, attrs: Mapping[str, Any]) -> str | None:
        """What is wrong with a node's ``attrs`` (None: they are this op's)."""
        return attrs_error(attrs, self.attrs, self.optional_attrs)

    def _fail(self, field_name: str, message: str) -> None:
        raise TypeError(f"op {self.name!r}: field {field_name!r} {message}")


def attrs_error(
    attrs: Mapping[str, Any], required: frozenset[str], optional: frozenset[str] = frozenset()
) -> str | None:
    """What is wrong with a node's ``attrs`` given the ones its op requires and those it may
    also carry (None: nothing)."""
    if required <= set(attrs) <= required | optional:
        return None
    also = f" (and optionally {sorted(optional)})" if optional else ""
    return f"attrs {sorted(attrs)!s:.80} must be exactly {sorted(required)}{also}"


def registry(*families: Sequence[OpSpec]) -> dict[str, OpSpec]:
    """The specs of ``families`` by name, in order; TypeError on a name defined twice."""
    specs: dict[str, OpSpec] = {}
    for family in families:
        for spec in family:
            if not isinstance(spec, OpSpec):
                raise TypeError(f"{spec!r} is not an OpSpec")
            if spec.name in specs:
                raise TypeError(f"op {spec.name!r} is defined twice")
            specs[spec.name] = spec
    return specs

"""The import state: every map the op handlers share, as one object, and its rollback.

A handler (:mod:`compiler.onnx.registry`) reads and extends this state; when it refuses its
node, :meth:`ImportState.restore` puts back what :meth:`ImportState.snapshot` took before it
ran. Both walk the dataclass's fields, so a field added later is rolled back too. Records in
the state's containers are values: a handler that changes one puts a changed copy in its place
(:func:`compiler.onnx.read.take_over`, ``dataclasses.replace``).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import CompileError
from ..ir import Node, Tensor
from .onnx_graph import first_free

__all__ = ["HostMark", "ImportState", "Pending", "QConst", "ir_shape", "opset_of"]


@dataclass
class QConst:
    """An integer initializer behind a DequantizeLinear: ``real = q * scale`` (along axis)."""

    q: np.ndarray
    scale: np.ndarray  # float32, size 1 or the length of ``axis``
    axis: int | None  # None: per tensor


@dataclass
class Pending:
    """A ConvInteger/MatMulInteger accumulator waiting for its Cast and scale Mul."""

    node: Node
    x_scale: float
    cast: bool = False


@dataclass
class HostMark:
    """An ONNX node placed on the host, until the regions are formed."""

    index: int
    name: str
    node: onnx.NodeProto
    reason: str


@dataclass
class ImportState:
    """What the handlers share while one ONNX graph is imported (build it with :meth:`of`)."""

    proto: onnx.ModelProto  #: the prepared model (read only)
    forced: Mapping[int, str]  #: ONNX node index -> why it goes to the host whatever its op
    opset: int  #: of the default domain
    consts: dict[str, np.ndarray]  #: ONNX value -> its value known at compile time
    inferred: dict[str, tuple[int, ...]]  #: ONNX value -> its static shape from inference
    elem_types: dict[str, int]  #: ONNX value -> its element type from inference
    uses: Counter[str]  #: ONNX value -> how many nodes (and graph outputs) read it
    qconst: dict[str, QConst] = field(default_factory=dict)
    alias: dict[str, str] = field(default_factory=dict)  #: ONNX value -> IR tensor of its value
    qview: set[str] = field(default_factory=set)  #: ONNX values holding int8 codes of an IR tensor
    qdtype: dict[str, str] = field(default_factory=dict)  #: qview values of uint8 codes: "uint8"
    pending: dict[str, Pending] = field(default_factory=dict)  #: unscaled integer accumulators
    #: ONNX value -> (view op, heads) for a Reshape/Transpose awaiting its partner
    pending_views: dict[str, tuple[str, int]] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    tensors: dict[str, Tensor] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)  #: IR node names given so far
    origins: dict[str, int] = field(default_factory=dict)  #: IR node name -> ONNX node index
    host_reasons: dict[str, str] = field(default_factory=dict)
    marks: list[HostMark] = field(default_factory=list)
    blockers: list[str] = field(default_factory=list)  #: nodes onnxruntime cannot run either
    norm_unit: bool = False  #: the config has the norm unit: LayerNorm may run on the device
    #: ONNX values that are scores plus a causal mask, aliased to the scores (a row_softmax
    #: reads them with ``causal``)
    causal: set[str] = field(default_factory=set)
    #: ONNX values that are scores plus a constant bias, aliased to the scores: the bias
    #: (M or 1, N), the same for every head, a row_softmax reads as its ``bias_mask``
    softmax_bias: dict[str, np.ndarray] = field(default_factory=dict)
    #: ONNX values that are scores plus a mask computed on the host at the input: the mask's
    #: IR tensor, a row_softmax's second input
    host_mask: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls, proto: onnx.ModelProto, forced: Mapping[int, str], norm_unit: bool = False
    ) -> ImportState:
        """The state before the first node of ``proto`` (shapes already inferred)."""
        inferred: dict[str, tuple[int, ...]] = {}
        elem_types: dict[str, int] = {}
        for vi in [*proto.graph.value_info, *proto.graph.output, *proto.graph.input]:
            dims = vi.type.tensor_type.shape.dim
            elem_types[vi.name] = vi.type.tensor_type.elem_type
            if vi.type.tensor_type.HasField("shape") and all(d.dim_value > 0 for d in dims):
                inferred[vi.name] = tuple(int(d.dim_value) for d in dims)
        uses = Counter(v for n in proto.graph.node for v in n.input if v)
        uses.update(o.name for o in proto.graph.output)
        return cls(
            proto=proto,
            forced=forced,
            opset=opset_of(proto),
            consts={t.name: numpy_helper.to_array(t) for t in proto.graph.initializer},
            inferred=inferred,
            elem_types=elem_types,
            uses=uses,
            norm_unit=norm_unit,
        )

    def snapshot(self) -> dict[str, Any]:
        """Every field, its container copied (a dict, list or set; other values are shared).

        That is the whole state because handlers replace records (a :class:`Tensor`,
        :class:`Node` or :class:`Pending` in these containers) rather than change them in
        place, and never write into arrays or protos."""
        return {f.name: _copy(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Put back every field of ``snapshot`` (which must not be used again)."""
        for name, value in snapshot.items():
            setattr(self, name, value)

    def unique(self, name: str) -> str:
        """``name``, or ``name_k`` with the first k that no earlier IR node has; reserved."""
        return first_free(name, self.names)


def _copy(value: Any) -> Any:
    """A copy of a container field (``Counter`` included); any other value as it is."""
    return value.copy() if isinstance(value, dict | list | set) else value


def opset_of(proto: onnx.ModelProto) -> int:
    """The model's opset of the default domain."""
    for entry in proto.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    raise CompileError(None, "model", "imports no ai.onnx opset")


def ir_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The IR's shape of an ONNX activation: (1, C, L) (Conv1d's) is held as (1, C, 1, L)."""
    return (shape[0], shape[1], 1, shape[2]) if len(shape) == 3 else tuple(shape)

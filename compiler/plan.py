"""The back end's plan: what the partition, layout, tile, schedule, allocate and emit passes
decide, filled in one pass at a time, with a verifier run between passes.

Every accelerator layer is one of three kinds:

- ``gemm``: a convolution read as a GEMM through DMA im2col (conv, and FC layers, which are
  convolutions over a 1x1 image, or with a kernel covering the whole image after a flatten);
  a depthwise conv (``GemmShape.depthwise``) instead runs DWCONV on the window unit, its input
  rows loaded whole (halo and padding included) and its taps in passes of at most 3x3;
- ``pool``: max / sum pooling (maxpool, avgpool, global_avgpool);
- ``add``: a standalone residual add.

Flatten, Concat and channel slices run no instructions (:data:`VIEW_KINDS`): a flatten output
is its input's bytes, the inputs of a concat along channels are written straight into channel
slices of its buffer, and a channel slice (of whole lines) is read in place - views with an
``offset`` and a ``pixel_bytes`` stride, so they cost no copy.

Tensors live in DRAM channels-last (NHWC) with channels padded to whole lines of ``dim``
channels, except the network input of a first convolution with few channels, which the host
writes already im2col'ed (one row of ``kh*kw*C`` values, padded, per output pixel).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from arch import isa
from arch.asm import Program
from arch.config import AccelConfig
from arch.executable.format import LayerKind
from arch.isa import DW_KERNEL_MAX
from compiler.errors import VerifyError
from compiler.ir import Graph, Node
from compiler.op_rules import VIEW_KINDS, ViewKind


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    return ceil_div(a, b) * b


@dataclass
class TensorPlacement:
    """Where and how an int8 activation tensor sits in DRAM: ``h`` x ``w`` pixels of ``channels``
    (padded) values, its layout, and (a view) the tensor whose bytes it shares. The executable
    records it as :class:`arch.executable.DramTensor` (:mod:`compiler.export`)."""

    name: str
    h: int
    w: int
    channels: int  # padded to a multiple of dim
    logical_channels: int
    scale: float
    layout: str = "nhwc"  # or "im2col" (network input only)
    #: a view of another tensor's bytes: a flatten output (all of them), or a concat input
    #: (its channel lines, ``offset`` bytes into each pixel of the concat)
    alias_of: str | None = None
    offset: int = 0
    pixel_bytes: int = 0  # bytes from one pixel to the next; 0: ``channels``
    addr: int = -1

    @property
    def pixel_stride(self) -> int:
        return self.pixel_bytes or self.channels

    @property
    def nbytes(self) -> int:
        """Bytes from the first to one past the last byte of the tensor."""
        return (self.h * self.w - 1) * self.pixel_stride + self.channels


@dataclass
class GemmShape:
    """A conv-like layer as a GEMM over im2col rows."""

    in_h: int
    in_w: int
    in_channels: int  # padded
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, left, bottom, right
    out_h: int
    out_w: int
    out_channels: int  # padded
    #: depthwise: channel c of the output reduces only channel c of the input (DWCONV)
    depthwise: bool = False
    dilation: tuple[int, int] = (1, 1)  # tap (ky, kx) reads pixel offset (ky*dy, kx*dx)
    #: batch_matmul: the output rows are this many blocks, block g reading block g of the
    #: second input's positions (its keys' rows, or its values' rows: ``arch.ops.attention``)
    groups: int = 1

    def chunks(self, dim: int) -> int:
        """K chunks of ``dim`` reduction values (a depthwise layer: its taps)."""
        taps = self.kernel[0] * self.kernel[1]
        return taps if self.depthwise else taps * self.in_channels // dim

    def dw_passes(self) -> list[tuple[int, int, int, int]]:
        """The DWCONV passes of a depthwise layer: ``(i0, kh, j0, kw)``, a window of at most
        DW_KERNEL_MAX x DW_KERNEL_MAX taps at kernel tap (i0, j0), accumulating into ACC. A
        dilated kernel is one 1x1 pass per tap (the tap's offset in the input tile)."""
        kh, kw = self.kernel
        if self.dilation != (1, 1):
            return [(i, 1, j, 1) for i in range(kh) for j in range(kw)]
        most = DW_KERNEL_MAX
        return [
            (i0, min(most, kh - i0), j0, min(most, kw - j0))
            for i0 in range(0, kh, most)
            for j0 in range(0, kw, most)
        ]

    def dw_input(self, rows: int) -> tuple[int, int]:
        """Input rows and columns (padding included) ``rows`` output rows of a depthwise layer
        read: the ACT tile, ``pitch`` = its columns."""
        (kh, kw), (dy, dx), s = self.kernel, self.dilation, self.stride[0]
        return (rows - 1) * s + (kh - 1) * dy + 1, (self.out_w - 1) * s + (kw - 1) * dx + 1


@dataclass
class Tiling:
    rows_per_tile: int  # output rows per m tile (m_tile = rows_per_tile * out_w)
    n_blocks: int  # output channel blocks per n group
    k_group: int  # K chunks per GEMM instruction (pool: channel blocks per step)
    estimate: int = 0  # estimated cycles
    #: 1: each step loads its channel blocks' input tiles once and runs CONVs on them (a
    #: k group is whole channel blocks x all kernel taps); 0: GEMMs on im2col lines
    input_reuse: int = 0


@dataclass
class DescSpec:
    """A descriptor whose DRAM base is symbolic until allocate: ``(symbol, offset)``."""

    mem: isa.Mem
    local_base: int
    symbol: str
    offset: int
    loops: list[tuple[int, ...]]
    y0: int = 0
    x0: int = 0
    height: int = 0
    width: int = 0
    pad_value: int = 0


@dataclass
class Op:
    """One instruction of the schedule; ``desc`` and ``dram`` are resolved by emit."""

    opcode: isa.Opcode
    deps: tuple[isa.Token, ...] = ()
    fields: dict[str, Any] = field(default_factory=dict)
    desc: DescSpec | None = None
    dram: tuple[str, int] | None = None  # PERF record address
    layer: int = -1


#: What a layer is: a device layer kind, a view (no instructions) or a host layer.
PlanKind = LayerKind | ViewKind | Literal["host"]


@dataclass
class Layer:
    """One node of the graph, placed on the accelerator or the host."""

    index: int
    node: Node
    target: str  # "accel" or "host"
    kind: PlanKind
    inputs: list[str]
    output: str
    macs: int = 0
    gemm: GemmShape | None = None
    tiling: Tiling | None = None
    # (O_pad, K) int8 weight matrix, K in chunk order; depthwise: (C_pad, taps) in pass order
    weights: np.ndarray | None = None
    weight_blocks: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    # schedule: (first n block, n blocks, first k chunk, k chunks, byte offset) per weight block
    #: the weight matrix's K chunk of each chunk in weight_blocks' order (None: the same order)
    chunk_order: list[int] | None = None
    ops: list[Op] = field(default_factory=list)
    #: this layer's first loads issued at the end of the layer before it (among its ops):
    #: compiler.passes.prefetch
    prefetched: list[Op] = field(default_factory=list)
    insn_range: tuple[int, int] = (0, 0)
    perf_index: int = -1

    @property
    def name(self) -> str:
        return self.node.name


@dataclass
class Plan:
    config: AccelConfig
    graph: Graph
    layers: list[Layer] = field(default_factory=list)
    tensors: dict[str, TensorPlacement] = field(default_factory=dict)
    symbols: dict[str, int] = field(default_factory=dict)  # allocate: symbol -> DRAM address
    regions: list[tuple[str, int, int]] = field(default_factory=list)  # (name, addr, bytes)
    program: Program | None = None
    image: np.ndarray | None = None  # the DRAM image (constants + program)
    launch: dict[str, int] = field(default_factory=dict)
    notes: dict[int, str] = field(default_factory=dict)  # instruction index -> layer name

    @property
    def dim(self) -> int:
        return self.config.rows

    def accel_layers(self) -> list[Layer]:
        return [
            layer
            for layer in self.layers
            if layer.target == "accel" and layer.kind not in VIEW_KINDS
        ]

    def out_channels(self, layer: Layer) -> tuple[int, int]:
        """(padded to lines, logical) output channels the layer computes: its output tensor's,
        or the features F of a (1, T, 1, F) stored transposed (tokens_t)."""
        out = self.tensors[layer.output]
        if out.layout == "tokens_t":
            f = self.graph.tensors[layer.output].shape[3]
            return round_up(f, self.dim), f
        return out.channels, out.logical_channels

    def tensor(self, name: str) -> TensorPlacement:
        """Where ``name``'s bytes are: a view resolved to the tensor that owns them (its name
        is the DRAM symbol; ``offset`` and ``pixel_bytes`` say where the view sits in it)."""
        tensor = self.tensors[name]
        if tensor.alias_of is None:
            return tensor
        base = self.tensor(tensor.alias_of)
        return replace(
            tensor,
            name=base.name,
            alias_of=None,
            offset=base.offset + tensor.offset,
            pixel_bytes=base.pixel_stride,
            addr=base.addr + tensor.offset if base.addr >= 0 else -1,
        )

    def verify(self, stage: str) -> None:
        """Check the invariants every pass up to ``stage`` promises (a :class:`VerifyError`, a
        compiler bug, if one does not hold)."""
        stages = ["partition", "layout", "tile", "schedule", "allocate", "emit"]
        reached = stages.index(stage)
        for layer in self.layers:
            if layer.target not in ("accel", "host"):
                raise VerifyError(layer.name, layer.node.op, f"bad target {layer.target!r}")
            if reached >= 1 and layer.target == "accel":
                for name in (*layer.inputs, layer.output):
                    if name not in self.tensors:
                        raise VerifyError(
                            layer.name, layer.node.op, f"tensor {name!r} has no layout"
                        )
                    if self.tensor(name).channels % self.dim:
                        raise VerifyError(
                            layer.name, layer.node.op, f"tensor {name!r} not padded to lines"
                        )
            if reached >= 2 and layer in self.accel_layers() and layer.tiling is None:
                raise VerifyError(layer.name, layer.node.op, "no tiling chosen")
            if reached >= 3 and layer in self.accel_layers() and not layer.ops:
                raise VerifyError(layer.name, layer.node.op, "no instructions scheduled")
        if reached >= 4:
            for layer in self.accel_layers():
                for op in layer.ops:
                    for symbol in ([op.desc.symbol] if op.desc else []) + (
                        [op.dram[0]] if op.dram else []
                    ):
                        if symbol not in self.symbols:
                            raise VerifyError(
                                layer.name, layer.node.op, f"symbol {symbol!r} unallocated"
                            )
            spans = sorted((addr, addr + size, name) for name, addr, size in self.regions)
            for (_a0, a1, n0), (b0, _b1, n1) in zip(spans, spans[1:], strict=False):
                if b0 < a1:
                    raise VerifyError(None, None, f"DRAM regions {n0!r} and {n1!r} overlap")
            if spans and spans[-1][1] > self.config.dram_bytes:
                raise VerifyError(
                    None,
                    None,
                    f"the model needs {spans[-1][1] >> 20} MiB of DRAM, config has "
                    f"{self.config.dram_mib} MiB",
                )
        if reached >= 5 and (self.program is None or self.image is None):
            raise VerifyError(None, None, "emit produced no program")

"""What an executable holds: device programs with host steps between them, and the reference.

An :class:`Executable` is the compiler's whole output for one model and one config - the
product's NEFF. Its steps run in order over named tensors:

- a :class:`DeviceProgram` is one accelerator run: a DRAM image (program, descriptor table,
  weights, parameters, and the tensors that hold constants' codes) placed at address 0, the
  launch registers, and where each tensor it reads or writes lives in DRAM
  (:class:`DramTensor`); the host writes its ``inputs`` before the start and reads its
  ``outputs`` after ``done``;
- a :class:`HostStep` runs on the host (ops of :data:`HOST_OPS`) on dequantized tensors: it
  is the reference graph's nodes that produce its outputs, evaluated in order as the reference
  does, so what follows it on the device gets exactly the reference's input. The host nodes
  between two device programs are one step: one read-back, one launch after it.

The :class:`ReferenceGraph` is the quantized graph the integer reference evaluates
(:func:`arch.reference.evaluate`): every layer output of every device program is checked
against it, bit for bit. Everything here is plain data - ints, strings, lists and numpy arrays -
so an executable is saved as JSON plus ``.npy`` arrays (:mod:`arch.executable.archive`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np

from arch.config import AccelConfig
from arch.isa import Launch

#: Ops a host step can run: a final Softmax (fp32 out), or a host region (its ONNX model on
#: onnxruntime, int8 out) - evaluated as the reference graph's node of the same output.
HOST_OPS: tuple[str, ...] = ("softmax", "host")
#: Layouts of a tensor in DRAM: channels-last lines of an NCHW tensor (channels = axis 1), rows
#: the host im2col'ed for a first conv, or tokens: a (1, T, 1, F) tensor (a transformer's
#: (1, T, F)) as T pixels of its last axis F, or heads: a (1, H, M, N) tensor as M pixels of H
#: blocks of N channels, each padded to whole lines (channels = H x the padded N), or tokens_t:
#: a (1, T, 1, F) tensor of H = F / h heads stored as the heads of its transpose (1, H, F/H, T)
#: (k for ``q @ k^T``, written by transposing stores).
LAYOUTS: tuple[str, ...] = ("nhwc", "im2col", "tokens", "heads", "tokens_t")
#: Kinds of a device layer (the compiler's schedule has one step builder per kind).
LayerKind = Literal["gemm", "pool", "add", "scale", "upsample", "matmul", "norm"]
LAYER_KINDS: tuple[LayerKind, ...] = get_args(LayerKind)
#: Keys of a layer's tiling (the compiler's ``Tiling``: output rows per m tile, output channel
#: blocks per n group, K chunks per step, estimated cycles, input tiles loaded once: 0 or 1).
TILING_KEYS: tuple[str, ...] = ("rows_per_tile", "n_blocks", "k_group", "estimate", "input_reuse")
#: Names that become parts of file paths (the model's, a device program's): letters, digits and
#: ``_.#:+-``, not starting with a dot, at most :data:`NAME_MAX` characters.
NAME_PATTERN = re.compile(r"(?!\.)[A-Za-z0-9_.#:+-]+")
NAME_MAX = 128


def is_path_name(name: object) -> bool:
    """Whether ``name`` may be part of a file path (:data:`NAME_PATTERN`)."""
    return (
        isinstance(name, str) and len(name) <= NAME_MAX and NAME_PATTERN.fullmatch(name) is not None
    )


def path_name(text: str) -> str:
    """``text`` made a name :func:`is_path_name` accepts: other characters become ``_`` (and a
    leading dot too), cut to :data:`NAME_MAX` characters; an empty text gives ``"model"``."""
    name = re.sub(r"[^A-Za-z0-9_.#:+-]", "_", text)[:NAME_MAX]
    name = "_" + name[1:] if name.startswith(".") else name
    return name or "model"


@dataclass(frozen=True)
class TensorSpec:
    """A tensor of the graph: logical shape (NCHW or (1, F)), int8 scale (None: fp32) and zero
    point (real = scale * (q - zero_point))."""

    name: str
    shape: tuple[int, ...]
    scale: float | None
    zero_point: int = 0


@dataclass
class RefNode:
    """One node of the reference graph (ops and params as :mod:`arch.reference` defines)."""

    name: str
    op: str
    inputs: list[str]
    output: str
    attrs: dict[str, Any] = field(default_factory=dict)
    params: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class ReferenceGraph:
    """The quantized graph: nodes in topological order over named tensors."""

    nodes: list[RefNode]
    tensors: dict[str, TensorSpec]
    inputs: list[str]
    outputs: list[str]

    @property
    def quantized(self) -> bool:
        return True

    def producer(self, tensor: str) -> RefNode | None:
        return next((node for node in self.nodes if node.output == tensor), None)


@dataclass(frozen=True)
class DramTensor:
    """An int8 tensor in a device program's DRAM: ``h`` x ``w`` pixels of ``channels`` values
    (padded to whole lines; ``logical_channels`` of them are the tensor's). ``layout`` "im2col":
    one row of ``kernel[0] * kernel[1] * C`` values per output pixel of the first convolution,
    which the host writes with ``kernel``, ``stride`` and ``pads`` (top, left, bottom, right)."""

    name: str
    addr: int
    h: int
    w: int
    channels: int
    logical_channels: int
    layout: str = "nhwc"
    kernel: tuple[int, ...] | None = None  # (kh, kw)
    stride: tuple[int, ...] | None = None  # (sy, sx)
    pads: tuple[int, ...] | None = None  # (top, left, bottom, right)
    #: bytes from one pixel to the next; 0: ``channels`` (else the tensor is a channel slice of
    #: a wider one, e.g. a concat input)
    pixel_bytes: int = 0
    #: the code of im2col padding: the tensor's zero point (real 0)
    pad_value: int = 0

    @property
    def pixel_stride(self) -> int:
        return self.pixel_bytes or self.channels

    @property
    def nbytes(self) -> int:
        """Bytes from the tensor's first byte to one past its last."""
        return (self.h * self.w - 1) * self.pixel_stride + self.channels


@dataclass(frozen=True)
class LayerEntry:
    """A layer of a device program: its instructions ``[start, end)``, its PERF record (written
    at its end) and the tensor it writes."""

    name: str
    op: str
    kind: str  # one of LAYER_KINDS
    macs: int
    output: str
    insn_range: tuple[int, int]
    perf_index: int
    tiling: dict[str, int] | None = None


@dataclass(frozen=True)
class Region:
    """A named span of the DRAM map."""

    name: str
    addr: int
    nbytes: int


@dataclass
class DeviceProgram:
    """One accelerator run (see the module docstring)."""

    name: str
    image: np.ndarray  # uint8, placed at DRAM address 0
    launch: Launch
    regions: list[Region]
    perf_base: int  # DRAM address of PERF record 0
    layers: list[LayerEntry]
    tensors: dict[str, DramTensor]
    inputs: list[str]
    outputs: list[str]
    instructions: int  # words from launch.insn_base, END included

    @property
    def dram_end(self) -> int:
        """One past the last byte the program uses (image, tensors, records)."""
        return max([self.image.size, *(r.addr + r.nbytes for r in self.regions)])

    def layer_of(self, insn_index: int) -> LayerEntry | None:
        return next(
            (
                layer
                for layer in self.layers
                if layer.insn_range[0] <= insn_index < layer.insn_range[1]
            ),
            None,
        )


@dataclass(frozen=True)
class HostStep:
    """The host's work between two device programs (fp32, on dequantized tensors): the
    reference nodes of its ``outputs``, in order."""

    name: str
    op: str  # one of HOST_OPS: its one node's op, or "host" for several nodes
    inputs: list[str]  # what it reads from before it (not what its own nodes produce)
    outputs: list[str]
    reason: str = ""  # why its nodes are not on the accelerator (for listings and reports)


Step = DeviceProgram | HostStep


@dataclass
class Executable:
    """A compiled model for one accelerator config (see the module docstring)."""

    model: str
    config: AccelConfig
    steps: list[Step]
    reference: ReferenceGraph

    @property
    def programs(self) -> list[DeviceProgram]:
        return [step for step in self.steps if isinstance(step, DeviceProgram)]

    @property
    def input(self) -> TensorSpec:
        """The graph input the user gives (fp32, quantized by the host)."""
        return self.reference.tensors[self.reference.inputs[0]]

    @property
    def layers(self) -> list[LayerEntry]:
        """Every device layer, in execution order."""
        return [layer for program in self.programs for layer in program.layers]

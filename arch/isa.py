"""The instruction set, defined once as data.

Opcodes and other enumerations are Amaranth :class:`~amaranth.lib.enum.Enum` types with a shape;
each instruction format, the DMA descriptor, the post-processing parameter entry and the
performance record are :class:`~amaranth.lib.data.StructLayout` built from :class:`Field` lists
that also carry the documentation. The RTL decoder uses these layouts (``Signal(layout)``), the
compiler encodes with :func:`make` / :func:`encode_record`, the ISA simulator decodes with
:func:`decode_insn` / :func:`decode_record`, and ``docs/isa.md`` is generated from them
(:mod:`arch.isa_doc`).

Adding an instruction: add an :class:`Opcode` member, add its :class:`Format` to :data:`FORMATS`
(fields with docs), then implement it in the ISA simulator and the RTL; the encoder, decoder,
assembler, disassembler and docs follow from the format.

Program model (VTA-style decoupled access/execute): instructions are fetched from DRAM in order
and dispatched to three queues - LOAD, COMPUTE, STORE - that run concurrently. Ordering between
queues comes only from dependency tokens: each instruction may pop a token from its neighbour
queues before it starts and push one when it is done. LOAD's neighbour is COMPUTE ("next");
COMPUTE's are LOAD ("prev") and STORE ("next"); STORE's is COMPUTE ("prev").

Errors: a program aligned to other than 16 bytes, or a descriptor table not 64-byte aligned or
reaching past DRAM, stops with DRAM_RANGE at instruction 0 before anything runs. Every other
error names the instruction that raised it; instruction k is decoded and checked (opcode, SYNC
queue, dependency flags) when dispatch reaches it, i.e. after instruction k-1 found room in its
queue - so a program that deadlocks with a full queue stops with DEADLOCK even if an illegal
instruction follows. DEADLOCK names the instruction the first of LOAD, COMPUTE, STORE waits at
for a token, else the one dispatch cannot place.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from amaranth import Shape, signed, unsigned
from amaranth.lib import data, enum

if TYPE_CHECKING:
    from arch.config import AccelConfig

INSN_BITS = 128
INSN_BYTES = INSN_BITS // 8
DESC_BITS = 512
DESC_BYTES = DESC_BITS // 8
PARAM_ENTRY_BYTES = 16
DESC_LOOPS = 4

DRAM_ADDR_BITS = 32  # DRAM byte addresses: launch registers, descriptors, PERF records
LAUNCH_BITS = 32  # width of each launch register (insn_base, desc_base, desc_count)
LOCAL_ADDR_BITS = 16  # line addresses of the local memories (ACT, WGT, PARAM, ACC)
DESC_INDEX_BITS = 24  # descriptor indices of LOAD/STORE
M_BITS = 12  # GEMM/ACCUM/POOL `m`: rows (lines, outputs) per block
ITER_BITS = 10  # GEMM `k_iter`, GEMM/ACCUM/POOL `n_iter`: blocks
GATE_ADDR_BITS = 14  # ACCUM `gate_addr`: what the 128-bit word has left (gates sit low in ACT)
INSN_INDEX_BITS = 32  # program index of an instruction (error_index, progress, queue entries)
MAX_SHIFT = 62  # requantization shifts above this are BAD_FIELD (exact in 64-bit arithmetic)
TABLE_ENTRIES = 256  # a STORE lookup table maps every int8 code to an int8 code
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1  # accumulators, biases and multipliers


ARITHMETIC = f"""\
Integer arithmetic (what the ISA simulator and the RTL compute, bit for bit):

- Activations and weights are signed 8-bit, accumulators signed 32-bit. GEMM, ACCUM and POOL
  results wrap modulo 2**32 (two's complement), like the hardware adders.
- `requant(x, mult, shift) = (x * mult + 2**(shift - 1)) >> shift` for shift >= 1 and
  `x * mult` for shift = 0, computed exactly in 64 bits with an arithmetic right shift: rounding is
  half up (towards +infinity: 2.5 -> 3, -2.5 -> -2). `mult` is a signed 32-bit value and `shift`
  must be in 0..{MAX_SHIFT} (larger shifts stop the program with BAD_FIELD).
- STORE saturates `requant(acc) + out_zp` to [clamp_lo, clamp_hi] and writes int8; ReLU is
  clamp_lo = out_zp (0 for symmetric outputs), ReLU6 is clamp_hi = the quantized 6.0. An int8
  tensor with zero point z holds `scale * (q - z)`; out_zp is the output's z. With use_table,
  the saturated code v is replaced by `table[v + 128]`: any function of one int8 value
  (Sigmoid, SiLU, GELU, ...) is one table.
- A table is {TABLE_ENTRIES} int8 bytes held in consecutive PARAM lines from `table_addr`, byte t
  of the table being byte `t % line` of line `table_addr + t // line` (line = `cols` x 16 bytes,
  see table_lines); STORE reads it before its first line.
- POOL with mode MAX takes the element-wise maximum of the window's int8 lines (padding lines hold
  the descriptor's pad_value, -128 for max pooling); mode SUM adds them.
- DRAM address arithmetic in descriptors is modulo 2**32 (a padded load may start "before" its
  tensor); only lines actually read or written must lie inside DRAM.
- DMA lines are `rows` bytes (ACT), `cols` bytes (WGT, stored outputs) or `cols` x 16 bytes
  (PARAM); every line's DRAM address must be aligned to min(line bytes, DRAM bus bytes).
"""


class IsaError(ValueError):
    """An instruction, descriptor or field value cannot be encoded or decoded."""


@dataclass(frozen=True)
class Launch:
    """The accelerator's start registers: where the program and the descriptor table are."""

    insn_base: int  # DRAM byte address of the first instruction
    desc_base: int  # DRAM byte address of descriptor 0
    desc_count: int  # descriptors in the table (LOAD/STORE of a larger index: BAD_DESCRIPTOR)

    #: The registers, in order: the fields of this class, the keys of :meth:`as_dict`, and the
    #: testbench's launch ports.
    FIELDS: ClassVar[tuple[str, ...]] = ("insn_base", "desc_base", "desc_count")

    def __post_init__(self) -> None:
        for name in self.FIELDS:
            value = getattr(self, name)
            if (
                not isinstance(value, int)
                or isinstance(value, bool)
                or not 0 <= value < 1 << LAUNCH_BITS
            ):
                shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
                raise IsaError(
                    f"launch register {name} must be an integer in 0..2**{LAUNCH_BITS}-1, "
                    f"not {shown}"
                )

    @classmethod
    def from_dict(cls, data: Any) -> Launch:
        """The registers of ``data`` (an object with exactly the keys of :data:`FIELDS`)."""
        if not isinstance(data, dict) or set(data) != set(cls.FIELDS):
            keys = str(sorted(map(str, data))) if isinstance(data, dict) else type(data).__name__
            keys = keys if len(keys) <= 80 else keys[:77] + "..."
            raise IsaError(f"launch registers must be exactly {list(cls.FIELDS)}, not {keys}")
        return cls(**{name: data[name] for name in cls.FIELDS})

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.FIELDS}


class Opcode(enum.Enum, shape=4):
    """Instruction opcodes. 0 and 11..15 are illegal (an all-zero word is never a program)."""

    LOAD = 1
    STORE = 2
    GEMM = 3
    ACCUM = 4
    POOL = 5
    SYNC = 6
    PERF = 7
    END = 8
    DWCONV = 9
    CONV = 10


class Queue(enum.Enum, shape=2):
    """The three execution queues."""

    LOAD = 0
    COMPUTE = 1
    STORE = 2


class Mem(enum.Enum, shape=2):
    """Local memories a DMA descriptor can address."""

    ACT = 0
    WGT = 1
    PARAM = 2
    ACC = 3


class PoolMode(enum.Enum, shape=1):
    MAX = 0
    SUM = 1


class ErrorCode(enum.Enum, shape=4):
    """Values of the status register's error field (also raised by the ISA simulator)."""

    NONE = 0
    ILLEGAL_OPCODE = 1
    BAD_DESCRIPTOR = 2  # descriptor index beyond the table
    DRAM_RANGE = 3  # DRAM address outside the DRAM, or misaligned
    LOCAL_RANGE = 4  # scratchpad / accumulator / parameter address outside its memory
    DEADLOCK = 5  # every queue waits for a token that can never come
    WATCHDOG = 6  # no progress for config.watchdog_cycles cycles
    BAD_FIELD = 7  # a field value the hardware cannot execute (e.g. zero count, bad memory)


ENUMS: tuple[type[enum.Enum], ...] = (Opcode, Queue, Mem, PoolMode, ErrorCode)


@dataclass(frozen=True)
class Field:
    """One named field of a format: its Amaranth shape (or enum, or nested layout) and meaning."""

    name: str
    shape: Any
    doc: str
    quiet: bool = False  #: listings omit it when 0 (an optional feature most programs leave off)


@dataclass(frozen=True)
class Leaf:
    """A flattened scalar field: dotted path, bit offset, width, signedness, enum type."""

    path: str
    offset: int
    width: int
    signed: bool
    enum: type[enum.Enum] | None
    doc: str
    quiet: bool = False

    @property
    def lo(self) -> int:
        return -(1 << (self.width - 1)) if self.signed else 0

    @property
    def hi(self) -> int:
        return (1 << (self.width - 1)) - 1 if self.signed else (1 << self.width) - 1


@dataclass(frozen=True)
class Format:
    """A fixed-size record: instruction format, descriptor, parameter entry or perf record."""

    name: str
    doc: str
    fields: tuple[Field, ...]
    bits: int
    opcode: Opcode | None = None
    queue: Queue | None = None

    @functools.cached_property
    def layout(self) -> data.StructLayout:
        layout = data.StructLayout({f.name: _layout_shape(f.shape) for f in self.fields})
        if layout.size > self.bits:
            raise AssertionError(f"{self.name} needs {layout.size} bits, has {self.bits}")
        return layout

    @functools.cached_property
    def leaves(self) -> tuple[Leaf, ...]:
        return tuple(_flatten(self, "", 0))

    @functools.cached_property
    def leaf_by_path(self) -> dict[str, Leaf]:
        return {leaf.path: leaf for leaf in self.leaves}

    @functools.cached_property
    def packing(self) -> tuple[tuple[Leaf, str, int, int, int, int, dict[int, Any] | None], ...]:
        """Per leaf, what encoding and decoding need, computed once: the leaf, its path, offset,
        mask, lo and hi, and its enum's members by value (None for a plain integer)."""
        return tuple(
            (
                leaf,
                leaf.path,
                leaf.offset,
                (1 << leaf.width) - 1,
                leaf.lo,
                leaf.hi,
                {m.value: m for m in leaf.enum} if leaf.enum is not None else None,
            )
            for leaf in self.leaves
        )

    @property
    def nbytes(self) -> int:
        return self.bits // 8


def _layout_shape(shape: Any) -> Any:
    if isinstance(shape, Format):
        return shape.layout
    if isinstance(shape, tuple):  # (Format, count): an array of records
        return data.ArrayLayout(_layout_shape(shape[0]), shape[1])
    return shape


def _flatten(fmt: Format, prefix: str, base: int) -> list[Leaf]:
    """Scalar leaves of ``fmt`` with dotted paths (``deps.pop_prev``, ``loops[3].count``)."""
    leaves: list[Leaf] = []
    for f in fmt.fields:
        offset = base + fmt.layout[f.name].offset
        path = prefix + f.name
        if isinstance(f.shape, Format):
            leaves += _flatten(f.shape, path + ".", offset)
        elif isinstance(f.shape, tuple):
            sub, count = f.shape
            for i in range(count):
                leaves += _flatten(sub, f"{path}[{i}].", offset + i * sub.layout.size)
        else:
            is_enum = isinstance(f.shape, type) and issubclass(f.shape, enum.Enum)
            cast = Shape.cast(f.shape)
            enum_type = f.shape if is_enum else None
            leaves.append(Leaf(path, offset, cast.width, cast.signed, enum_type, f.doc, f.quiet))
    return leaves


# --- records -------------------------------------------------------------------------------------

DEPS = Format(
    "deps",
    "Dependency-token flags, present in every instruction.",
    (
        Field("pop_prev", unsigned(1), "wait for and take a token from the previous queue first"),
        Field("pop_next", unsigned(1), "wait for and take a token from the next queue first"),
        Field("push_prev", unsigned(1), "give a token to the previous queue when done"),
        Field("push_next", unsigned(1), "give a token to the next queue when done"),
    ),
    bits=4,
)

DEP_FLAGS = tuple(f.name for f in DEPS.fields)
DEPS_PATHS = frozenset(f"deps.{flag}" for flag in DEP_FLAGS)

_HEADER = (
    Field("opcode", Opcode, "instruction kind"),
    Field("deps", DEPS, "dependency tokens (pop before, push after)"),
)


def _insn(opcode: Opcode, queue: Queue | None, doc: str, *fields: Field) -> Format:
    return Format(opcode.name.lower(), doc, (*_HEADER, *fields), INSN_BITS, opcode, queue)


LOOP = Format(
    "loop",
    "One level of a descriptor's loop nest.",
    (
        Field("count", unsigned(16), "iterations of this level (>= 1)"),
        Field("dram_stride", signed(32), "bytes added to the DRAM address per iteration"),
        Field("local_stride", signed(24), "lines added to the local address per iteration"),
        Field("ystep", signed(8), "added to the y coordinate per iteration (padding checks)"),
        Field("xstep", signed(8), "added to the x coordinate per iteration (padding checks)"),
    ),
    bits=88,
)

DESCRIPTOR = Format(
    "descriptor",
    "A DMA transfer: a 4-level loop nest moving one local line per innermost iteration. "
    "Line i0..i3 lives at DRAM `dram_base + sum(i_l * dram_stride_l)` and local "
    "`local_base + sum(i_l * local_stride_l)`; its coordinates are `y = y0 + sum(i_l * ystep_l)`, "
    "`x = x0 + sum(i_l * xstep_l)`. A load writes `pad_value` instead of reading DRAM when y is "
    "outside [0, height) or x outside [0, width) (a zero bound disables that check); a store "
    "skips such lines. loops[0] is outermost.",
    (
        Field("mem", Mem, "local memory: ACT/WGT/PARAM for loads, ACC for stores"),
        Field("local_base", unsigned(LOCAL_ADDR_BITS), "first local line"),
        Field("dram_base", unsigned(DRAM_ADDR_BITS), "DRAM byte address of line (0,0,0,0)"),
        Field("pad_value", signed(8), "value of padding elements (loads into ACT only)"),
        Field("y0", signed(16), "y coordinate of line (0,0,0,0)"),
        Field("x0", signed(16), "x coordinate of line (0,0,0,0)"),
        Field("height", unsigned(16), "valid y range [0, height); 0 = no check"),
        Field("width", unsigned(16), "valid x range [0, width); 0 = no check"),
        Field("loops", (LOOP, DESC_LOOPS), "loop nest, outermost first"),
    ),
    bits=DESC_BITS,
)

PARAM_ENTRY = Format(
    "param_entry",
    "Per-output-channel post-processing parameters; a PARAM line holds `cols` entries.",
    (
        Field("bias", signed(32), "added by ACCUM, DWCONV or STORE when use_bias=1"),
        Field("mult", signed(32), "STORE requantization multiplier"),
        Field("res_mult", signed(32), "ACCUM/STORE residual requantization multiplier"),
        Field("shift", unsigned(8), f"STORE requantization shift (0..{MAX_SHIFT})"),
        Field(
            "res_shift", unsigned(8), f"ACCUM/STORE residual requantization shift (0..{MAX_SHIFT})"
        ),
        Field("reserved", unsigned(16), "zero"),
    ),
    bits=PARAM_ENTRY_BYTES * 8,
)


def line_bytes(config: AccelConfig, mem: Mem) -> int:
    """Bytes of one line of a local memory as a descriptor moves it (ACC: a stored output line)."""
    return {
        Mem.ACT: config.act_line_bytes,
        Mem.WGT: config.wgt_line_bytes,
        Mem.PARAM: config.cols * PARAM_ENTRY_BYTES,
        Mem.ACC: config.out_line_bytes,
    }[mem]


def table_lines(cols: int) -> int:
    """PARAM lines a STORE lookup table occupies on an array of ``cols`` columns."""
    line = cols * PARAM_ENTRY_BYTES
    return -(-TABLE_ENTRIES // line)


PERF_COUNTERS = (
    ("cycles", "cycles since start"),
    ("insns_retired", "instructions completed (all queues)"),
    ("load_busy", "cycles the load unit executed an instruction"),
    ("compute_busy", "cycles the compute unit executed an instruction"),
    ("store_busy", "cycles the store unit executed an instruction"),
    ("array_active", "cycles an activation row entered the systolic array"),
    ("weight_load", "cycles spent loading weight tiles into the array"),
    ("load_token_wait", "cycles the load unit waited for a token"),
    ("compute_token_wait", "cycles the compute unit waited for a token"),
    ("store_token_wait", "cycles the store unit waited for a token"),
    ("dram_read_bytes", "bytes read from DRAM (fetch, descriptors, loads)"),
    ("dram_write_bytes", "bytes written to DRAM (stores, perf records)"),
    ("dram_stall", "cycles a DMA waited for DRAM data"),
    ("macs", "multiply-accumulates performed by the array and the window unit"),
    ("fetch_stall", "cycles dispatch waited because a queue was full"),
)

PERF_RECORD = Format(
    "perf_record",
    "Performance-counter snapshot written to DRAM by PERF.",
    (
        Field("tag", unsigned(32), "the PERF instruction's tag"),
        Field("reserved", unsigned(32), "zero"),
        *(Field(name, unsigned(64), doc) for name, doc in PERF_COUNTERS),
    ),
    bits=128 * 8,
)

LOAD = _insn(
    Opcode.LOAD,
    Queue.LOAD,
    "DMA from DRAM into ACT, WGT or PARAM as described by a descriptor.",
    Field("desc", unsigned(DESC_INDEX_BITS), "descriptor index"),
)
STORE = _insn(
    Opcode.STORE,
    Queue.STORE,
    "Post-process accumulator lines and DMA them to DRAM: per column c of the line, "
    "`out = clamp(requant(a, mult[c], shift[c]) + out_zp, clamp_lo, clamp_hi)` as int8 with "
    "`a = acc + (bias[c] if use_bias) + (requant(act[r][c], res_mult[c], res_shift[c]) if "
    "use_res)` (32-bit wrap), where the parameter line is `param_addr + i[param_loop]` (i = the "
    "descriptor's loop index) and the residual's ACT line `r = res_addr + l - local_base` for "
    "the line's ACC line l (a residual tile laid out like the accumulator tile); with "
    "use_table, `out = table[out + 128]` (the table in PARAM lines from table_addr). With "
    "transpose, the descriptor's innermost loop must count `cols` lines (else BAD_FIELD) and "
    "each innermost run is one block: its lines' outputs form a `cols` x `cols` byte block B "
    "(row r = line r of the run; a line outside the height/width bounds is a row of zeros, its "
    "PARAM line unread), and line r of the run is written with column r of B (`B[0..cols-1][r]`) "
    "at line r's DRAM address - every line of the run is written and must lie in DRAM. A "
    "producer stores its output transposed this way (e.g. k as k^T for `q @ k^T`); the unit "
    "collects a block, then writes it (`cols` cycles each).",
    Field("desc", unsigned(DESC_INDEX_BITS), "descriptor index (its mem must be ACC)"),
    Field("param_addr", unsigned(LOCAL_ADDR_BITS), "first PARAM line"),
    Field("param_loop", unsigned(2), "descriptor loop whose index advances the PARAM line"),
    Field("clamp_lo", signed(8), "lower saturation bound (0 = ReLU)"),
    Field("clamp_hi", signed(8), "upper saturation bound (ReLU6: the quantized 6.0)"),
    Field("use_table", unsigned(1), "map each saturated code through the lookup table", True),
    Field(
        "table_addr", unsigned(LOCAL_ADDR_BITS), "first PARAM line of the table (use_table)", True
    ),
    Field("out_zp", signed(8), "output zero point, added to requant(acc) before the clamp", True),
    Field("transpose", unsigned(1), "write each innermost run of `cols` lines transposed", True),
    Field("use_bias", unsigned(1), "add the PARAM bias to the accumulator first", True),
    Field("use_res", unsigned(1), "add the requantized residual ACT line first", True),
    Field(
        "res_addr",
        unsigned(LOCAL_ADDR_BITS),
        "ACT line of the residual of the descriptor's first ACC line (use_res)",
        True,
    ),
)
GEMM = _insn(
    Opcode.GEMM,
    Queue.COMPUTE,
    "Weight-stationary matrix multiply over k_iter x n_iter weight tiles: for k, for j, for i < m: "
    "`acc[acc_addr + j*acc_n_stride + i] (+)= act[act_addr + k*act_k_stride + i] @ "
    "W[wgt_addr + (k*n_iter + j)*rows]`. With accumulate=0 the k=0 tile overwrites.",
    Field(
        "wgt_addr", unsigned(LOCAL_ADDR_BITS), "WGT line of the first tile (tiles are `rows` lines)"
    ),
    Field("act_addr", unsigned(LOCAL_ADDR_BITS), "ACT line of row 0 of the first k block"),
    Field("acc_addr", unsigned(LOCAL_ADDR_BITS), "ACC line of row 0 of the first n block"),
    Field("m", unsigned(M_BITS), "rows streamed through the array per tile (>= 1)"),
    Field("k_iter", unsigned(ITER_BITS), "k blocks (>= 1)"),
    Field("n_iter", unsigned(ITER_BITS), "n blocks (>= 1)"),
    Field("act_k_stride", unsigned(LOCAL_ADDR_BITS), "ACT lines between k blocks"),
    Field("acc_n_stride", unsigned(LOCAL_ADDR_BITS), "ACC lines between n blocks"),
    Field("accumulate", unsigned(1), "1: add to ACC; 0: the first k tile overwrites"),
)
CONV_KERNEL_MAX = 7  # CONV kh, kw (3-bit fields)
CONV_STRIDE_MAX = 3  # CONV stride (2-bit field)
CONV = _insn(
    Opcode.CONV,
    Queue.COMPUTE,
    "A GEMM over kernel taps read from an input tile held once in ACT (no im2col copy): "
    "for ky < kh, kx < kw, c < k_iter (k block `k = (ky*kw + kx)*k_iter + c`), for j, for i < m: "
    "`acc[acc_addr + j*m + i] (+)= act[act_addr + c*act_k_stride + (y*stride + ky)*pitch + "
    "x*stride + kx] @ W[wgt_addr + (k*n_iter + j)*rows]` with output pixel `y = i // out_w`, "
    "`x = i % out_w` and the tile's row pitch `pitch = (out_w - 1)*stride + kw` (padding "
    "included). Each channel block's input tile is `act_k_stride` lines apart. Timed as a GEMM "
    "of kh*kw*k_iter k blocks. With accumulate=0 the first k tile overwrites.",
    Field(
        "wgt_addr",
        unsigned(LOCAL_ADDR_BITS),
        "WGT line of the first tile (tiles are `rows` lines, in k-block order)",
    ),
    Field("act_addr", unsigned(LOCAL_ADDR_BITS), "ACT line of input pixel (0, 0), channel block 0"),
    Field("acc_addr", unsigned(LOCAL_ADDR_BITS), "ACC line of output pixel 0 of n block 0"),
    Field("m", unsigned(M_BITS), "output pixels per n block (>= 1); n blocks are m lines apart"),
    Field("k_iter", unsigned(ITER_BITS), "channel blocks per tap (>= 1)"),
    Field("n_iter", unsigned(ITER_BITS), "n blocks (>= 1)"),
    Field("act_k_stride", unsigned(LOCAL_ADDR_BITS), "ACT lines between channel blocks' tiles"),
    Field("out_w", unsigned(M_BITS), "output pixels per row (>= 1)"),
    Field("kh", unsigned(3), f"kernel rows (1..{CONV_KERNEL_MAX})"),
    Field("kw", unsigned(3), f"kernel columns (1..{CONV_KERNEL_MAX})"),
    Field(
        "stride", unsigned(2), f"input pixels between outputs, in x and y (1..{CONV_STRIDE_MAX})"
    ),
    Field("accumulate", unsigned(1), "1: add to ACC; 0: the first k tile overwrites"),
)


def window_span(outputs: Any, kernel: Any, stride: Any) -> Any:
    """Input pixels that ``outputs`` window positions ``stride`` apart read, a window being
    ``kernel`` pixels: a CONV tile's row pitch and rows, DWCONV's columns per output row. Also
    takes Amaranth values (the RTL's form of the same sum)."""
    return (outputs - 1) * stride + kernel


def gemm_cycles(tiles: int, m: int, rows: int, cols: int) -> int:
    """GEMM or CONV on the array (hdl_gen/gemm_engine.py), cycle for cycle: the first tile's
    ``rows`` weight lines load, then each tile streams ``m`` rows from its weight bank while the
    next tile's weights load into the other; a bank takes new weights only once its last row
    has left the array's columns (``cols + 1`` cycles) and they have loaded, so a bank serves a
    tile every ``m + rows + cols + 2`` cycles at best and small tiles stream in pairs. The
    last row then fills and drains through the array into ACC."""
    if tiles == 1 or m >= rows + cols + 2:  # back to back: the banks keep up
        last_start = (tiles - 1) * m
    else:  # pairs: tile 2j starts a bank period after tile 2j - 2; its pair max(m, rows) later
        pairs, odd = divmod(tiles - 1, 2)
        last_start = pairs * (m + rows + cols + 2) + (max(m, rows) if odd else 0)
    return last_start + m + 2 * rows + cols + 5


ACCUM = _insn(
    Opcode.ACCUM,
    Queue.COMPUTE,
    "Initialise or add into accumulators: for j < n_iter, i < m, per column c: "
    "`acc[a] = (acc[a] if accumulate else 0) + (bias[c] if use_bias) + "
    "(requant(act[act_addr + j*act_n_stride + i][c] * g[c], res_mult[c], res_shift[c]) "
    "if use_res)` "
    "with `a = acc_addr + j*acc_n_stride + i`, PARAM line `param_addr + j`, and the gate "
    "`g = act[gate_addr + j]` with use_gate, else 1 (a channel-wise product such as a "
    "squeeze-excitation gate: one extra cycle per n block to read the gate line).",
    Field("acc_addr", unsigned(LOCAL_ADDR_BITS), "first ACC line"),
    Field("act_addr", unsigned(LOCAL_ADDR_BITS), "first ACT line of the residual (use_res)"),
    Field("param_addr", unsigned(LOCAL_ADDR_BITS), "PARAM line of n block 0"),
    Field("m", unsigned(M_BITS), "lines per n block (>= 1)"),
    Field("n_iter", unsigned(ITER_BITS), "n blocks (>= 1)"),
    Field("acc_n_stride", unsigned(LOCAL_ADDR_BITS), "ACC lines between n blocks"),
    Field("act_n_stride", unsigned(LOCAL_ADDR_BITS), "ACT lines between n blocks"),
    Field("use_bias", unsigned(1), "add the PARAM bias"),
    Field("use_res", unsigned(1), "add the requantized ACT line"),
    Field("accumulate", unsigned(1), "1: add to ACC; 0: overwrite"),
    Field("use_gate", unsigned(1), "multiply the residual by the gate line (needs use_res)", True),
    Field(
        "gate_addr",
        unsigned(GATE_ADDR_BITS),
        "ACT line of n block 0's gate (use_gate; block j's is gate_addr + j)",
        True,
    ),
)
POOL = _insn(
    Opcode.POOL,
    Queue.COMPUTE,
    "Reduce windows of ACT lines into ACC lines: for j < n_iter, i < m: "
    "`acc[acc_addr + j*acc_n_stride + i] (max|+)= reduce(act[act_addr + j*act_n_stride + "
    "i*window + w] for w < window)`.",
    Field("act_addr", unsigned(LOCAL_ADDR_BITS), "first ACT line"),
    Field("acc_addr", unsigned(LOCAL_ADDR_BITS), "first ACC line"),
    Field("m", unsigned(M_BITS), "outputs per n block (>= 1)"),
    Field("window", unsigned(8), "ACT lines reduced into one output (>= 1)"),
    Field("n_iter", unsigned(ITER_BITS), "n blocks (>= 1)"),
    Field("act_n_stride", unsigned(LOCAL_ADDR_BITS), "ACT lines between n blocks"),
    Field("acc_n_stride", unsigned(LOCAL_ADDR_BITS), "ACC lines between n blocks"),
    Field("mode", PoolMode, "MAX or SUM"),
    Field("accumulate", unsigned(1), "1: combine with the ACC line's value; 0: overwrite"),
)
DW_KERNEL_MAX = 3  # DWCONV kh, kw: the window unit holds 3x3 taps (larger kernels: passes)
DWCONV = _insn(
    Opcode.DWCONV,
    Queue.COMPUTE,
    "Depthwise convolution on the window unit, per channel lane c (lane c of ACT, WGT and ACC "
    "lines is the same channel): for oy < out_h, ox < out_w: "
    "`acc[acc_addr + oy*out_w + ox][c] = (acc[..][c] if accumulate) + (bias[c] if use_bias) + "
    "sum(act[act_addr + (oy*stride + i)*pitch + ox*stride + j][c] * "
    "wgt[wgt_addr + i*kw + j][c] for i < kh, j < kw)` with the PARAM line `param_addr`. "
    "The ACT lines are an input image of `pitch` pixels per row (padding included). The unit "
    "reads one column of up to 3 ACT lines per cycle (the ACT memory has 3 read ports) and "
    "makes an output every `stride` columns: about taps + out_h*((out_w-1)*stride + kw) "
    "cycles. With max (a max pool): `acc[..][c] = max(acc[..][c] if accumulate, "
    "max(act[..][c] for i < kh, j < kw))`; the tap WGT lines are read as usual but unused, "
    "and use_bias must be 0 (else BAD_FIELD).",
    Field("wgt_addr", unsigned(LOCAL_ADDR_BITS), "WGT line of tap (0, 0); kh*kw lines"),
    Field("act_addr", unsigned(LOCAL_ADDR_BITS), "ACT line of input pixel (0, 0)"),
    Field("acc_addr", unsigned(LOCAL_ADDR_BITS), "ACC line of output pixel (0, 0)"),
    Field("param_addr", unsigned(LOCAL_ADDR_BITS), "PARAM line of the bias (use_bias)"),
    Field("out_w", unsigned(M_BITS), "output pixels per row (>= 1)"),
    Field("out_h", unsigned(M_BITS), "output rows (>= 1)"),
    Field("pitch", unsigned(LOCAL_ADDR_BITS), "ACT lines from one input row to the next"),
    Field("kh", unsigned(2), f"kernel rows (1..{DW_KERNEL_MAX})"),
    Field("kw", unsigned(2), f"kernel columns (1..{DW_KERNEL_MAX})"),
    Field("stride", unsigned(2), "input pixels between outputs, in x and y (1..3)"),
    Field("use_bias", unsigned(1), "add the PARAM bias"),
    Field("accumulate", unsigned(1), "1: add to ACC; 0: overwrite"),
    Field("max", unsigned(1), "the window's maximum instead of its weighted sum", True),
)


def dwconv_cycles(out_w: int, out_h: int, kh: int, kw: int, stride: int) -> int:
    """DWCONV on the window unit (hdl_gen/window_engine.py): one WGT line per tap, then one
    column of input per cycle, ``(out_w - 1)*stride + kw`` columns per output row, back to
    back, and a 3-cycle tail (ACT read, products, ACC write)."""
    return kh * kw + out_h * window_span(out_w, kw, stride) + 3


SYNC = _insn(
    Opcode.SYNC,
    None,
    "No operation in `queue`: carries dependency tokens only.",
    Field("queue", Queue, "queue that executes it"),
)
PERF = _insn(
    Opcode.PERF,
    Queue.STORE,
    "Write a performance-counter snapshot (perf_record) to DRAM, in store-queue order.",
    Field("tag", unsigned(32), "copied into the record (the compiler uses the layer index)"),
    Field(
        "dram_addr", unsigned(DRAM_ADDR_BITS), "DRAM byte address of the record (128-byte aligned)"
    ),
)
END = _insn(
    Opcode.END,
    None,
    "End of program: fetch stops; `done` rises when every queue has drained. END runs in no "
    "queue: a dependency flag on it stops the program with BAD_FIELD.",
)

FORMATS: dict[Opcode, Format] = {
    f.opcode: f for f in (LOAD, STORE, GEMM, ACCUM, POOL, SYNC, PERF, END, DWCONV, CONV) if f.opcode
}
RECORDS: tuple[Format, ...] = (DESCRIPTOR, LOOP, PARAM_ENTRY, PERF_RECORD)
INSTRUCTION = data.UnionLayout(
    {"raw": unsigned(INSN_BITS), **{f.name: f.layout for f in FORMATS.values()}}
)
"""Union of all instruction formats: the RTL decoder's view of a fetched word."""


def queue_of(opcode: Opcode, fields: dict[str, Any]) -> Queue | None:
    """The queue an instruction executes in (None for END, which the dispatcher handles)."""
    fmt = FORMATS[opcode]
    return fields["queue"] if fmt.queue is None and opcode is Opcode.SYNC else fmt.queue


# --- encode / decode -----------------------------------------------------------------------------


def encode_record(fmt: Format, values: dict[str, Any]) -> int:
    """Pack ``values`` (flattened paths -> int or enum member) into an integer of ``fmt.bits``.

    Missing fields are 0. Raises :class:`IsaError` naming the field for unknown names, values out
    of range and non-members of an enum field.
    """
    if not fmt.leaf_by_path.keys() >= values.keys():
        unknown = set(values) - set(fmt.leaf_by_path)
        raise IsaError(
            f"{fmt.name}: unknown field(s) {sorted(unknown)}; fields: {', '.join(fmt.leaf_by_path)}"
        )
    if fmt.opcode is not None:
        given = values.get("opcode", fmt.opcode)
        if given not in (fmt.opcode, fmt.opcode.value, fmt.opcode.name):
            raise IsaError(f"{fmt.name}.opcode = {given!r}, but the format is {fmt.opcode.name}")
        values = {**values, "opcode": fmt.opcode}
    word = 0
    get = values.get
    for leaf, path, offset, mask, lo, hi, members in fmt.packing:
        value = get(path, 0)
        if members is not None:
            value = _enum_value(fmt, leaf, value)
        elif type(value) is not int and (isinstance(value, bool) or not isinstance(value, int)):
            raise IsaError(f"{fmt.name}.{path} must be an integer, not {value!r}")
        if not lo <= value <= hi:
            raise IsaError(
                f"{fmt.name}.{path} = {value} is out of range {lo}..{hi} "
                f"({'signed' if leaf.signed else 'unsigned'} {leaf.width} bits)"
            )
        word |= (value & mask) << offset
    return word


def _enum_value(fmt: Format, leaf: Leaf, value: Any) -> int:
    """The integer of ``value`` (a member, its name or its value) for enum field ``leaf``."""
    assert leaf.enum is not None
    if isinstance(value, str):
        try:
            value = leaf.enum[value]
        except KeyError:
            raise IsaError(_enum_error(fmt, leaf, value)) from None
    if not isinstance(value, leaf.enum):
        try:
            value = leaf.enum(value)
        except ValueError:
            raise IsaError(_enum_error(fmt, leaf, value)) from None
    result = value.value
    if isinstance(result, bool) or not isinstance(result, int):
        raise IsaError(f"{fmt.name}.{leaf.path} must be an integer, not {result!r}")
    return result


def _enum_error(fmt: Format, leaf: Leaf, value: object) -> str:
    assert leaf.enum is not None
    names = ", ".join(m.name for m in leaf.enum)
    return f"{fmt.name}.{leaf.path} = {value!r} is not one of {names}"


def decode_record(fmt: Format, word: int) -> dict[str, Any]:
    """Unpack an integer into flattened field values (enum fields as members)."""
    values: dict[str, Any] = {}
    for leaf, path, offset, mask, _, _, members in fmt.packing:
        raw = (word >> offset) & mask
        if leaf.signed and raw >> (leaf.width - 1):
            raw -= 1 << leaf.width
        if members is not None:
            member = members.get(raw)
            if member is None:
                raise IsaError(_enum_error(fmt, leaf, raw))
            values[path] = member
        else:
            values[path] = raw
    return values


@dataclass(frozen=True)
class Instruction:
    """A decoded instruction: its opcode and flattened field values (``deps.*`` included)."""

    opcode: Opcode
    fields: dict[str, Any]

    @property
    def format(self) -> Format:
        return FORMATS[self.opcode]

    @property
    def queue(self) -> Queue | None:
        return queue_of(self.opcode, self.fields)

    def __getitem__(self, path: str) -> Any:
        return self.fields[path]

    def encode(self) -> int:
        return encode_record(self.format, {**self.fields, "opcode": self.opcode})


def make(opcode: Opcode | str, deps: str | tuple[str, ...] = (), **fields: Any) -> Instruction:
    """Build and validate an instruction, e.g. ``make("gemm", m=49, k_iter=1, n_iter=4)``.

    ``deps`` lists token flags: ``("pop_prev", "push_next")`` or ``"pop_prev,push_next"``.
    """
    op = Opcode[opcode.upper()] if isinstance(opcode, str) else opcode
    flags = deps.split(",") if isinstance(deps, str) else list(deps)
    values = {f"deps.{flag.strip()}": 1 for flag in flags if flag.strip()}
    values.update(fields)
    return decode_insn(encode_record(FORMATS[op], {**values, "opcode": op}))


def decode_insn(word: int, index: int | None = None) -> Instruction:
    """Decode one 128-bit instruction word; :class:`IsaError` names an illegal opcode."""
    raw = word & ((1 << Shape.cast(Opcode).width) - 1)
    try:
        opcode = Opcode(raw)
    except ValueError:
        where = f"instruction {index}: " if index is not None else ""
        raise IsaError(f"{where}illegal opcode {raw} (word 0x{word:032x})") from None
    fields = decode_record(FORMATS[opcode], word)
    del fields["opcode"]
    return Instruction(opcode, fields)


def descriptor(
    mem: Mem | str,
    local_base: int,
    dram_base: int,
    loops: list[tuple[int, ...]],
    *,
    y0: int = 0,
    x0: int = 0,
    height: int = 0,
    width: int = 0,
    pad_value: int = 0,
) -> dict[str, Any]:
    """Descriptor fields for a loop nest given innermost-last as ``(count, dram_stride,
    local_stride[, ystep, xstep])`` tuples; unused outer levels get count 1. ``dram_base`` may be
    negative or beyond 2**32 (it is taken modulo 2**32)."""
    if len(loops) > DESC_LOOPS:
        raise IsaError(f"a descriptor has {DESC_LOOPS} loop levels, {len(loops)} were given")
    padded = [(1, 0, 0)] * (DESC_LOOPS - len(loops)) + list(loops)
    values: dict[str, Any] = {
        "mem": Mem[mem] if isinstance(mem, str) else mem,
        "local_base": local_base,
        "dram_base": dram_base % (1 << 32),
        "y0": y0,
        "x0": x0,
        "height": height,
        "width": width,
        "pad_value": pad_value,
    }
    keys = ("count", "dram_stride", "local_stride", "ystep", "xstep")
    for level, loop in enumerate(padded):
        for key, value in zip(keys, loop, strict=False):
            values[f"loops[{level}].{key}"] = value
    encode_record(DESCRIPTOR, values)  # validate now, naming the field
    return values


def words_to_bytes(words: list[int], nbytes: int) -> bytes:
    """Little-endian concatenation of fixed-size words."""
    return b"".join(w.to_bytes(nbytes, "little") for w in words)


def bytes_to_words(blob: bytes, nbytes: int) -> list[int]:
    if len(blob) % nbytes:
        raise IsaError(f"{len(blob)} bytes is not a whole number of {nbytes}-byte words")
    return [int.from_bytes(blob[i : i + nbytes], "little") for i in range(0, len(blob), nbytes)]

"""Every record and instruction format, field by field, with the cycle formulas next to the
instructions they time."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

from amaranth import signed, unsigned
from amaranth.lib import data

from arch.isa.constants import (
    DESC_BITS,
    DESC_BYTES,
    DESC_INDEX_BITS,
    DESC_LOOPS,
    DRAM_ADDR_BITS,
    GATE_ADDR_BITS,
    INSN_BITS,
    ITER_BITS,
    LOCAL_ADDR_BITS,
    M_BITS,
    MAX_SHIFT,
    PARAM_ENTRY_BYTES,
    TABLE_ENTRIES,
)
from arch.isa.enums import Mem, NormMode, Opcode, PoolMode, Queue
from arch.isa.record import Field, Format

if TYPE_CHECKING:
    from arch.config import AccelConfig


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

#: The token flags as an enum, one member per field of :data:`DEPS` (``Token.POP_PREV`` is
#: ``"pop_prev"``): what the compiler's schedule names and :func:`~arch.isa.make` takes.
Token = StrEnum("Token", [(flag.upper(), flag) for flag in DEP_FLAGS])

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
    "W[wgt_addr + (k*n_iter + j)*rows]`. With accumulate=0 the k=0 tile overwrites. With "
    "transpose_w, a tile's line r is column r of W (W's rows are read down the tile's lines: "
    "`q @ k^T` from key rows as they are stored). A GEMM or CONV retires once its weight and "
    "activation rows are read: the next GEMM or CONV starts while its last rows drain into "
    "ACC (`gemm_drain_cycles`), its token to STORE leaves once they are there, and any other "
    "COMPUTE instruction waits for them.",
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
    Field("transpose_w", unsigned(1), "1: each tile's line r is column r of its weights", True),
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


#: A unit's cycles between two instructions (pushing the one's tokens, taking the next, popping
#: its tokens: the RTL frame's RELEASE, IDLE and ACQUIRE), in which the GEMM engine's drain
#: goes on.
FRAME_CYCLES = 3


def descriptor_beats(bus_bytes: int) -> int:
    """Bus beats of a descriptor."""
    return -(-DESC_BYTES // bus_bytes)


def descriptor_read_cycles(dram_latency: int, bus_bytes: int) -> int:
    """Cycles a unit takes to read a descriptor: the DRAM latency, then its beats. A LOAD or
    STORE unit reads its queue head's ahead, while the instruction before it runs or it waits
    for its tokens (``hdl_gen/desc_fetch.py``)."""
    return dram_latency + descriptor_beats(bus_bytes)


def gemm_drain_cycles(rows: int, cols: int) -> int:
    """The last ``gemm_cycles`` of a GEMM or CONV: its last row on its way through the array
    into ACC, after its last weight and activation rows have been read. A GEMM or CONV retires
    before them: the next GEMM or CONV starts while they drain, its token to STORE leaves once
    they have, and any other compute instruction waits for them."""
    return rows + cols + 2


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


NORM_ISQRT_BITS_PER_CYCLE = 3  # root bits the isqrt decides a cycle (30 after its load)
NORM_DIV_BITS_PER_CYCLE = 4  # quotient bits the divider decides a cycle (16 after its load)
# digit-by-digit isqrt (load + 30 bits) + restoring reciprocal (load and 1 bit + 16 bits)
NORM_RSQRT_CYCLES = 1 + 30 // NORM_ISQRT_BITS_PER_CYCLE + 1 + 16 // NORM_DIV_BITS_PER_CYCLE
NORM_RECIP_CYCLES = 1 + 16 // NORM_DIV_BITS_PER_CYCLE  # the softmax row's reciprocal of its sum
NORM_FILL_CYCLES = 4  # ACT/PARAM read, multiply, add, ACC write
NORM = _insn(
    Opcode.NORM,
    Queue.COMPUTE,
    "Row ops on the norm unit beside the array (configs with norm_unit; else ILLEGAL_OPCODE), "
    "bit-exact with arch/norm_ops.py. Row i (i < m) has C = (k_iter - 1)*rows + lanes channels "
    "(lanes = last_lanes, or rows when 0) in ACT lines `act_addr + k*m + i` (k < k_iter), int8; "
    "its result goes to ACC lines `acc_addr + k*m + i` (lanes past C are 0) as Q8 output codes "
    "for a STORE with mult=1, shift=8 to round and saturate (LAYERNORM/RMSNORM: "
    "`norm_rows_q8`, per-channel mult, shift, bias from PARAM line `param_addr + k`; SOFTMAX: "
    "`softmax_rows_q8`, STORE out_zp=-128). The row scalar - eps_codes (LAYERNORM/RMSNORM) or "
    "K (SOFTMAX) - is res_mult of entry 0 of PARAM line `param_addr`. SOFTMAX masks: with "
    "mask_lines, mask line k of row i is ACT `mask_addr + k*m + i` (mask_per_row) or "
    "`mask_addr + k` (one row for all), an int8 code added to x, -128 masking the position; "
    "with causal, position j of row i is masked when j > row0 + i. The unit streams a row line "
    "by line: a statistics pass (sum and sum of squares, or the maximum), the row scalar "
    f"({NORM_RSQRT_CYCLES}-cycle reciprocal square root, or for SOFTMAX a pass summing the "
    f"exponentials and a {NORM_RECIP_CYCLES}-cycle reciprocal), then a pass writing one ACC "
    "line per cycle: `norm_cycles`.",
    Field("act_addr", unsigned(LOCAL_ADDR_BITS), "ACT line of row 0, channel block 0"),
    Field("acc_addr", unsigned(LOCAL_ADDR_BITS), "ACC line of row 0, channel block 0"),
    Field("param_addr", unsigned(LOCAL_ADDR_BITS), "PARAM line of channel block 0"),
    Field("m", unsigned(M_BITS), "rows (tokens) (>= 1); channel blocks are m lines apart"),
    Field("k_iter", unsigned(ITER_BITS), "lines per row (>= 1)"),
    Field("last_lanes", unsigned(6), "channels in the row's last line (0: all `rows`)"),
    Field("mode", NormMode, "LAYERNORM, RMSNORM or SOFTMAX"),
    Field("zp_in", signed(8), "input zero point, subtracted first (RMSNORM)"),
    Field("mask_lines", unsigned(1), "SOFTMAX: add the int8 mask lines (-128 masks)", True),
    Field("mask_addr", unsigned(LOCAL_ADDR_BITS), "ACT line of the mask (mask_lines)", True),
    Field("mask_per_row", unsigned(1), "each row has its own mask lines (mask_lines)", True),
    Field("causal", unsigned(1), "SOFTMAX: mask positions j > row0 + i", True),
    Field("row0", unsigned(M_BITS), "causal: the position of row 0", True),
)


def norm_cycles(mode: NormMode, m: int, k_iter: int) -> int:
    """NORM on the norm unit (stage 1: a row at a time, no overlap between rows): per row, one
    ACT line per cycle in each pass (two for the norms, three for SOFTMAX) plus the row scalar's
    serial unit, and a pipeline fill."""
    if mode is NormMode.SOFTMAX:
        per_row = 3 * k_iter + NORM_RECIP_CYCLES
    else:
        per_row = 2 * k_iter + NORM_RSQRT_CYCLES
    return m * per_row + NORM_FILL_CYCLES


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
    f.opcode: f
    for f in (LOAD, STORE, GEMM, ACCUM, POOL, SYNC, PERF, END, DWCONV, CONV, NORM)
    if f.opcode
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

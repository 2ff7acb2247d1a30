"""The ISA's sizes and field widths, its integer arithmetic, and its error type."""

from __future__ import annotations

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

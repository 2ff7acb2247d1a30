"""Curated RTL mutants of the data path: requantization, the store unit, the DMA address
generator (:mod:`mutation.rtl_mutants` collects them)."""

from __future__ import annotations

from mutation.table import Mutant

_A = "hdl_gen/addrgen.py"
_Q = "hdl_gen/requant.py"
_S = "hdl_gen/store_unit.py"

DATAPATH: list[Mutant] = [
    # --- requantization: rounding, saturation, sign extension (the tie mutant first)
    Mutant(
        "requant-neg-tie-away",
        _Q,
        "m.d.comb += rounded.eq(truncated + Mux(shift == 0, 0, half))",
        "low_zero = ((product >> (shift - 1).as_unsigned()[: len(shift)])"
        " << (shift - 1).as_unsigned()[: len(shift)]) == product\n"
        "    half = half & ~(product[-1] & low_zero)\n"
        "    m.d.comb += rounded.eq(truncated + Mux(shift == 0, 0, half))",
        "negative exact ties round away from zero (-2.5 -> -3) instead of half up (issue #22)",
    ),
    Mutant(
        "requant-truncate",
        _Q,
        "Mux(shift == 0, 0, half)",
        "0",
        "no rounding: the shift truncates towards -infinity",
    ),
    Mutant(
        "requant-half-at-shift0",
        _Q,
        "Mux(shift == 0, 0, half)",
        "half",
        "shift 0 adds a rounding bit (bit 63 of the product: 1 for negative products)",
    ),
    Mutant(
        "requant-half-bit",
        _Q,
        "half = (product >> (shift - 1).as_unsigned()[: len(shift)])[0]",
        "half = (product >> shift)[0]",
        "rounds on bit `shift` instead of bit `shift - 1`",
    ),
    Mutant(
        "clamp-hi-off-by-one",
        _Q,
        "Mux(value > hi, hi, value)",
        "Mux(value > hi - 1, hi - 1, value)",
        "saturates one below the upper bound (127 -> 126)",
    ),
    Mutant(
        "clamp-lo-le",
        _Q,
        "Mux(value < lo, lo,",
        "Mux(value <= lo, lo,",
        "lower clamp compares with <=",
        equivalent="value == lo gives lo either way (STORE refuses clamp_lo > clamp_hi first)",
    ),
    Mutant(
        "clamp-bounds-unsigned",
        _Q,
        "lo, hi = lo.as_signed(), hi.as_signed()",
        "lo, hi = lo.as_unsigned(), hi.as_unsigned()",
        "clamp bounds zero-extended instead of sign-extended (-128 -> 128)",
    ),
    # --- store unit: regions, post-processing fields, error codes
    Mutant(
        "store-past-line",
        _S,
        "Const((1 << out_bytes) - 1, bus) << offset",
        "Const((1 << (out_bytes + 1)) - 1, bus) << offset",
        "a STORE line writes one byte past its end (a store out of its region, issue #22)",
    ),
    Mutant(
        "store-zero-line-1mib-away",
        _S,
        "self.wr.payload.addr.eq(c_dram),",
        "self.wr.payload.addr.eq(c_dram + Mux(c_line == 0, 1 << 20, 0)),",
        "a STORE line of zeros goes 1 MiB past its address, far past the image and the guard "
        "bands, and writes what its own place already held (issue #41: only a DRAM model that "
        "watches every write sees it)",
    ),
    Mutant(
        "store-zp-unsigned",
        _S,
        "m.d.comb += shifted.eq(scaled + insn.out_zp.as_signed())",
        "m.d.comb += shifted.eq(scaled + insn.out_zp.as_unsigned())",
        "output zero point zero-extended (a negative zero point becomes +128..255)",
    ),
    Mutant(
        "store-bias-ignored",
        _S,
        "accs[col] + Mux(insn.use_bias, entry.bias, 0) + Mux(insn.use_res, residual, 0)",
        "accs[col] + Mux(insn.use_res, residual, 0)",
        "STORE drops the bias it was told to add (every conv without a residual loses its bias)",
    ),
    Mutant(
        "store-bias-no-wrap",
        _S,
        'value = Signal(signed(c.acc_bits), name=f"value_{col}")',
        'value = Signal(signed(c.acc_bits + 1), name=f"value_{col}")',
        "acc + bias kept at 33 bits: a sum past int32 does not wrap like every accumulator sum",
    ),
    Mutant(
        "store-res-ignored",
        _S,
        "accs[col] + Mux(insn.use_bias, entry.bias, 0) + Mux(insn.use_res, residual, 0)",
        "accs[col] + Mux(insn.use_bias, entry.bias, 0)",
        "STORE drops the residual it was told to add (every residual block loses its shortcut)",
    ),
    Mutant(
        "store-res-base-ignored",
        _S,
        "insn.res_addr + line.local - fetcher.desc.local_base",
        "insn.res_addr + line.local",
        "the residual's ACT line is res_addr + the ACC line, not + its offset in the tile",
    ),
    Mutant(
        "store-res-range-unchecked",
        _S,
        "errors.raise_(a_moves & line.valid & insn.use_res & res_outside",
        "errors.raise_(0",
        "a residual ACT line past ACT is read (wrapped) instead of stopping with LOCAL_RANGE",
    ),
    Mutant(
        "store-res-shift-unchecked",
        _S,
        "bad_shift = bad_shift | (insn.use_res & (entry.res_shift > MAX_SHIFT))",
        "bad_shift = bad_shift",
        "a residual shift above MAX_SHIFT is used instead of stopping with BAD_FIELD",
    ),
    Mutant(
        "store-param-not-indexed",
        _S,
        "self.param.addr.eq(insn.param_addr + index)",
        "self.param.addr.eq(insn.param_addr)",
        "every line uses the first PARAM line (per-channel parameters ignored along param_loop)",
    ),
    Mutant(
        "store-table-sign",
        _S,
        "looked_up = table[Cat(code[:7], ~code[7])]",
        "looked_up = table[Cat(code[:7], code[7])]",
        "lookup table indexed by the code, not code + 128",
    ),
    Mutant(
        "store-table-first-line-only",
        _S,
        "m.d.comb += table_write.en.eq(table_step != 0)",
        "m.d.comb += table_write.en.eq(table_step == 1)",
        "only the table's first PARAM line is loaded (tiny: 4 lines)",
    ),
    Mutant(
        "store-shift-62-bad",
        _S,
        "bad_shift = bad_shift | (entry.shift > MAX_SHIFT)",
        "bad_shift = bad_shift | (entry.shift >= MAX_SHIFT)",
        "the largest legal shift (62) stops the STORE with BAD_FIELD",
    ),
    Mutant(
        "store-clamp-equal-bad",
        _S,
        "insn.clamp_lo.as_signed() > insn.clamp_hi.as_signed()",
        "insn.clamp_lo.as_signed() >= insn.clamp_hi.as_signed()",
        "clamp_lo == clamp_hi (a legal constant output) is refused with BAD_FIELD",
    ),
    Mutant(
        "store-table-end-bad",
        _S,
        "table_outside = insn.table_addr + table_lines > c.param_lines",
        "table_outside = insn.table_addr + table_lines >= c.param_lines",
        "a table ending exactly at the end of PARAM is refused with LOCAL_RANGE",
    ),
    Mutant(
        "store-perf-end-bad",
        _S,
        "address + isa.PERF_RECORD.nbytes <= c.dram_bytes",
        "address + isa.PERF_RECORD.nbytes < c.dram_bytes",
        "a PERF record ending exactly at the end of DRAM is refused with DRAM_RANGE",
    ),
    Mutant(
        "store-write-ignores-ready",
        _S,
        "c_free = ~c_valid | c_last_beat",
        "c_free = 1",
        "the write stage takes a new line without waiting for the DRAM write handshake "
        "(killed since the testbench DRAM stalls writes: tests/instruction/test_dram_stall_rtl.py)",
    ),
    Mutant(
        "store-perf-ignores-ready",
        _S,
        'with m.State("PERF"), m.If(self.wr.ready):',
        'with m.State("PERF"), m.If(1):',
        "a PERF record's write beats advance while the DRAM refuses them: beats of the record lost",
    ),
    # --- DMA address generator: loop counters, bounds, strides
    Mutant(
        "addrgen-last-early",
        _A,
        "last.eq(at_end[0] & at_end[1] & at_end[2] & at_end[3])",
        "last.eq(at_end[0] & at_end[1] & at_end[2])",
        "a walk ends at the first line of the last innermost loop",
    ),
    Mutant(
        "addrgen-count-off-by-one",
        _A,
        "at_end = [count[lv] == loops[lv].count - 1 for lv in range(levels)]",
        "at_end = [count[lv] == loops[lv].count for lv in range(levels)]",
        "every loop runs count + 1 times",
    ),
    Mutant(
        "addrgen-pad-bottom",
        _A,
        "((y >= 0) & (y < desc.height))",
        "((y >= 0) & (y <= desc.height))",
        "the row just below the image is read instead of padded",
    ),
    Mutant(
        "addrgen-pad-left",
        _A,
        "((x >= 0) & (x < desc.width))",
        "((x > 0) & (x < desc.width))",
        "column 0 of the image is padded instead of read",
    ),
    Mutant(
        "addrgen-local-end",
        _A,
        '(inner["local"] < self.lines_in_mem)',
        '(inner["local"] <= self.lines_in_mem)',
        "a line one past the local memory passes the LOCAL_RANGE check",
    ),
    Mutant(
        "addrgen-dram-end",
        _A,
        "(dram_end <= self.dram_bytes)",
        "(dram_end < self.dram_bytes)",
        "a line ending exactly at the end of DRAM is refused with DRAM_RANGE",
    ),
    Mutant(
        "addrgen-no-align",
        _A,
        'dram_ok = (dram_end <= self.dram_bytes) & ((inner["dram"] & (self.align - 1)) == 0)',
        "dram_ok = dram_end <= self.dram_bytes",
        "misaligned DRAM lines are not refused",
    ),
    Mutant(
        "addrgen-inner-not-reset",
        _A,
        "for k in range(lv, levels):",
        "for k in range(lv, lv + 1):",
        "stepping an outer loop does not restart the inner loops' addresses",
    ),
    Mutant(
        "addrgen-zero-count-inner",
        _A,
        "| (loops[2].count == 0)\n                    | (loops[3].count == 0)",
        "| (loops[2].count == 0)",
        "a zero innermost count is not refused with BAD_FIELD",
    ),
]

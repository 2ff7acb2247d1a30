"""Semantic mutants of the RTL generator (hdl_gen/), and the RTL tests that must kill them.

Each mutant is killed only by simulating it: the runner regenerates ``rtl/tiny/sim_top.v`` from
the mutated generator in a copy of the checkout and runs :data:`KILLERS` there (instruction-level
programs on the ``tiny`` config, RTL against the ISA simulator and the reference ops, with guard
bands). ``equivalent`` mutants are expected to survive; the line says why no test can see them.
"""

from __future__ import annotations

from mutation.table import Mutant

CONFIG = "tiny"  # the preset whose RTL each mutant regenerates; every killer runs on it

# pytest node ids, run in this order with -x (cheap and broad first): the first failure kills.
KILLERS = (
    "tests/instruction/test_rtl_vs_isa.py::test_kernels_match_isa_simulator[tiny]",
    "tests/instruction/test_rtl_vs_isa.py::test_random_programs_match_isa_simulator[tiny]",
    "tests/instruction/test_edges_rtl.py",
    "tests/instruction/test_store_transpose.py::test_transposing_store_matches_reference_ops[tiny]",
    "tests/instruction/test_error_per_opcode.py",
    "tests/instruction/test_token_meet_rtl.py::test_push_and_pop_in_one_cycle_keep_the_count",
    "tests/instruction/test_stride_edges_rtl.py",
    "tests/instruction/test_token_flags_rtl.py",
    "tests/instruction/test_requant_ties_rtl.py::test_rtl_rounds_ties_up[tiny]",
    "tests/instruction/test_rtl_vs_isa.py::test_bad_programs_stop_with_the_right_code[tiny]",
    "tests/instruction/test_bad_program_agreement.py::test_directed_cases_stop_alike",
    "tests/instruction/test_dwconv.py::test_dwconv_rtl_matches_reference_and_isa[tiny]",
    "tests/instruction/test_dwconv_max.py::test_dwconv_max_rtl_matches_reference_and_isa[tiny]",
    "tests/instruction/test_dwconv.py::test_bad_dwconv_stops_the_rtl_with_the_same_code[tiny]",
    "tests/instruction/test_accum_gate.py::test_accum_gate_matches_reference_ops[tiny]",
    "tests/instruction/test_accum_gate.py::test_bad_gates_stop_both_simulators",
    "tests/instruction/test_store_table.py::test_store_table_matches_reference_ops[tiny]",
    "tests/instruction/test_store_table.py::test_table_past_param_is_local_range",
    "tests/instruction/test_store_zero_point.py::test_store_zero_point_matches_reference_ops[tiny]",
    "tests/instruction/test_store_bias.py::test_store_bias_matches_reference_ops[tiny]",
    "tests/instruction/test_store_residual.py::test_store_residual_matches_reference_ops[tiny]",
    "tests/instruction/test_store_residual.py::test_bad_residuals_stop_both_simulators_alike",
    "tests/instruction/test_dma_and_postproc.py::test_postprocessing_matches_reference_ops[tiny]",
    "tests/instruction/test_dma_and_postproc.py::test_dma_sweep_with_guard_bytes[tiny]",
    "tests/instruction/test_sync_token_rtl.py",
    "tests/instruction/test_guard_bands_rtl.py",
    "tests/instruction/test_perf_counters_rtl.py",
    "tests/instruction/test_bad_program_agreement.py::test_random_programs_stop_alike",
)

_A = "hdl_gen/addrgen.py"
_Q = "hdl_gen/requant.py"
_S = "hdl_gen/store_unit.py"
_T = "hdl_gen/tokens.py"
_F = "hdl_gen/fetch.py"
_D = "hdl_gen/desc_fetch.py"
_X = "hdl_gen/accelerator.py"
_G = "hdl_gen/gemm_engine.py"
_L = "hdl_gen/line_engine.py"
_W = "hdl_gen/window_engine.py"
_U = "hdl_gen/load_unit.py"

RTL_MUTANTS: list[Mutant] = [
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
        "the write stage takes a new line without waiting for the DRAM write handshake",
        equivalent="wr.ready is always 1 and a tiny STORE line is one beat (4 of 8 bytes): "
        "c_free = 1 either way (a line wider than the bus would see it)",
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
    # --- dependency tokens and the unit frame: token limits, handshakes
    Mutant(
        "token-has-always",
        _T,
        "self.has.eq(self.count > 0)",
        "self.has.eq(self.count >= 0)",
        "a token can be popped before it was pushed",
    ),
    Mutant(
        "token-room-over-depth",
        _T,
        "self.room.eq(self.count < self.depth)",
        "self.room.eq(self.count <= self.depth)",
        "a producer may push token_depth + 1 tokens",
    ),
    Mutant(
        "token-push-and-pop",
        _T,
        "with m.If(self.push & ~self.pop):",
        "with m.If(self.push):",
        "a push and a pop in one cycle count as a push",
    ),
    Mutant(
        "frame-acquire-wrong-side",
        _T,
        "ready = (~head_deps.pop_prev | unit.deps.has_prev) & (",
        "ready = (~head_deps.pop_prev | unit.deps.has_next) & (",
        "a pop from the previous queue waits on the next queue's tokens",
    ),
    Mutant(
        "frame-release-wrong-side",
        _T,
        "room = (~deps.push_prev | unit.deps.room_prev) & (",
        "room = (~deps.push_prev | unit.deps.room_next) & (",
        "a push to the previous queue waits for room in the next queue",
    ),
    Mutant(
        "frame-push-swapped",
        _T,
        "unit.deps.push_prev.eq(deps.push_prev),",
        "unit.deps.push_prev.eq(deps.push_next),",
        "push_next pushes to the previous queue too",
    ),
    Mutant(
        "frame-pop-stale-flags",
        _T,
        "unit.deps.pop_next.eq(head_deps.pop_next),",
        "unit.deps.pop_next.eq(deps.pop_next),",
        "pop_next taken from the previous instruction, not the one starting",
    ),
    # --- fetch / dispatch and launch checks: error-code conditions
    Mutant(
        "fetch-dram-end",
        _F,
        "out_of_dram = next_addr + step > self.config.dram_bytes",
        "out_of_dram = next_addr + step >= self.config.dram_bytes",
        "a program ending exactly at the end of DRAM cannot fetch its last beat",
    ),
    Mutant(
        "fetch-sync-queue",
        _F,
        "bad_field.eq(insn.sync.queue.as_value() == 3)",
        "bad_field.eq(insn.sync.queue.as_value() == 2)",
        "SYNC on queue 3 accepted, SYNC on the STORE queue refused",
    ),
    Mutant(
        "fetch-load-push-prev",
        _F,
        "no_prev = (target == isa.Queue.LOAD) & (deps.pop_prev | deps.push_prev)",
        "no_prev = (target == isa.Queue.LOAD) & deps.pop_prev",
        "a LOAD-queue instruction pushing to a nonexistent previous queue is not refused",
    ),
    Mutant(
        "fetch-end-tokens",
        _F,
        "bad = bad_field | Mux(is_end, any_dep, no_prev | no_next)",
        "bad = bad_field | Mux(is_end, 0, no_prev | no_next)",
        "END with a token flag is not refused",
    ),
    Mutant(
        "desc-index-eq-count",
        _D,
        "with m.If(self.index >= self.desc_count):",
        "with m.If(self.index > self.desc_count):",
        "descriptor index == desc_count (one past the table) is accepted",
    ),
    Mutant(
        "launch-table-end",
        _X,
        "| (table_end > c.dram_bytes)",
        "| (table_end >= c.dram_bytes)",
        "a descriptor table ending exactly at the end of DRAM is refused",
    ),
    Mutant(
        "launch-insn-align",
        _X,
        "(self.insn_base % isa.INSN_BYTES != 0)",
        "(self.insn_base % 4 != 0)",
        "a program aligned to 4 but not 16 bytes is accepted",
    ),
    Mutant(
        "deadlock-code",
        _X,
        "fail(blocked_for == DEADLOCK_CYCLES, isa.ErrorCode.DEADLOCK, waiting_index)",
        "fail(blocked_for == DEADLOCK_CYCLES, isa.ErrorCode.WATCHDOG, waiting_index)",
        "a deadlock reports WATCHDOG",
    ),
    Mutant(
        "perf-macs-no-window",
        _X,
        '"macs": compute.array_active * (c.rows * c.cols) + compute.window_macs,',
        '"macs": compute.array_active * (c.rows * c.cols),',
        "DWCONV multiply-accumulates missing from the macs counter",
    ),
    Mutant(
        "perf-counters-48-bits",
        _X,
        "m.d.sync += counter.eq(counter + amount)",
        "m.d.sync += counter.eq((counter + amount)[:48])",
        "the PERF counters wrap at 2**48 (no regression run counts past 2**22)",
    ),
    # --- GEMM engine
    Mutant(
        "gemm-overwrite-every-k",
        _G,
        "issue.overwrite.eq(~gemm.accumulate & (st_k == 0))",
        "issue.overwrite.eq(~gemm.accumulate)",
        "every k block overwrites ACC instead of the first",
    ),
    Mutant(
        "gemm-overlap-check",
        _G,
        "overlap = (gemm.n_iter > 1) & (gemm.acc_n_stride < gemm.m)",
        "overlap = (gemm.n_iter > 1) & (gemm.acc_n_stride <= gemm.m)",
        "n blocks packed back to back (stride == m) are refused as overlapping",
    ),
    Mutant(
        "gemm-act-k-stride",
        _G,
        "st_act_base.eq(st_act_base + gemm.act_k_stride),",
        "st_act_base.eq(st_act_base + gemm.act_k_stride + 1),",
        "the next k block's activations start one line late",
    ),
    Mutant(
        "gemm-act-end",
        _G,
        "st_bad = (act_address >= c.act_lines) | (acc_address >= c.acc_lines)",
        "st_bad = (act_address > c.act_lines) | (acc_address >= c.acc_lines)",
        "an ACT row one past the memory passes the LOCAL_RANGE check",
    ),
    Mutant(
        "gemm-drain-short",
        _G,
        "m.d.sync += [loaded[b].eq(0), drain[b].eq(c.cols + 1)]",
        "m.d.sync += [loaded[b].eq(0), drain[b].eq(1)]",
        "a bank is refilled while its last rows are still in the array",
    ),
    Mutant(
        "pe-bank-from-writer",
        "hdl_gen/pe.py",
        "read.addr.eq(self.bank_in),",
        "read.addr.eq(self.w_bank),",
        "the PE multiplies with the bank being written, not the one travelling with a",
    ),
    Mutant(
        "pe-activation-zero-extended",
        "hdl_gen/pe.py",
        "a_wide = Cat(self.a_in, self.a_in[-1].replicate(spare)).as_signed()",
        "a_wide = self.a_in.as_unsigned()",
        "a negative activation is multiplied as a large positive one",
    ),
    Mutant(
        "pe-weight-bank-ignored",
        "hdl_gen/pe.py",
        "write.addr.eq(self.w_bank),",
        "write.addr.eq(0),",
        "every weight write lands in bank 0",
    ),
    # --- line engine (ACCUM, POOL)
    Mutant(
        "pool-max-is-min",
        _L,
        "Mux(value > previous, value, previous)",
        "Mux(value < previous, value, previous)",
        "max pooling takes the minimum",
    ),
    Mutant(
        "pool-accumulate-ignored",
        _L,
        "first = Mux(pool.accumulate, combine(accs[col]), line_value)",
        "first = line_value",
        "POOL with accumulate does not merge the ACC line",
    ),
    Mutant(
        "pool-window-off-by-one",
        _L,
        "last_w = w == pool.window - 1",
        "last_w = w == pool.window",
        "a pool window takes one line too many",
    ),
    Mutant(
        "accum-act-stride",
        _L,
        "act_ptr.eq(act_base + accum.act_n_stride),",
        "act_ptr.eq(act_base + accum.acc_n_stride),",
        "ACCUM's next n block of residuals uses the ACC stride",
    ),
    Mutant(
        "accum-param-end",
        _L,
        "bad = bad | (param_address >= c.param_lines)",
        "bad = bad | (param_address > c.param_lines)",
        "a PARAM line one past the memory passes the LOCAL_RANGE check",
    ),
    Mutant(
        "accum-ungated-zero",
        _L,
        "gated = acts[col] * Mux(accum.use_gate, gate[col], 1)",
        "gated = acts[col] * Mux(accum.use_gate, gate[col], -1)",
        "an ungated residual is negated",
    ),
    # --- window engine (DWCONV): stride and padding arithmetic
    Mutant(
        "dw-cols-per-row",
        _W,
        "cols_per_row.eq((dw.out_w - 1) * dw.stride + dw.kw)",
        "cols_per_row.eq(dw.out_w * dw.stride + dw.kw - 1)",
        "input columns per row wrong for stride > 1 (same for stride 1)",
    ),
    Mutant(
        "dw-wait-stride",
        _W,
        "m.d.sync += [wait.eq(dw.stride - 1), acc_ptr.eq(acc_ptr + 1)]",
        "m.d.sync += [wait.eq(dw.stride), acc_ptr.eq(acc_ptr + 1)]",
        "outputs every stride + 1 columns",
    ),
    Mutant(
        "dw-taps-mirrored",
        _W,
        "wl_a.eq(dw.kw - 1 - tj),",
        "wl_a.eq(tj),",
        "kernel columns mirrored (correlation vs convolution)",
    ),
    Mutant(
        "dw-max-outside-taps",
        _W,
        "inside = [[(i < dw.kh) & (a < dw.kw) for a in range(K)] for i in range(K)]",
        "inside = [[(i < dw.kh) | (a < dw.kw) for a in range(K)] for i in range(K)]",
        "a max pool also sees stale window rows or columns outside its kh x kw taps",
    ),
    Mutant(
        "dw-max-accumulate-ignored",
        _W,
        "kept = dw.accumulate & (accs[lane] > s2_sum[lane])",
        "kept = 0",
        "max with accumulate overwrites ACC instead of keeping the larger value",
    ),
    Mutant(
        "dw-row-step",
        _W,
        "row_step.eq(dw.stride * dw.pitch),",
        "row_step.eq(dw.pitch),",
        "vertical stride ignored",
    ),
    # --- load unit
    Mutant(
        "load-pad-zero",
        _U,
        "line_data.eq(Cat(*[pad] * (widest // 8))),",
        "line_data.eq(0),",
        "padding lines are zeros, not the descriptor's pad value",
    ),
    Mutant(
        "load-done-early",
        _U,
        'with m.State("MOVE"), m.If(~walking & (in_flight == 0) & ~addrgen.busy):',
        'with m.State("MOVE"), m.If(~walking & ~addrgen.busy):',
        "LOAD retires before its last lines are written (an old bug, fixed)",
    ),
    Mutant(
        "load-into-acc",
        _U,
        "with m.If(desc.mem == isa.Mem.ACC):",
        "with m.If(desc.mem == isa.Mem.PARAM):",
        "a LOAD into ACC is not refused, a LOAD into PARAM is",
    ),
    Mutant(
        "store-transpose-bounds-kept",
        _S,
        "rows[r].eq(Mux(b_inside, lanes, 0)),",
        "rows[r].eq(lanes),",
        "a transposed line past the height bound keeps its stale accumulator, not zeros",
    ),
    Mutant(
        "store-transpose-columns-reversed",
        _S,
        "column = Cat(*(r[:8] for r in rows))",
        "column = Cat(*(r[:8] for r in reversed(rows)))",
        "each written column holds the block's rows in reverse order",
    ),
    Mutant(
        "store-transpose-short-drain",
        _S,
        "with m.If(drain_col == cols - 1):",
        "with m.If(drain_col == cols - 2):",
        "a block's last column is never written",
    ),
    Mutant(
        "store-transpose-any-run",
        _S,
        "| (insn.transpose & (inner != cols))",
        "| (insn.transpose & (inner == 0))",
        "a transposing store whose innermost loop is not cols lines is not refused",
    ),
    Mutant(
        "store-transpose-dram-bounded",
        _S,
        "addrgen.every_line.eq(insn.transpose),",
        "addrgen.every_line.eq(0),",
        "a transposed line outside the bounds is written without its DRAM check",
    ),
]

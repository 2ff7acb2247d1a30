"""Curated RTL mutants of control and the compute engines: tokens, fetch and dispatch, the GEMM,
line and window engines, the load unit (:mod:`mutation.rtl_mutants` collects them)."""

from __future__ import annotations

from mutation.table import Mutant

_S = "hdl_gen/store_unit.py"
_T = "hdl_gen/tokens.py"
_F = "hdl_gen/fetch.py"
_D = "hdl_gen/desc_fetch.py"
_X = "hdl_gen/accelerator.py"
_G = "hdl_gen/gemm_engine.py"
_L = "hdl_gen/line_engine.py"
_W = "hdl_gen/window_engine.py"
_U = "hdl_gen/load_unit.py"

CONTROL: list[Mutant] = [
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
        "room = (~push_prev | unit.deps.room_prev) & (",
        "room = (~push_prev | unit.deps.room_next) & (",
        "a push to the previous queue waits for room in the next queue",
    ),
    Mutant(
        "frame-push-swapped",
        _T,
        "unit.deps.push_prev.eq(push_prev),",
        "unit.deps.push_prev.eq(push_next),",
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
        "self._fail(m, blocked_for == DEADLOCK_CYCLES, isa.ErrorCode.DEADLOCK, waiting_index)",
        "self._fail(m, blocked_for == DEADLOCK_CYCLES, isa.ErrorCode.WATCHDOG, waiting_index)",
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
        "issue.overwrite.eq(~accumulate & st_first_k)",
        "issue.overwrite.eq(~accumulate)",
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
        "m.d.sync += [block.eq(block + 1), act_base.eq(act_base + insn.act_k_stride)]",
        "m.d.sync += [block.eq(block + 1), act_base.eq(act_base + insn.act_k_stride + 1)]",
        "the next k block's (a CONV's channel block's) activations start one line late",
    ),
    Mutant(
        "conv-row-step-no-stride",
        _G,
        "row_step.eq(tile_pitch * stride),",
        "row_step.eq(tile_pitch),",
        "a CONV's next output row starts one input row down, not `stride` rows",
    ),
    Mutant(
        "conv-tap-column-next-row",
        _G,
        "m.d.sync += act_base.eq(tap_base + 1)",
        "m.d.sync += act_base.eq(tap_base + pitch)",
        "a CONV's next tap column reads channel block 0 one input row down, not one pixel right",
    ),
    Mutant(
        "conv-pitch-out-w-times-stride",
        _G,
        "tile_pitch = isa.window_span(out_w, kw, stride)",
        "tile_pitch = out_w * stride",
        "a CONV's row pitch is out_w*stride, not (out_w - 1)*stride + kw (same for a GEMM)",
    ),
    Mutant(
        "conv-accumulate-from-gemm-bit",
        _G,
        "accumulate = Mux(is_conv, conv.accumulate, gemm.accumulate)",
        "accumulate = gemm.accumulate",
        "a CONV's accumulate read at GEMM's bit (bit 1 of CONV's kw) instead of its own",
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
        "array-bank-one-cycle-early",
        "hdl_gen/systolic_array.py",
        "m.d.comb += pe.bank_in.eq(delayed[1 + r + col])",
        "m.d.comb += pe.bank_in.eq(delayed[r + col])",
        "a PE switches weight banks one cycle before the new tile's first activation",
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
        "load-token-at-retire",
        _U,
        "m.d.comb += frame.deferred.eq(frame.insn.load.opcode == isa.Opcode.LOAD)",
        "m.d.comb += frame.deferred.eq(0)",
        "a LOAD pushes its token when its lines are requested, before they land (and again then)",
    ),
    Mutant(
        "load-sync-before-landing",
        _U,
        """with m.If(in_flight == 0):
                        m.d.comb += frame.done.eq(1)""",
        """with m.If(1):
                        m.d.comb += frame.done.eq(1)""",
        "a LOAD-queue SYNC hands over its token while the lines before it are still on the way",
    ),
    Mutant(
        "load-token-without-room",
        _U,
        "room = ~head.push | self.deps.room_next",
        "room = ~head.push | 1",
        "a landing line pushes its LOAD's token into a full counter (tokens lost)",
    ),
    Mutant(
        "deadlock-while-landing",
        _X,
        "& ~load.landing",
        "& 1",
        "DEADLOCK while lines are still landing (a stalled DRAM is no deadlock)",
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
        "| (insn.transpose & (inner != c.cols))",
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

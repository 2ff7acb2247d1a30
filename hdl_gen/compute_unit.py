"""Compute unit: executes GEMM on the systolic array, ACCUM and POOL on the accumulators."""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import Out

from arch import isa
from arch.config import AccelConfig
from arch.isa import MAX_SHIFT
from hdl_gen.load_unit import param_line_bits, write_port
from hdl_gen.requant import requantize
from hdl_gen.store_unit import param_view, read_port
from hdl_gen.systolic_array import SystolicArray
from hdl_gen.tokens import ErrorLatch, UnitFrame, unit_signature


class ComputeUnit(wiring.Component):
    """GEMM streams ``m`` activation rows per weight tile through the array while the next
    tile's weights load into the other bank (a tile costs max(m, rows + cols) cycles at worst,
    ``m`` when m is large), and read-modify-writes the results into ACC. ACCUM and POOL process
    one line per cycle.

    Attributes
    ----------
    act, wgt, param : Out(read port)
    acc_rd : Out(read port), acc_wr : Out(write port)
    array_active, weight_load : Out(1)
        Perf events: a row entered the array; a weight row was written.
    """

    def __init__(self, config: AccelConfig) -> None:
        self.config = c = config
        super().__init__(
            unit_signature(
                {
                    "act": Out(read_port(16, c.act_line_bytes * 8)),
                    "wgt": Out(read_port(16, c.wgt_line_bytes * 8)),
                    "param": Out(read_port(16, param_line_bits(c))),
                    "acc_rd": Out(read_port(16, c.acc_line_bytes * 8)),
                    "acc_wr": Out(write_port(16, c.acc_line_bytes * 8)),
                    "array_active": Out(1),
                    "weight_load": Out(1),
                }
            )
        )

    def elaborate(self, platform: object) -> Module:
        m = Module()
        c = self.config
        frame = UnitFrame(self, m)
        errors = ErrorLatch(self, m)
        m.submodules.array = array = SystolicArray(c)
        acc_line = data.ArrayLayout(signed(c.acc_bits), c.cols)
        act_line = data.ArrayLayout(signed(c.in_bits), c.rows)
        acts = data.View(act_line, self.act.data)
        accs = data.View(acc_line, self.acc_rd.data)
        params = param_view(self.param.data, c)

        opcode = frame.insn.load.opcode
        gemm, accum, pool = frame.insn.gemm, frame.insn.accum, frame.insn.pool
        done = Signal()
        m.d.comb += frame.done.eq(done)

        def over(address, limit: int):
            return address >= limit

        # ---- GEMM ---------------------------------------------------------------------------
        # Weight loader (wl_*) and row streamer (st_*) walk the same tile order (k outer, j
        # inner); bank b holds tile t when t % 2 == b.
        loaded = Signal(2)  # bank holds a tile not yet fully streamed
        drain = [Signal(range(c.cols + 2), name=f"drain{b}") for b in range(2)]
        free = [~loaded[b] & (drain[b] == 0) for b in range(2)]
        wl_active, wl_bank, wl_row, wl_tiles = Signal(), Signal(), Signal(range(c.rows)), Signal(20)
        wl_addr = Signal(17)
        st_active, st_bank, st_i = Signal(), Signal(), Signal(12)
        st_k, st_j, st_tiles = Signal(10), Signal(10), Signal(20)
        st_act_base, st_acc_base = Signal(17), Signal(17)
        total_tiles = Signal(20)
        w_write, w_row, w_bank = Signal(), Signal(range(c.rows)), Signal()

        # Metadata of each row in flight through the array: does it count, where it goes.
        meta = data.StructLayout({"valid": 1, "acc": 16, "overwrite": 1})
        issue = Signal(meta)
        feed_valid, feed_bank = Signal(), Signal()
        pipeline = [issue]
        for stage in range(1 + array.latency):
            nxt = Signal(meta, name=f"meta{stage}")
            m.d.sync += nxt.eq(pipeline[-1])
            pipeline.append(nxt)
        out_meta = pipeline[-1]  # aligned with array.out
        m.d.sync += [feed_valid.eq(issue.valid), feed_bank.eq(st_bank)]
        m.d.comb += [
            array.a.eq(Mux(feed_valid, self.act.data, 0)),
            array.bank.eq(feed_bank),
            array.w_en.eq(w_write),
            array.w_row.eq(w_row),
            array.w_bank.eq(w_bank),
            array.w_data.eq(self.wgt.data),
            self.array_active.eq(issue.valid),
            self.weight_load.eq(w_write),
        ]
        in_flight = Signal(range(array.latency + 4))
        gemm_running = Signal()

        # Accumulator read-modify-write at the array output (read now, write next cycle).
        rmw_valid, rmw_acc, rmw_overwrite = Signal(), Signal(16), Signal()
        rmw_out = Signal(acc_line)
        m.d.sync += [
            rmw_valid.eq(out_meta.valid),
            rmw_acc.eq(out_meta.acc),
            rmw_overwrite.eq(out_meta.overwrite),
            rmw_out.eq(array.out),
        ]
        gemm_sum = Signal(acc_line)
        for col in range(c.cols):
            base = Mux(rmw_overwrite, 0, accs[col])
            m.d.comb += gemm_sum[col].eq(base + rmw_out[col])

        # ---- ACCUM / POOL -----------------------------------------------------------------------
        ln_valid, ln_acc, ln_last, ln_first = Signal(), Signal(16), Signal(), Signal()
        running = Signal(acc_line)
        accum_value = Signal(acc_line)
        bad_shift = Signal()
        for col in range(c.cols):
            entry = params[col]
            value = Mux(accum.accumulate, accs[col], 0)
            value = value + Mux(accum.use_bias, entry.bias, 0)
            residual = requantize(acts[col], entry.res_mult, entry.res_shift)
            value = value + Mux(accum.use_res, residual, 0)
            m.d.comb += accum_value[col].eq(value)
        for col in range(c.cols):
            bad_shift = bad_shift | (params[col].res_shift > MAX_SHIFT)
        errors.raise_(
            ln_valid & (opcode == isa.Opcode.ACCUM) & accum.use_res & bad_shift,
            isa.ErrorCode.BAD_FIELD,
        )

        pool_value = Signal(acc_line)
        is_max = pool.mode == isa.PoolMode.MAX
        for col in range(c.cols):
            line_value = acts[col].as_signed()

            def combine(previous, value=line_value):
                return Mux(is_max, Mux(value > previous, value, previous), previous + value)

            # A window's first line starts the reduction, or merges into ACC with accumulate=1.
            first = Mux(pool.accumulate, combine(accs[col]), line_value)
            m.d.comb += pool_value[col].eq(Mux(ln_first, first, combine(running[col])))
        with m.If(ln_valid):
            m.d.sync += running.eq(pool_value)

        # ACC write port: GEMM read-modify-write, ACCUM or POOL results.
        with m.If(rmw_valid):
            m.d.comb += [
                self.acc_wr.en.eq(1),
                self.acc_wr.addr.eq(rmw_acc),
                self.acc_wr.data.eq(gemm_sum),
            ]
        with m.Elif(ln_valid & (opcode == isa.Opcode.ACCUM)):
            m.d.comb += [
                self.acc_wr.en.eq(1),
                self.acc_wr.addr.eq(ln_acc),
                self.acc_wr.data.eq(accum_value),
            ]
        with m.Elif(ln_valid & ln_last):
            m.d.comb += [
                self.acc_wr.en.eq(1),
                self.acc_wr.addr.eq(ln_acc),
                self.acc_wr.data.eq(pool_value),
            ]

        # ---- sequencing ---------------------------------------------------------------------
        # Registers shared by ACCUM and POOL.
        j, i, w = Signal(10), Signal(12), Signal(8)
        act_ptr, acc_ptr, act_base, acc_base = Signal(17), Signal(17), Signal(17), Signal(17)
        gemm_tiles = gemm.k_iter * gemm.n_iter

        with m.FSM(name="compute"):
            with m.State("IDLE"), m.If(frame.start):
                m.next = "BEGIN"
            with m.State("BEGIN"), m.Switch(opcode):
                with m.Case(isa.Opcode.GEMM):
                    zero = (gemm.m == 0) | (gemm.k_iter == 0) | (gemm.n_iter == 0)
                    overlap = (gemm.n_iter > 1) & (gemm.acc_n_stride < gemm.m)
                    with m.If(zero | overlap):
                        errors.raise_(1, isa.ErrorCode.BAD_FIELD)
                        m.next = "STOPPED"
                    with m.Else():
                        m.d.sync += [
                            total_tiles.eq(gemm_tiles),
                            wl_active.eq(1),
                            wl_bank.eq(0),
                            wl_row.eq(0),
                            wl_tiles.eq(0),
                            wl_addr.eq(gemm.wgt_addr),
                            st_active.eq(1),
                            st_bank.eq(0),
                            st_i.eq(0),
                            st_k.eq(0),
                            st_j.eq(0),
                            st_tiles.eq(0),
                            st_act_base.eq(gemm.act_addr),
                            st_acc_base.eq(gemm.acc_addr),
                            gemm_running.eq(1),
                        ]
                        m.next = "GEMM"
                with m.Case(isa.Opcode.ACCUM):
                    with m.If((accum.m == 0) | (accum.n_iter == 0)):
                        errors.raise_(1, isa.ErrorCode.BAD_FIELD)
                        m.next = "STOPPED"
                    with m.Else():
                        m.d.sync += [
                            j.eq(0),
                            i.eq(0),
                            act_ptr.eq(accum.act_addr),
                            acc_ptr.eq(accum.acc_addr),
                            act_base.eq(accum.act_addr),
                            acc_base.eq(accum.acc_addr),
                        ]
                        m.next = "ACCUM"
                with m.Case(isa.Opcode.POOL):
                    with m.If((pool.m == 0) | (pool.n_iter == 0) | (pool.window == 0)):
                        errors.raise_(1, isa.ErrorCode.BAD_FIELD)
                        m.next = "STOPPED"
                    with m.Else():
                        m.d.sync += [
                            j.eq(0),
                            i.eq(0),
                            w.eq(0),
                            act_ptr.eq(pool.act_addr),
                            acc_ptr.eq(pool.acc_addr),
                            act_base.eq(pool.act_addr),
                            acc_base.eq(pool.acc_addr),
                        ]
                        m.next = "POOL"
                with m.Default():  # SYNC
                    m.d.comb += done.eq(1)
                    m.next = "IDLE"

            with m.State("GEMM"):
                finished = ~wl_active & ~st_active & (in_flight == 0) & ~rmw_valid
                with m.If(finished):
                    m.d.sync += gemm_running.eq(0)
                    m.d.comb += done.eq(1)
                    m.next = "IDLE"

            with m.State("ACCUM"):
                m.d.sync += ln_valid.eq(0)
                act_address = act_ptr
                acc_address = acc_ptr
                bad = over(acc_address, c.acc_lines) | (
                    accum.use_res & over(act_address, c.act_lines)
                )
                bad = bad | over(accum.param_addr + j, c.param_lines)
                with m.If(bad):
                    errors.raise_(1, isa.ErrorCode.LOCAL_RANGE)
                    m.next = "STOPPED"
                with m.Elif(~self.halt):
                    m.d.comb += [
                        self.act.addr.eq(act_address),
                        self.act.en.eq(1),
                        self.acc_rd.addr.eq(acc_address),
                        self.acc_rd.en.eq(1),
                        self.param.addr.eq(accum.param_addr + j),
                        self.param.en.eq(1),
                    ]
                    m.d.sync += [ln_valid.eq(1), ln_acc.eq(acc_address)]
                    last_i = i == accum.m - 1
                    with m.If(last_i):
                        m.d.sync += [
                            i.eq(0),
                            j.eq(j + 1),
                            act_base.eq(act_base + accum.act_n_stride),
                            acc_base.eq(acc_base + accum.acc_n_stride),
                            act_ptr.eq(act_base + accum.act_n_stride),
                            acc_ptr.eq(acc_base + accum.acc_n_stride),
                        ]
                        with m.If(j == accum.n_iter - 1):
                            m.next = "FLUSH"
                    with m.Else():
                        m.d.sync += [i.eq(i + 1), act_ptr.eq(act_ptr + 1), acc_ptr.eq(acc_ptr + 1)]

            with m.State("POOL"):
                m.d.sync += ln_valid.eq(0)
                acc_address = acc_ptr
                bad = over(act_ptr, c.act_lines) | over(acc_address, c.acc_lines)
                with m.If(bad):
                    errors.raise_(1, isa.ErrorCode.LOCAL_RANGE)
                    m.next = "STOPPED"
                with m.Elif(~self.halt):
                    m.d.comb += [
                        self.act.addr.eq(act_ptr),
                        self.act.en.eq(1),
                        self.acc_rd.addr.eq(acc_address),
                        self.acc_rd.en.eq(w == 0),
                    ]
                    last_w = w == pool.window - 1
                    m.d.sync += [
                        ln_valid.eq(1),
                        ln_acc.eq(acc_address),
                        ln_first.eq(w == 0),
                        ln_last.eq(last_w),
                        act_ptr.eq(act_ptr + 1),
                    ]
                    with m.If(~last_w):
                        m.d.sync += w.eq(w + 1)
                    with m.Elif(i == pool.m - 1):
                        m.d.sync += [
                            w.eq(0),
                            i.eq(0),
                            j.eq(j + 1),
                            act_base.eq(act_base + pool.act_n_stride),
                            acc_base.eq(acc_base + pool.acc_n_stride),
                            act_ptr.eq(act_base + pool.act_n_stride),
                            acc_ptr.eq(acc_base + pool.acc_n_stride),
                        ]
                        with m.If(j == pool.n_iter - 1):
                            m.next = "FLUSH"
                    with m.Else():
                        m.d.sync += [w.eq(0), i.eq(i + 1), acc_ptr.eq(acc_ptr + 1)]

            with m.State("FLUSH"):  # the last ACCUM/POOL line is written this cycle
                m.d.sync += [ln_valid.eq(0), ln_last.eq(0)]
                m.d.comb += done.eq(1)
                m.next = "IDLE"
            with m.State("STOPPED"):
                pass

        # ---- GEMM engines (run while gemm_running) ---------------------------------------------
        # Weight loader: read WGT rows of the next tile into its bank when the bank is free.
        wl_can = wl_active & Mux(wl_bank, free[1], free[0]) & ~self.halt
        wl_bad = over(wl_addr, c.wgt_lines)
        with m.If(gemm_running & wl_active & wl_bad):
            errors.raise_(1, isa.ErrorCode.LOCAL_RANGE)
        m.d.sync += [w_write.eq(0)]
        with m.If(wl_can & ~wl_bad):
            m.d.comb += [self.wgt.addr.eq(wl_addr), self.wgt.en.eq(1)]
            m.d.sync += [
                w_write.eq(1),
                w_row.eq(wl_row),
                w_bank.eq(wl_bank),
                wl_addr.eq(wl_addr + 1),
            ]
            with m.If(wl_row == c.rows - 1):
                m.d.sync += [wl_row.eq(0), wl_bank.eq(~wl_bank), wl_tiles.eq(wl_tiles + 1)]
                with m.If(wl_tiles == total_tiles - 1):
                    m.d.sync += wl_active.eq(0)
            with m.Else():
                m.d.sync += wl_row.eq(wl_row + 1)
        # A bank counts as loaded once its last row has been written.
        for b in range(2):
            with m.If(w_write & (w_bank == b) & (w_row == c.rows - 1)):
                m.d.sync += loaded[b].eq(1)

        # Streamer: one activation row per cycle from a loaded bank.
        ready_bank = Mux(st_bank, loaded[1], loaded[0])
        act_address = st_act_base + st_i
        acc_address = st_acc_base + st_i
        st_bad = over(act_address, c.act_lines) | over(acc_address, c.acc_lines)
        with m.If(gemm_running & st_active & ready_bank & st_bad):
            errors.raise_(1, isa.ErrorCode.LOCAL_RANGE)
        st_go = st_active & ready_bank & ~st_bad & ~self.halt
        m.d.comb += [
            issue.valid.eq(st_go),
            issue.acc.eq(acc_address),
            issue.overwrite.eq(~gemm.accumulate & (st_k == 0)),
        ]
        with m.If(st_go):
            m.d.comb += [self.act.addr.eq(act_address), self.act.en.eq(1)]
            with m.If(st_i == gemm.m - 1):
                m.d.sync += st_i.eq(0)
                for b in range(2):
                    with m.If(st_bank == b):
                        m.d.sync += [loaded[b].eq(0), drain[b].eq(c.cols + 1)]
                m.d.sync += [st_bank.eq(~st_bank), st_tiles.eq(st_tiles + 1)]
                with m.If(st_j == gemm.n_iter - 1):
                    m.d.sync += [
                        st_j.eq(0),
                        st_k.eq(st_k + 1),
                        st_act_base.eq(st_act_base + gemm.act_k_stride),
                        st_acc_base.eq(gemm.acc_addr),
                    ]
                with m.Else():
                    m.d.sync += [st_j.eq(st_j + 1), st_acc_base.eq(st_acc_base + gemm.acc_n_stride)]
                with m.If(st_tiles == total_tiles - 1):
                    m.d.sync += st_active.eq(0)
            with m.Else():
                m.d.sync += st_i.eq(st_i + 1)
        for b in range(2):
            with m.If((drain[b] != 0) & ~(st_go & (st_i == gemm.m - 1) & (st_bank == b))):
                m.d.sync += drain[b].eq(drain[b] - 1)

        # Rows in the array (issued, not yet written back).
        m.d.sync += in_flight.eq(in_flight + issue.valid - rmw_valid)
        # GEMM RMW reads ACC at the array output.
        with m.If(out_meta.valid):
            m.d.comb += [self.acc_rd.addr.eq(out_meta.acc), self.acc_rd.en.eq(1)]
        return m

"""GEMM engine: feeds the systolic array and read-modify-writes its results into ACC."""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from arch import isa
from arch.config import AccelConfig
from hdl_gen.local_ports import POINTER_BITS, read_port, write_port
from hdl_gen.systolic_array import array_latency, array_signature

# Counters as wide as the GEMM fields they count to: rows (m), k blocks, n blocks, and tiles
# (k_iter * n_iter: k_iter width + n_iter width).
_FIELD = isa.GEMM.leaf_by_path
I_BITS, K_BITS, J_BITS = (_FIELD[name].width for name in ("m", "k_iter", "n_iter"))
TILE_BITS = K_BITS + J_BITS


class GemmEngine(wiring.Component):
    """Runs one GEMM: streams ``m`` activation rows per weight tile through the array while the
    next tile's weights load into the other bank (a tile costs max(m, rows + cols) cycles at
    worst, ``m`` when m is large), and read-modify-writes the results into ACC.

    Four parts run concurrently: the weight loader (``wl_*``) reads a tile's WGT rows into a free
    bank; the row streamer (``st_*``) sends one ACT row per cycle from a loaded bank; a metadata
    pipeline as long as the array carries each row's ACC address alongside it; and the
    read-modify-write reads ACC as a row leaves the array and writes the sum a cycle later.

    Attributes
    ----------
    insn : In(GEMM layout)
        The instruction, stable from ``start`` until ``done``.
    bad_fields : Out(1)
        ``insn`` cannot run (a zero count, or n blocks overlapping in ACC): BAD_FIELD.
    start : In(1)
        Begin ``insn`` (only when ``bad_fields`` is low).
    done : Out(1)
        Strobe: every row has been written back.
    halt : In(1)
        Freeze (the accelerator stopped on an error).
    error : Out(1)
        A WGT, ACT or ACC address out of range (LOCAL_RANGE); that part stops.
    act, wgt, acc_rd : Out(read port)
    acc_wr : Out(write port)
    array : Out(flipped systolic array signature)
        Drives the :class:`~hdl_gen.systolic_array.SystolicArray`.
    array_active, weight_load : Out(1)
        Perf events: a row entered the array; a weight row was written.
    """

    def __init__(self, config: AccelConfig) -> None:
        self.config = c = config
        super().__init__(
            {
                "insn": In(isa.GEMM.layout),
                "bad_fields": Out(1),
                "start": In(1),
                "done": Out(1),
                "halt": In(1),
                "error": Out(1),
                "act": Out(read_port(c.act_line_bytes * 8)),
                "wgt": Out(read_port(c.wgt_line_bytes * 8)),
                "acc_rd": Out(read_port(c.acc_line_bytes * 8)),
                "acc_wr": Out(write_port(c.acc_line_bytes * 8)),
                "array": Out(array_signature(c).flip()),
                "array_active": Out(1),
                "weight_load": Out(1),
            }
        )

    def elaborate(self, platform: object) -> Module:
        m = Module()
        c = self.config
        gemm, array = self.insn, self.array
        latency = array_latency(c)
        acc_line = data.ArrayLayout(signed(c.acc_bits), c.cols)
        accs = data.View(acc_line, self.acc_rd.data)

        zero = (gemm.m == 0) | (gemm.k_iter == 0) | (gemm.n_iter == 0)
        overlap = (gemm.n_iter > 1) & (gemm.acc_n_stride < gemm.m)
        m.d.comb += self.bad_fields.eq(zero | overlap)

        # Weight loader (wl_*) and row streamer (st_*) walk the same tile order (k outer, j
        # inner); bank b holds tile t when t % 2 == b.
        loaded = Signal(2)  # bank holds a tile not yet fully streamed
        drain = [Signal(range(c.cols + 2), name=f"drain{b}") for b in range(2)]
        free = [~loaded[b] & (drain[b] == 0) for b in range(2)]
        wl_active, wl_bank, wl_row = Signal(), Signal(), Signal(range(c.rows))
        wl_tiles, wl_addr = Signal(TILE_BITS), Signal(POINTER_BITS)
        st_active, st_bank, st_i = Signal(), Signal(), Signal(I_BITS)
        st_k, st_j, st_tiles = Signal(K_BITS), Signal(J_BITS), Signal(TILE_BITS)
        st_act_base, st_acc_base = Signal(POINTER_BITS), Signal(POINTER_BITS)
        total_tiles = Signal(TILE_BITS)
        w_write, w_row, w_bank = Signal(), Signal(range(c.rows)), Signal()

        # Metadata of each row in flight through the array: does it count, where it goes.
        meta = data.StructLayout({"valid": 1, "acc": isa.LOCAL_ADDR_BITS, "overwrite": 1})
        issue = Signal(meta)
        feed_valid, feed_bank = Signal(), Signal()
        pipeline = [issue]
        for stage in range(1 + latency):
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
        in_flight = Signal(range(latency + 4))
        running = Signal()

        # Accumulator read-modify-write at the array output (read now, write next cycle).
        rmw_valid, rmw_acc, rmw_overwrite = Signal(), Signal(isa.LOCAL_ADDR_BITS), Signal()
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
        with m.If(rmw_valid):
            m.d.comb += [
                self.acc_wr.en.eq(1),
                self.acc_wr.addr.eq(rmw_acc),
                self.acc_wr.data.eq(gemm_sum),
            ]

        with m.If(self.start):
            m.d.sync += [
                total_tiles.eq(gemm.k_iter * gemm.n_iter),
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
                running.eq(1),
            ]
        finished = ~wl_active & ~st_active & (in_flight == 0) & ~rmw_valid
        m.d.comb += self.done.eq(running & finished)
        with m.If(self.done):
            m.d.sync += running.eq(0)

        # Weight loader: read WGT rows of the next tile into its bank when the bank is free.
        wl_can = wl_active & Mux(wl_bank, free[1], free[0]) & ~self.halt
        wl_bad = wl_addr >= c.wgt_lines
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
        st_bad = (act_address >= c.act_lines) | (acc_address >= c.acc_lines)
        m.d.comb += self.error.eq(
            (running & wl_active & wl_bad) | (running & st_active & ready_bank & st_bad)
        )
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
        # The read half of the read-modify-write: ACC as the row leaves the array.
        with m.If(out_meta.valid):
            m.d.comb += [self.acc_rd.addr.eq(out_meta.acc), self.acc_rd.en.eq(1)]
        return m

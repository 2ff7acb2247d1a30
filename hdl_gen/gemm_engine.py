"""GEMM engine: feeds the systolic array (GEMM and CONV) and read-modify-writes its results into
ACC."""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from arch import isa
from arch.config import AccelConfig
from hdl_gen.local_ports import POINTER_BITS, read_port, write_port
from hdl_gen.systolic_array import array_latency, array_signature

# Counters as wide as the GEMM fields they count to: rows (m), k blocks, n blocks, and tiles
# (kernel taps * k_iter * n_iter: the widths of kh, kw, k_iter and n_iter).
_FIELD, _CONV = isa.GEMM.leaf_by_path, isa.CONV.leaf_by_path
I_BITS, K_BITS, J_BITS = (_FIELD[name].width for name in ("m", "k_iter", "n_iter"))
TAP_BITS = _CONV["kh"].width
TILE_BITS = 2 * TAP_BITS + K_BITS + J_BITS
# A CONV's ACT address is a sum of walked offsets (channel block, tap, output row and pixel),
# each checked in range before it grows further: a few carry bits keep the sum from wrapping.
ACT_POINTER_BITS = isa.LOCAL_ADDR_BITS + 4
# The fields GEMM and CONV share sit at the same bits: the engine reads them from either view.
_SHARED = ("wgt_addr", "act_addr", "acc_addr", "m", "k_iter", "n_iter", "act_k_stride")
assert all(isa.GEMM.layout[n].offset == isa.CONV.layout[n].offset for n in _SHARED)


class GemmEngine(wiring.Component):
    """Runs one GEMM or CONV: streams ``m`` activation rows per weight tile through the array
    while the next tile's weights load into the other bank (a tile costs max(m, rows + cols)
    cycles at worst, ``m`` when m is large), and read-modify-writes the results into ACC.

    A CONV is a GEMM whose k blocks walk kernel taps and channel blocks of an input tile and
    whose rows walk output pixels (``out_w`` a row, ``stride`` apart); a GEMM is the walk with
    one tap, ``m`` pixels a row and stride 1.

    Four parts run concurrently: the weight loader (``wl_*``) reads a tile's WGT rows into a free
    bank; the row streamer (``st_*``) sends one ACT row per cycle from a loaded bank; a metadata
    pipeline as long as the array carries each row's ACC address alongside it; and the
    read-modify-write reads ACC as a row leaves the array and writes the sum a cycle later.

    Attributes
    ----------
    insn : In(GEMM layout)
        The instruction, stable from ``start`` until ``done``.
    conv : In(CONV layout)
        The same instruction word seen as a CONV.
    is_conv : In(1)
        The instruction is a CONV.
    bad_fields : Out(1)
        The instruction cannot run (a zero count, or n blocks overlapping in ACC): BAD_FIELD.
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
                "conv": In(isa.CONV.layout),
                "is_conv": In(1),
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

        conv, is_conv = self.conv, self.is_conv
        zero = (gemm.m == 0) | (gemm.k_iter == 0) | (gemm.n_iter == 0)
        conv_zero = (conv.out_w == 0) | (conv.kh == 0) | (conv.kw == 0) | (conv.stride == 0)
        overlap = (gemm.n_iter > 1) & (gemm.acc_n_stride < gemm.m)
        m.d.comb += self.bad_fields.eq(zero | Mux(is_conv, conv_zero, overlap))
        # The walk, GEMM or CONV: a GEMM is one tap, m pixels a row, stride 1.
        acc_n_stride = Mux(is_conv, gemm.m, gemm.acc_n_stride)
        accumulate = Mux(is_conv, conv.accumulate, gemm.accumulate)
        out_w = Mux(is_conv, conv.out_w, gemm.m)
        kh, kw = Mux(is_conv, conv.kh, 1), Mux(is_conv, conv.kw, 1)
        stride = Mux(is_conv, conv.stride, 1)

        # Weight loader (wl_*) and row streamer (st_*) walk the same tile order (k outer, j
        # inner); bank b holds tile t when t % 2 == b.
        loaded = Signal(2)  # bank holds a tile not yet fully streamed
        drain = [Signal(range(c.cols + 2), name=f"drain{b}") for b in range(2)]
        free = [~loaded[b] & (drain[b] == 0) for b in range(2)]
        wl_active, wl_bank, wl_row = Signal(), Signal(), Signal(range(c.rows))
        wl_tiles, wl_addr = Signal(TILE_BITS), Signal(POINTER_BITS)
        st_active, st_bank, st_i = Signal(), Signal(), Signal(I_BITS)
        st_j, st_tiles = Signal(J_BITS), Signal(TILE_BITS)
        st_act_base, st_acc_base = Signal(ACT_POINTER_BITS), Signal(POINTER_BITS)
        total_tiles = Signal(TILE_BITS)
        # The CONV walk: channel block and tap column of the k block; the ACT lines of tap
        # (ky, kx) and of tap (ky, 0); the output pixel's column and its offset in the tile.
        st_block, st_kx, st_first_k = Signal(K_BITS), Signal(TAP_BITS), Signal()
        st_tap_base, st_row_base = Signal(ACT_POINTER_BITS), Signal(ACT_POINTER_BITS)
        st_x, st_pixel, st_line = Signal(I_BITS), Signal(ACT_POINTER_BITS), Signal(ACT_POINTER_BITS)
        pitch = Signal(ACT_POINTER_BITS)  # ACT lines per input row
        row_step = Signal(ACT_POINTER_BITS)  # ACT lines from one output row's pixel 0 to the next
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
            tile_pitch = isa.window_span(out_w, kw, stride)
            m.d.sync += [
                total_tiles.eq(kh * kw * gemm.k_iter * gemm.n_iter),
                pitch.eq(tile_pitch),
                row_step.eq(tile_pitch * stride),
                wl_active.eq(1),
                wl_bank.eq(0),
                wl_row.eq(0),
                wl_tiles.eq(0),
                wl_addr.eq(gemm.wgt_addr),
                st_active.eq(1),
                st_bank.eq(0),
                st_i.eq(0),
                st_first_k.eq(1),
                st_block.eq(0),
                st_kx.eq(0),
                st_j.eq(0),
                st_tiles.eq(0),
                st_x.eq(0),
                st_pixel.eq(0),
                st_line.eq(0),
                st_act_base.eq(gemm.act_addr),
                st_tap_base.eq(gemm.act_addr),
                st_row_base.eq(gemm.act_addr),
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
        act_address = st_act_base + st_pixel
        acc_address = st_acc_base + st_i
        st_bad = (act_address >= c.act_lines) | (acc_address >= c.acc_lines)
        m.d.comb += self.error.eq(
            (running & wl_active & wl_bad) | (running & st_active & ready_bank & st_bad)
        )
        st_go = st_active & ready_bank & ~st_bad & ~self.halt
        m.d.comb += [
            issue.valid.eq(st_go),
            issue.acc.eq(acc_address),
            issue.overwrite.eq(~accumulate & st_first_k),
        ]
        with m.If(st_go):
            m.d.comb += [self.act.addr.eq(act_address), self.act.en.eq(1)]
            with m.If(st_i == gemm.m - 1):
                m.d.sync += [st_i.eq(0), st_x.eq(0), st_pixel.eq(0), st_line.eq(0)]
                for b in range(2):
                    with m.If(st_bank == b):
                        m.d.sync += [loaded[b].eq(0), drain[b].eq(c.cols + 1)]
                m.d.sync += [st_bank.eq(~st_bank), st_tiles.eq(st_tiles + 1)]
                with m.If(st_j == gemm.n_iter - 1):
                    m.d.sync += [st_j.eq(0), st_first_k.eq(0), st_acc_base.eq(gemm.acc_addr)]
                    self._next_k_block(
                        m, gemm, st_block, st_kx, kw, pitch, st_act_base, st_tap_base, st_row_base
                    )
                with m.Else():
                    m.d.sync += [st_j.eq(st_j + 1), st_acc_base.eq(st_acc_base + acc_n_stride)]
                with m.If(st_tiles == total_tiles - 1):
                    m.d.sync += st_active.eq(0)
            with m.Elif(st_x == out_w - 1):  # the next output row
                m.d.sync += [
                    st_i.eq(st_i + 1),
                    st_x.eq(0),
                    st_line.eq(st_line + row_step),
                    st_pixel.eq(st_line + row_step),
                ]
            with m.Else():
                m.d.sync += [st_i.eq(st_i + 1), st_x.eq(st_x + 1), st_pixel.eq(st_pixel + stride)]
        for b in range(2):
            with m.If((drain[b] != 0) & ~(st_go & (st_i == gemm.m - 1) & (st_bank == b))):
                m.d.sync += drain[b].eq(drain[b] - 1)

        # Rows in the array (issued, not yet written back).
        m.d.sync += in_flight.eq(in_flight + issue.valid - rmw_valid)
        # The read half of the read-modify-write: ACC as the row leaves the array.
        with m.If(out_meta.valid):
            m.d.comb += [self.acc_rd.addr.eq(out_meta.acc), self.acc_rd.en.eq(1)]
        return m

    @staticmethod
    def _next_k_block(m, insn, block, kx, kw, pitch, act_base, tap_base, row_base) -> None:
        """Advance the k walk (taps outer, channel blocks inner) to the next k block: the next
        channel block of this tap, else channel block 0 of the next tap in the row, else of the
        next kernel row. A GEMM has one tap: only channel blocks (its k blocks) advance."""
        with m.If(block != insn.k_iter - 1):
            m.d.sync += [block.eq(block + 1), act_base.eq(act_base + insn.act_k_stride)]
        with m.Elif(kx != kw - 1):
            m.d.sync += [block.eq(0), kx.eq(kx + 1), tap_base.eq(tap_base + 1)]
            m.d.sync += act_base.eq(tap_base + 1)
        with m.Else():
            m.d.sync += [block.eq(0), kx.eq(0)]
            m.d.sync += [row_base.eq(row_base + pitch), tap_base.eq(row_base + pitch)]
            m.d.sync += act_base.eq(row_base + pitch)

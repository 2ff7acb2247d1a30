"""GEMM engine: feeds the systolic array (GEMM and CONV) and read-modify-writes its results into
ACC."""

from __future__ import annotations

from typing import NamedTuple

from amaranth import Module, Mux, Signal, Value, signed
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

    Four parts run concurrently, one method each: the weight loader (``wl_*``) reads a tile's WGT
    rows into a free bank; the row streamer (``st_*``) sends one ACT row per cycle from a loaded
    bank; a metadata pipeline as long as the array carries each row's ACC address alongside it;
    and the read-modify-write reads ACC as a row leaves the array and writes the sum a cycle
    later.

    Attributes
    ----------
    insn : In(GEMM layout)
        The instruction, stable from ``start`` until ``streamed``.
    conv : In(CONV layout)
        The same instruction word seen as a CONV.
    is_conv : In(1)
        The instruction is a CONV.
    bad_fields : Out(1)
        The instruction cannot run (a zero count, or n blocks overlapping in ACC): BAD_FIELD.
    start : In(1)
        Begin ``insn`` (only when ``bad_fields`` is low).
    owes_token : In(1)
        The instruction's token to STORE rides on its last row (``token_due``).
    streamed : Out(1)
        Every weight row and activation row of the instruction has been read: it retires, and
        the next GEMM or CONV may start while its rows drain (``isa.gemm_drain_cycles``), the
        one before's ACC writes going on behind them.
    token_due : Out(1)
        Strobe: the last row of an instruction with ``owes_token`` has been written to ACC.
    draining : Out(1)
        Rows are still on their way to ACC (or walks active): another engine must wait.
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
                "owes_token": In(1),
                "streamed": Out(1),
                "token_due": Out(1),
                "draining": Out(1),
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
        geometry = self._decode(m)
        walk = _Walk(self.config)
        issue, out_meta = self._metadata(m, walk)
        in_flight = Signal(range(array_latency(self.config) + 4))
        running = Signal()
        rmw_valid = self._read_modify_write(m, out_meta)
        self._start(m, walk, geometry, running)
        finished = ~walk.wl_active & ~walk.st_active & (in_flight == 0) & ~rmw_valid
        m.d.comb += [
            self.streamed.eq(running & ~walk.wl_active & ~walk.st_active),
            self.draining.eq(~finished),
        ]
        with m.If(running & finished & ~self.start):  # every row written back
            m.d.sync += running.eq(0)
        wl_bad = self._load_weights(m, walk)
        self._stream_rows(m, walk, geometry, issue, running, wl_bad)
        # Rows in the array (issued, not yet written back).
        m.d.sync += in_flight.eq(in_flight + issue.valid - rmw_valid)
        # The read half of the read-modify-write: ACC as the row leaves the array.
        with m.If(out_meta.valid):
            m.d.comb += [self.acc_rd.addr.eq(out_meta.acc), self.acc_rd.en.eq(1)]
        return m

    def _decode(self, m: Module) -> _Geometry:
        """Drive ``bad_fields``; the walk's geometry, GEMM or CONV: a GEMM is one tap, m pixels
        a row, stride 1."""
        gemm, conv, is_conv = self.insn, self.conv, self.is_conv
        zero = (gemm.m == 0) | (gemm.k_iter == 0) | (gemm.n_iter == 0)
        conv_zero = (conv.out_w == 0) | (conv.kh == 0) | (conv.kw == 0) | (conv.stride == 0)
        overlap = (gemm.n_iter > 1) & (gemm.acc_n_stride < gemm.m)
        m.d.comb += self.bad_fields.eq(zero | Mux(is_conv, conv_zero, overlap))
        acc_n_stride = Mux(is_conv, gemm.m, gemm.acc_n_stride)
        accumulate = Mux(is_conv, conv.accumulate, gemm.accumulate)
        out_w = Mux(is_conv, conv.out_w, gemm.m)
        kh, kw = Mux(is_conv, conv.kh, 1), Mux(is_conv, conv.kw, 1)
        stride = Mux(is_conv, conv.stride, 1)
        return _Geometry(acc_n_stride, accumulate, out_w, kh, kw, stride)

    def _metadata(self, m: Module, walk: _Walk) -> tuple[Signal, Signal]:
        """The metadata of each row in flight through the array (does it count, where it goes),
        and the array's inputs; returns the row issued now and the metadata of the row leaving
        the array."""
        array = self.array
        meta = data.StructLayout(
            {"valid": 1, "acc": isa.LOCAL_ADDR_BITS, "overwrite": 1, "owes": 1}
        )
        issue = Signal(meta)
        feed_valid, feed_bank = Signal(), Signal()
        pipeline = [issue]
        for stage in range(1 + array_latency(self.config)):
            nxt = Signal(meta, name=f"meta{stage}")
            m.d.sync += nxt.eq(pipeline[-1])
            pipeline.append(nxt)
        out_meta = pipeline[-1]  # aligned with array.out
        m.d.sync += [feed_valid.eq(issue.valid), feed_bank.eq(walk.st_bank)]
        m.d.comb += [
            array.a.eq(Mux(feed_valid, self.act.data, 0)),
            array.bank.eq(feed_bank),
            array.w_en.eq(walk.w_write),
            array.w_row.eq(walk.w_row),
            array.w_bank.eq(walk.w_bank),
            array.w_data.eq(self.wgt.data),
            array.w_transposed.eq(~self.is_conv & self.insn.transpose_w),
            self.array_active.eq(issue.valid),
            self.weight_load.eq(walk.w_write),
        ]
        return issue, out_meta

    def _read_modify_write(self, m: Module, out_meta: Signal) -> Signal:
        """The write half of the accumulator read-modify-write at the array output (ACC is read
        as a row leaves the array, the sum written the next cycle); returns its valid."""
        c = self.config
        acc_line = data.ArrayLayout(signed(c.acc_bits), c.cols)
        accs = data.View(acc_line, self.acc_rd.data)
        rmw_valid, rmw_acc, rmw_overwrite = Signal(), Signal(isa.LOCAL_ADDR_BITS), Signal()
        rmw_owes, rmw_out = Signal(), Signal(acc_line)
        m.d.sync += [
            rmw_valid.eq(out_meta.valid),
            rmw_acc.eq(out_meta.acc),
            rmw_overwrite.eq(out_meta.overwrite),
            rmw_owes.eq(out_meta.owes),
            rmw_out.eq(self.array.out),
        ]
        m.d.comb += self.token_due.eq(rmw_valid & rmw_owes)
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
        return rmw_valid

    def _start(self, m: Module, walk: _Walk, geometry: _Geometry, running: Signal) -> None:
        """On ``start``: the tile count and the CONV's pitches, both walks at their first tile
        - in the bank after the one before's last tile (free while that one drains)."""
        gemm = self.insn
        out_w, kh, kw, stride = geometry.out_w, geometry.kh, geometry.kw, geometry.stride
        with m.If(self.start):
            tile_pitch = isa.window_span(out_w, kw, stride)
            m.d.sync += [
                walk.total_tiles.eq(kh * kw * gemm.k_iter * gemm.n_iter),
                walk.pitch.eq(tile_pitch),
                walk.row_step.eq(tile_pitch * stride),
                walk.wl_active.eq(1),
                walk.wl_row.eq(0),
                walk.wl_tiles.eq(0),
                walk.wl_addr.eq(gemm.wgt_addr),
                walk.st_active.eq(1),
                walk.st_i.eq(0),
                walk.st_first_k.eq(1),
                walk.st_block.eq(0),
                walk.st_kx.eq(0),
                walk.st_j.eq(0),
                walk.st_tiles.eq(0),
                walk.st_x.eq(0),
                walk.st_pixel.eq(0),
                walk.st_line.eq(0),
                walk.st_act_base.eq(gemm.act_addr),
                walk.st_tap_base.eq(gemm.act_addr),
                walk.st_row_base.eq(gemm.act_addr),
                walk.st_acc_base.eq(gemm.acc_addr),
                running.eq(1),
            ]

    def _load_weights(self, m: Module, walk: _Walk) -> Value:
        """The weight loader: reads WGT rows of the next tile into its bank when the bank is
        free; returns its range error (a WGT address past the memory)."""
        c = self.config
        wl_active, wl_bank, wl_row = walk.wl_active, walk.wl_bank, walk.wl_row
        wl_tiles, wl_addr, free = walk.wl_tiles, walk.wl_addr, walk.free
        w_write, w_row, w_bank = walk.w_write, walk.w_row, walk.w_bank
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
                with m.If(wl_tiles == walk.total_tiles - 1):
                    m.d.sync += wl_active.eq(0)
            with m.Else():
                m.d.sync += wl_row.eq(wl_row + 1)
        # A bank counts as loaded once its last row has been written.
        for b in range(2):
            with m.If(w_write & (w_bank == b) & (w_row == c.rows - 1)):
                m.d.sync += walk.loaded[b].eq(1)
        return wl_bad

    def _stream_rows(
        self,
        m: Module,
        walk: _Walk,
        geometry: _Geometry,
        issue: Signal,
        running: Signal,
        wl_bad: Value,
    ) -> None:
        """The row streamer: one activation row per cycle from a loaded bank; a tile's last
        row frees the bank once it has drained from the array. Drives ``error``."""
        c, gemm = self.config, self.insn
        loaded, drain, st_bank, st_i = walk.loaded, walk.drain, walk.st_bank, walk.st_i
        st_first_k, accumulate = walk.st_first_k, geometry.accumulate
        ready_bank = Mux(st_bank, loaded[1], loaded[0])
        act_address = walk.st_act_base + walk.st_pixel
        acc_address = walk.st_acc_base + st_i
        st_bad = (act_address >= c.act_lines) | (acc_address >= c.acc_lines)
        m.d.comb += self.error.eq(
            (running & walk.wl_active & wl_bad) | (running & walk.st_active & ready_bank & st_bad)
        )
        st_go = walk.st_active & ready_bank & ~st_bad & ~self.halt
        last_row = (st_i == gemm.m - 1) & (walk.st_tiles == walk.total_tiles - 1)
        m.d.comb += [
            issue.valid.eq(st_go),
            issue.acc.eq(acc_address),
            issue.overwrite.eq(~accumulate & st_first_k),
            issue.owes.eq(self.owes_token & last_row),
        ]
        with m.If(st_go):
            m.d.comb += [self.act.addr.eq(act_address), self.act.en.eq(1)]
            with m.If(st_i == gemm.m - 1):
                m.d.sync += [st_i.eq(0), walk.st_x.eq(0), walk.st_pixel.eq(0), walk.st_line.eq(0)]
                for b in range(2):
                    with m.If(st_bank == b):
                        m.d.sync += [loaded[b].eq(0), drain[b].eq(c.cols + 1)]
                m.d.sync += [st_bank.eq(~st_bank), walk.st_tiles.eq(walk.st_tiles + 1)]
                self._next_tile(m, walk, geometry)
            with m.Elif(walk.st_x == geometry.out_w - 1):  # the next output row
                m.d.sync += [
                    st_i.eq(st_i + 1),
                    walk.st_x.eq(0),
                    walk.st_line.eq(walk.st_line + walk.row_step),
                    walk.st_pixel.eq(walk.st_line + walk.row_step),
                ]
            with m.Else():
                m.d.sync += [
                    st_i.eq(st_i + 1),
                    walk.st_x.eq(walk.st_x + 1),
                    walk.st_pixel.eq(walk.st_pixel + geometry.stride),
                ]
        for b in range(2):
            with m.If((drain[b] != 0) & ~(st_go & (st_i == gemm.m - 1) & (st_bank == b))):
                m.d.sync += drain[b].eq(drain[b] - 1)

    def _next_tile(self, m: Module, walk: _Walk, geometry: _Geometry) -> None:
        """After a tile's last row: the next n block, else (first n block) the next k block;
        the streamer stops after the last tile."""
        gemm = self.insn
        with m.If(walk.st_j == gemm.n_iter - 1):
            m.d.sync += [walk.st_j.eq(0), walk.st_first_k.eq(0), walk.st_acc_base.eq(gemm.acc_addr)]
            self._next_k_block(
                m,
                gemm,
                walk.st_block,
                walk.st_kx,
                geometry.kw,
                walk.pitch,
                walk.st_act_base,
                walk.st_tap_base,
                walk.st_row_base,
            )
        with m.Else():
            m.d.sync += [
                walk.st_j.eq(walk.st_j + 1),
                walk.st_acc_base.eq(walk.st_acc_base + geometry.acc_n_stride),
            ]
        with m.If(walk.st_tiles == walk.total_tiles - 1):
            m.d.sync += walk.st_active.eq(0)

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


class _Geometry(NamedTuple):
    """A GEMM's or CONV's walk (a GEMM is one tap, ``m`` pixels a row, stride 1)."""

    acc_n_stride: Value
    accumulate: Value
    out_w: Value
    kh: Value
    kw: Value
    stride: Value


class _Walk:
    """The registers of the tile walk. The weight loader (``wl_*``) and the row streamer
    (``st_*``) walk the same tile order (k outer, j inner); bank b holds tile t when
    t % 2 == b. ``w_*``: the WGT row read last cycle, written into the array now."""

    def __init__(self, c: AccelConfig) -> None:
        # A signal is named after the variable it is assigned to; those assigned in a row (to
        # attributes) are not, and the names given below keep the generated Verilog unchanged.
        self.loaded = loaded = Signal(2)  # bank holds a tile not yet fully streamed
        self.drain = drain = [Signal(range(c.cols + 2), name=f"drain{b}") for b in range(2)]
        self.free = [~loaded[b] & (drain[b] == 0) for b in range(2)]
        rows = range(c.rows)
        self.wl_active, self.wl_bank, self.wl_row = Signal(), Signal(), Signal(rows, name="wl_row")
        self.wl_tiles, self.wl_addr = Signal(TILE_BITS), Signal(POINTER_BITS, name="wl_addr")
        self.st_active, self.st_bank, self.st_i = Signal(), Signal(), Signal(I_BITS, name="st_i")
        self.st_j, self.st_tiles = Signal(J_BITS), Signal(TILE_BITS, name="st_tiles")
        self.st_act_base, self.st_acc_base = (
            Signal(ACT_POINTER_BITS),
            Signal(POINTER_BITS, name="st_acc_base"),
        )
        self.total_tiles = Signal(TILE_BITS)
        # The CONV walk: channel block and tap column of the k block; the ACT lines of tap
        # (ky, kx) and of tap (ky, 0); the output pixel's column and its offset in the tile.
        self.st_block, self.st_kx, self.st_first_k = (
            Signal(K_BITS),
            Signal(TAP_BITS),
            Signal(name="st_first_k"),
        )
        self.st_tap_base, self.st_row_base = (
            Signal(ACT_POINTER_BITS),
            Signal(ACT_POINTER_BITS, name="st_row_base"),
        )
        self.st_x, self.st_pixel, self.st_line = (
            Signal(I_BITS),
            Signal(ACT_POINTER_BITS),
            Signal(ACT_POINTER_BITS, name="st_line"),
        )
        self.pitch = Signal(ACT_POINTER_BITS)  # ACT lines per input row
        self.row_step = Signal(
            ACT_POINTER_BITS
        )  # ACT lines from an output row's pixel 0 to the next
        self.w_write, self.w_row, self.w_bank = Signal(), Signal(rows), Signal(name="w_bank")

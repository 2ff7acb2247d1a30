"""Window engine: DWCONV, a depthwise convolution of up to 3x3 taps, one input column per cycle."""

from __future__ import annotations

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from arch import isa
from arch.config import AccelConfig
from hdl_gen.local_ports import POINTER_BITS, param_line_bits, param_view, read_port, write_port

K = isa.DW_KERNEL_MAX  # window rows and columns the engine holds
_FIELD = isa.DWCONV.leaf_by_path
ROW_BITS = _FIELD["out_h"].width
# Input columns of one output row: (out_w - 1) * stride + kw.
COL_BITS = (((1 << _FIELD["out_w"].width) - 1) * _FIELD["stride"].hi + _FIELD["kw"].hi).bit_length()
# ACT and ACC addresses a DWCONV can reach before its range check stops it: 16-bit base plus
# up to (out_h*stride + kh) rows of a 16-bit pitch - wide enough never to wrap.
WIDE_BITS = 32


class WindowEngine(wiring.Component):
    """Runs one DWCONV: loads the ``kh*kw`` tap weights (one WGT line each) and the bias into
    registers, then streams the input image column by column - per cycle the lines of the
    ``kh`` input rows of one column, through three ACT read ports - keeping the last three
    columns in a window register. Every ``stride`` columns (once ``kw`` are in) each channel
    lane c computes ``sum(act[i][j][c] * wgt[i][j][c])`` over the 3x3 window (9 * cols
    multipliers, taps outside ``kh x kw`` have zero weights) and the next cycle writes
    ``(acc if accumulate) + (bias if use_bias) + sum`` into its ACC line. With ``max`` (a max
    pool) a lane takes the largest tap inside ``kh x kw`` instead, and the larger of it and the
    ACC line with ``accumulate``.

    A stride-1 DWCONV produces one output (``cols`` channels) per cycle after a ``kw - 1``
    column warm-up per output row: 9/16 of the MACs of a ``cols x cols`` array.

    Attributes
    ----------
    insn : In(DWCONV layout)
        The instruction, stable from ``start`` until ``done``.
    bad_fields : Out(1)
        ``insn`` cannot run (a zero size, kernel dimension or stride): BAD_FIELD.
    start : In(1)
        Begin ``insn`` (only when ``bad_fields`` is low).
    done : Out(1)
        Strobe: the last output is written this cycle.
    halt : In(1)
        Freeze (the accelerator stopped on an error).
    error : Out(1)
        A WGT, PARAM, ACT or ACC address out of range (LOCAL_RANGE); the engine stops.
    act : Out(read port) x 3 (``act``, ``act1``, ``act2``)
        ACT read ports for window rows 0, 1, 2.
    wgt, param, acc_rd : Out(read port)
    acc_wr : Out(write port)
    macs : Out(range)
        Perf event: multiply-accumulates of the output computed this cycle (``kh*kw*cols``).
    """

    def __init__(self, config: AccelConfig) -> None:
        self.config = c = config
        super().__init__(
            {
                "insn": In(isa.DWCONV.layout),
                "bad_fields": Out(1),
                "start": In(1),
                "done": Out(1),
                "halt": In(1),
                "error": Out(1),
                "act": Out(read_port(c.act_line_bytes * 8)),
                "act1": Out(read_port(c.act_line_bytes * 8)),
                "act2": Out(read_port(c.act_line_bytes * 8)),
                "wgt": Out(read_port(c.wgt_line_bytes * 8)),
                "param": Out(read_port(param_line_bits(c))),
                "acc_rd": Out(read_port(c.acc_line_bytes * 8)),
                "acc_wr": Out(write_port(c.acc_line_bytes * 8)),
                "macs": Out(range(K * K * c.cols + 1)),
            }
        )

    def elaborate(self, platform: object) -> Module:
        m = Module()
        dw = self.insn
        zero = (dw.out_w == 0) | (dw.out_h == 0) | (dw.kh == 0) | (dw.kw == 0)
        m.d.comb += self.bad_fields.eq(zero | (dw.stride == 0) | (dw.max & dw.use_bias))
        regs = _Registers(self.config)
        self._load_taps(m, regs)
        window_sum = self._window(m, regs)
        self._write_back(m, regs, window_sum)
        with m.FSM(name="window"):
            with m.State("IDLE"), m.If(self.start):
                self._begin(m, regs)
                m.next = "WEIGHTS"
            with m.State("WEIGHTS"):
                self._read_tap(m, regs)
            with m.State("STREAM"):
                self._stream_column(m, regs)
            with m.State("DRAIN"):  # the last column's products (s1), then its write (s2)
                m.d.sync += regs.s1_valid.eq(0)
                with m.If(~regs.s1_valid):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
            with m.State("STOPPED"):
                pass
        return m

    def _load_taps(self, m: Module, regs: _Registers) -> None:
        """Write the tap (and bias) read in the previous cycle into its register."""
        c = self.config
        wgts = data.View(data.ArrayLayout(signed(c.w_bits), c.cols), self.wgt.data)
        params = param_view(self.param.data, c)
        m.d.sync += [regs.wl_valid.eq(0), regs.bias_valid.eq(0)]
        with m.If(regs.wl_valid):
            for i in range(K):
                for a in range(K):
                    with m.If((regs.wl_i == i) & (regs.wl_a == a)):
                        m.d.sync += regs.weight[i][a].eq(wgts)
        with m.If(regs.bias_valid):
            for lane in range(c.cols):
                m.d.sync += regs.bias[lane].eq(params[lane].bias)

    def _window(self, m: Module, regs: _Registers) -> Signal:
        """Per lane the weighted sum of the window or (max) its largest tap inside kh x kw."""
        c, dw = self.config, self.insn
        act_line = data.ArrayLayout(signed(c.in_bits), c.cols)
        acts = [data.View(act_line, port.data) for port in (self.act, self.act1, self.act2)]
        weight, older = regs.weight, regs.older
        window_sum = Signal(data.ArrayLayout(signed(c.acc_bits), c.cols))
        inside = [[(i < dw.kh) & (a < dw.kw) for a in range(K)] for i in range(K)]
        for lane in range(c.cols):
            terms, taps = [], []
            for i in range(K):
                column = [acts[i][lane], older[i][0][lane], older[i][1][lane]]
                terms += [weight[i][a][lane] * column[a] for a in range(K)]
                taps += [Mux(inside[i][a], column[a], -(1 << (c.in_bits - 1))) for a in range(K)]
            total = terms[0]
            for term in terms[1:]:
                total = total + term
            # A signal per step: an expression used twice per step would be copied per level.
            largest = Signal(signed(c.in_bits), name=f"max{lane}_0")
            m.d.comb += largest.eq(taps[0])
            for t, tap in enumerate(taps[1:], 1):
                bigger = Signal(signed(c.in_bits), name=f"max{lane}_{t}")
                m.d.comb += bigger.eq(Mux(tap > largest, tap, largest))
                largest = bigger
            m.d.comb += window_sum[lane].eq(Mux(dw.max, largest, total))
        return window_sum

    def _write_back(self, m: Module, regs: _Registers, window_sum: Signal) -> None:
        """The pipeline after the window: s1 shifts the window's columns and reads the ACC line,
        s2 combines the sum with it (and the bias) and writes it."""
        c, dw = self.config, self.insn
        act_line = data.ArrayLayout(signed(c.in_bits), c.cols)
        acts = [data.View(act_line, port.data) for port in (self.act, self.act1, self.act2)]
        accs = data.View(data.ArrayLayout(signed(c.acc_bits), c.cols), self.acc_rd.data)
        s1_valid, s1_out, s1_acc = regs.s1_valid, regs.s1_out, regs.s1_acc
        s2_valid, s2_acc, s2_sum, bias = regs.s2_valid, regs.s2_acc, regs.s2_sum, regs.bias
        with m.If(s1_valid):
            for i in range(K):
                m.d.sync += [regs.older[i][1].eq(regs.older[i][0]), regs.older[i][0].eq(acts[i])]
        m.d.sync += [
            s2_valid.eq(s1_valid & s1_out),
            s2_acc.eq(s1_acc),
            s2_sum.eq(window_sum),
        ]
        with m.If(s1_valid & s1_out):
            m.d.comb += [self.acc_rd.addr.eq(s1_acc), self.acc_rd.en.eq(dw.accumulate)]
            m.d.comb += self.macs.eq(Mux(dw.max, 0, dw.kh * dw.kw * c.cols))
        result = Signal(accs.shape())
        for lane in range(c.cols):
            value = Mux(dw.accumulate, accs[lane], 0) + Mux(dw.use_bias, bias[lane], 0)
            kept = dw.accumulate & (accs[lane] > s2_sum[lane])  # max: the larger of the two
            combined = Mux(dw.max, Mux(kept, accs[lane], s2_sum[lane]), value + s2_sum[lane])
            m.d.comb += result[lane].eq(combined)
        with m.If(s2_valid):
            m.d.comb += [
                self.acc_wr.en.eq(1),
                self.acc_wr.addr.eq(s2_acc),
                self.acc_wr.data.eq(result),
            ]

    def _range_error(self, m: Module) -> None:
        m.d.comb += self.error.eq(1)
        m.next = "STOPPED"

    def _begin(self, m: Module, regs: _Registers) -> None:
        """IDLE, on ``start``: clear the taps, both walks at their start."""
        dw = self.insn
        m.d.sync += [regs.weight[i][a].eq(0) for i in range(K) for a in range(K)]
        m.d.sync += [
            regs.ti.eq(0),
            regs.tj.eq(0),
            regs.wgt_ptr.eq(dw.wgt_addr),
            regs.oy.eq(0),
            regs.x.eq(0),
            regs.wait.eq(dw.kw - 1),
            regs.cols_per_row.eq((dw.out_w - 1) * dw.stride + dw.kw),
            regs.row_base.eq(dw.act_addr),
            regs.col_ptr.eq(dw.act_addr),
            regs.row_step.eq(dw.stride * dw.pitch),
            regs.acc_ptr.eq(dw.acc_addr),
        ]

    def _read_tap(self, m: Module, regs: _Registers) -> None:
        """WEIGHTS: read tap (ti, tj)'s WGT line (and with the first, the bias), for its
        register next cycle; after the last tap, stream."""
        c, dw = self.config, self.insn
        ti, tj, wgt_ptr = regs.ti, regs.tj, regs.wgt_ptr
        first = (ti == 0) & (tj == 0)
        bad = (wgt_ptr >= c.wgt_lines) | (first & dw.use_bias & (dw.param_addr >= c.param_lines))
        with m.If(bad):
            self._range_error(m)
        with m.Elif(~self.halt):
            m.d.comb += [self.wgt.addr.eq(wgt_ptr), self.wgt.en.eq(1)]
            with m.If(first & dw.use_bias):
                m.d.comb += [self.param.addr.eq(dw.param_addr), self.param.en.eq(1)]
                m.d.sync += regs.bias_valid.eq(1)
            m.d.sync += [
                regs.wl_valid.eq(1),
                regs.wl_i.eq(ti),
                regs.wl_a.eq(dw.kw - 1 - tj),
                wgt_ptr.eq(wgt_ptr + 1),
            ]
            with m.If(tj == dw.kw - 1):
                m.d.sync += [tj.eq(0), ti.eq(ti + 1)]
                with m.If(ti == dw.kh - 1):
                    m.next = "STREAM"
            with m.Else():
                m.d.sync += tj.eq(tj + 1)

    def _stream_column(self, m: Module, regs: _Registers) -> None:
        """STREAM: read column x of output row oy's input rows (``pitch`` ACT lines apart)
        into s1; every ``stride`` columns (once ``kw`` are in) it produces an output."""
        c, dw = self.config, self.insn
        ports = [self.act, self.act1, self.act2]
        x, wait, acc_ptr, row_base = regs.x, regs.wait, regs.acc_ptr, regs.row_base
        addresses = [regs.col_ptr + i * dw.pitch for i in range(K)]
        producing = wait == 0
        m.d.sync += regs.s1_valid.eq(0)
        bad_act = 0
        for i in range(K):
            bad_act = bad_act | ((i < dw.kh) & (addresses[i] >= c.act_lines))
        bad_acc = producing & (acc_ptr >= c.acc_lines)
        with m.If(bad_act | bad_acc):
            self._range_error(m)
        with m.Elif(~self.halt):
            for i, port in enumerate(ports):
                m.d.comb += [port.addr.eq(addresses[i]), port.en.eq(i < dw.kh)]
            m.d.sync += [regs.s1_valid.eq(1), regs.s1_out.eq(producing), regs.s1_acc.eq(acc_ptr)]
            with m.If(producing):
                m.d.sync += [wait.eq(dw.stride - 1), acc_ptr.eq(acc_ptr + 1)]
            with m.Else():
                m.d.sync += wait.eq(wait - 1)
            with m.If(x == regs.cols_per_row - 1):
                m.d.sync += [
                    x.eq(0),
                    wait.eq(dw.kw - 1),
                    regs.oy.eq(regs.oy + 1),
                    row_base.eq(row_base + regs.row_step),
                    regs.col_ptr.eq(row_base + regs.row_step),
                ]
                with m.If(regs.oy == dw.out_h - 1):
                    m.next = "DRAIN"
            with m.Else():
                m.d.sync += [x.eq(x + 1), regs.col_ptr.eq(regs.col_ptr + 1)]


class _Registers:
    """The engine's registers. Taps by window row i and column age a (0: the column read this
    cycle): tap (i, j) of the instruction sits at age kw-1-j, unused taps hold 0; the bias; the
    two previous columns of the window, per row. The weight loader's walk (tap (ti, tj) read
    now, written into (wl_i, wl_a) next cycle); the streamer's (column x of output row oy, rows
    ``pitch`` ACT lines apart). The pipeline: s1 = the column's ACT data arrives and the
    products are summed; s2 = the ACC line (read in s1) is combined and written."""

    def __init__(self, c: AccelConfig) -> None:
        lanes = c.cols
        act_line = data.ArrayLayout(signed(c.in_bits), lanes)
        wgt_line = data.ArrayLayout(signed(c.w_bits), lanes)
        acc_line = data.ArrayLayout(signed(c.acc_bits), lanes)
        self.weight = [[Signal(wgt_line, name=f"w{i}_{a}") for a in range(K)] for i in range(K)]
        self.bias = Signal(acc_line)
        self.older = [[Signal(act_line, name=f"col{i}_{a}") for a in (1, 2)] for i in range(K)]
        # A signal is named after the variable it is assigned to; those assigned in a row (to
        # attributes) are not, and the names given below keep the generated Verilog unchanged.
        self.ti, self.tj = Signal(2), Signal(2, name="tj")
        self.wgt_ptr = Signal(POINTER_BITS)
        self.wl_valid, self.wl_i, self.wl_a = Signal(), Signal(2), Signal(2, name="wl_a")
        self.bias_valid = Signal()
        self.oy, self.x = Signal(ROW_BITS), Signal(COL_BITS, name="x")
        self.cols_per_row = Signal(COL_BITS)
        self.wait = Signal(2)  # columns until the next output (an output when 0)
        self.row_base, self.col_ptr = Signal(WIDE_BITS), Signal(WIDE_BITS)
        self.row_step = Signal(WIDE_BITS)  # stride * pitch
        self.acc_ptr = Signal(WIDE_BITS)
        self.s1_valid, self.s1_out = Signal(), Signal(name="s1_out")
        self.s1_acc = Signal(isa.LOCAL_ADDR_BITS)
        self.s2_valid = Signal()
        self.s2_acc = Signal(isa.LOCAL_ADDR_BITS)
        self.s2_sum = Signal(acc_line)

"""Line engine: ACCUM and POOL, one accumulator line per cycle."""

from __future__ import annotations

from amaranth import Module, Mux, Signal, Value, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from arch import isa
from arch.config import AccelConfig
from arch.isa import MAX_SHIFT
from hdl_gen.local_ports import POINTER_BITS, param_line_bits, param_view, read_port, write_port
from hdl_gen.requant import requantize


def _width(path: str) -> int:
    """Bits of field ``path`` of ACCUM and POOL (a counter they share fits both)."""
    formats = (isa.ACCUM, isa.POOL)
    return max(fmt.leaf_by_path[path].width for fmt in formats if path in fmt.leaf_by_path)


class LineEngine(wiring.Component):
    """Runs one ACCUM or POOL: walks its n blocks and lines, reading one ACT line (and for
    ACCUM the ACC and PARAM lines) per cycle and writing the result line to ACC a cycle later.

    ACCUM adds the PARAM bias and the requantized residual (an ACT line, times the block's gate
    line with use_gate) to, or in place of, the ACC line. With use_gate each n block starts with
    one cycle that reads its gate line into a register. POOL reduces ``window`` consecutive ACT
    lines (max or sum) into one ACC line, merging with the ACC line's value when ``accumulate``
    is set.

    Attributes
    ----------
    insn : In(INSTRUCTION)
        The ACCUM or POOL instruction (by its opcode), stable from ``start`` until ``done``.
    bad_fields : Out(1)
        ``insn`` cannot run (a zero count): BAD_FIELD.
    start : In(1)
        Begin ``insn`` (only when ``bad_fields`` is low).
    done : Out(1)
        Strobe: the last line is written this cycle.
    halt : In(1)
        Freeze (the accelerator stopped on an error).
    error : Out(1), error_code : Out(ErrorCode)
        An address out of range (LOCAL_RANGE; the walk stops) or a residual shift above
        MAX_SHIFT (BAD_FIELD).
    act, acc_rd, param : Out(read port)
    acc_wr : Out(write port)
    """

    def __init__(self, config: AccelConfig) -> None:
        self.config = c = config
        super().__init__(
            {
                "insn": In(isa.INSTRUCTION),
                "bad_fields": Out(1),
                "start": In(1),
                "done": Out(1),
                "halt": In(1),
                "error": Out(1),
                "error_code": Out(isa.ErrorCode),
                "act": Out(read_port(c.act_line_bytes * 8)),
                "acc_rd": Out(read_port(c.acc_line_bytes * 8)),
                "param": Out(read_port(param_line_bits(c))),
                "acc_wr": Out(write_port(c.acc_line_bytes * 8)),
            }
        )

    def elaborate(self, platform: object) -> Module:
        m = Module()
        accum, pool = self.insn.accum, self.insn.pool
        is_accum = self.insn.load.opcode == isa.Opcode.ACCUM

        with m.If(is_accum):
            gate_without_res = accum.use_gate & ~accum.use_res
            m.d.comb += self.bad_fields.eq((accum.m == 0) | (accum.n_iter == 0) | gate_without_res)
        with m.Else():
            m.d.comb += self.bad_fields.eq((pool.m == 0) | (pool.n_iter == 0) | (pool.window == 0))

        walk = _Walk()
        accum_value, gate_arriving = self._accum_value(m, walk, is_accum)
        pool_value = self._pool_value(m, walk)
        # Every ACCUM line is written; a POOL line when it ends its window.
        with m.If(walk.ln_valid & is_accum):
            m.d.comb += [
                self.acc_wr.en.eq(1),
                self.acc_wr.addr.eq(walk.ln_acc),
                self.acc_wr.data.eq(accum_value),
            ]
        with m.Elif(walk.ln_valid & walk.ln_last):
            m.d.comb += [
                self.acc_wr.en.eq(1),
                self.acc_wr.addr.eq(walk.ln_acc),
                self.acc_wr.data.eq(pool_value),
            ]

        with m.FSM(name="line"):
            with m.State("IDLE"), m.If(self.start):
                self._begin(m, walk, is_accum)
            with m.State("GATE"):  # read n block j's gate line
                m.d.sync += walk.ln_valid.eq(0)
                gate_address = accum.gate_addr + walk.j
                with m.If(gate_address >= self.config.act_lines):
                    self._range_error(m)
                with m.Elif(~self.halt):
                    m.d.comb += [self.act.addr.eq(gate_address), self.act.en.eq(1)]
                    m.d.sync += gate_arriving.eq(1)
                    m.next = "ACCUM"
            with m.State("ACCUM"):
                self._accum_line(m, walk)
            with m.State("POOL"):
                self._pool_line(m, walk)
            with m.State("FLUSH"):  # the last line is written this cycle
                m.d.sync += [walk.ln_valid.eq(0), walk.ln_last.eq(0)]
                m.d.comb += self.done.eq(1)
                m.next = "IDLE"
            with m.State("STOPPED"):
                pass
        return m

    def _accum_value(self, m: Module, walk: _Walk, is_accum: Value) -> tuple[Signal, Signal]:
        """ACCUM: (ACC or 0) + bias + requantized (gated) residual, per column; a residual
        shift above MAX_SHIFT is BAD_FIELD. The gate line is read in the GATE state and latched
        as it arrives, a cycle later (returned: the line, and the strobe of the gate's arrival)."""
        c = self.config
        acts = data.View(data.ArrayLayout(signed(c.in_bits), c.rows), self.act.data)
        accs = data.View(data.ArrayLayout(signed(c.acc_bits), c.cols), self.acc_rd.data)
        params = param_view(self.param.data, c)
        accum = self.insn.accum
        gate, gate_arriving = Signal(acts.shape()), Signal()
        m.d.sync += gate_arriving.eq(0)
        with m.If(gate_arriving):
            m.d.sync += gate.eq(acts)
        accum_value = Signal(accs.shape())
        bad_shift = Signal()
        for col in range(c.cols):
            entry = params[col]
            value = Mux(accum.accumulate, accs[col], 0)
            value = value + Mux(accum.use_bias, entry.bias, 0)
            gated = acts[col] * Mux(accum.use_gate, gate[col], 1)
            residual = requantize(m, gated, entry.res_mult, entry.res_shift, f"res_{col}")
            value = value + Mux(accum.use_res, residual, 0)
            m.d.comb += accum_value[col].eq(value)
        for col in range(c.cols):
            bad_shift = bad_shift | (params[col].res_shift > MAX_SHIFT)
        with m.If(walk.ln_valid & is_accum & accum.use_res & bad_shift):
            m.d.comb += [self.error.eq(1), self.error_code.eq(isa.ErrorCode.BAD_FIELD)]
        return accum_value, gate_arriving

    def _pool_value(self, m: Module, walk: _Walk) -> Signal:
        """POOL: the running max or sum of the window's lines, per column."""
        c = self.config
        acts = data.View(data.ArrayLayout(signed(c.in_bits), c.rows), self.act.data)
        accs = data.View(data.ArrayLayout(signed(c.acc_bits), c.cols), self.acc_rd.data)
        pool = self.insn.pool
        running = Signal(accs.shape())
        pool_value = Signal(accs.shape())
        is_max = pool.mode == isa.PoolMode.MAX
        for col in range(c.cols):
            line_value = acts[col].as_signed()

            def combine(previous, value=line_value):
                return Mux(is_max, Mux(value > previous, value, previous), previous + value)

            # A window's first line starts the reduction, or merges into ACC with accumulate=1.
            first = Mux(pool.accumulate, combine(accs[col]), line_value)
            m.d.comb += pool_value[col].eq(Mux(walk.ln_first, first, combine(running[col])))
        with m.If(walk.ln_valid):
            m.d.sync += running.eq(pool_value)
        return pool_value

    def _range_error(self, m: Module) -> None:
        m.d.comb += [self.error.eq(1), self.error_code.eq(isa.ErrorCode.LOCAL_RANGE)]
        m.next = "STOPPED"

    def _begin(self, m: Module, walk: _Walk, is_accum: Value) -> None:
        """IDLE, on ``start``: the walk at the first line of n block 0."""
        accum, pool = self.insn.accum, self.insn.pool
        j, i, w = walk.j, walk.i, walk.w
        act_ptr, acc_ptr, act_base, acc_base = walk.pointers
        with m.If(is_accum):
            m.d.sync += [
                j.eq(0),
                i.eq(0),
                act_ptr.eq(accum.act_addr),
                acc_ptr.eq(accum.acc_addr),
                act_base.eq(accum.act_addr),
                acc_base.eq(accum.acc_addr),
            ]
            with m.If(accum.use_gate):
                m.next = "GATE"
            with m.Else():
                m.next = "ACCUM"
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

    def _accum_line(self, m: Module, walk: _Walk) -> None:
        """ACCUM: read a line's ACT, ACC and PARAM lines; step to the next line or n block."""
        c = self.config
        accum = self.insn.accum
        j, i = walk.j, walk.i
        act_ptr, acc_ptr, act_base, acc_base = walk.pointers
        m.d.sync += walk.ln_valid.eq(0)
        param_address = accum.param_addr + j
        bad = (acc_ptr >= c.acc_lines) | (accum.use_res & (act_ptr >= c.act_lines))
        bad = bad | (param_address >= c.param_lines)
        with m.If(bad):
            self._range_error(m)
        with m.Elif(~self.halt):
            m.d.comb += [
                self.act.addr.eq(act_ptr),
                self.act.en.eq(1),
                self.acc_rd.addr.eq(acc_ptr),
                self.acc_rd.en.eq(1),
                self.param.addr.eq(param_address),
                self.param.en.eq(1),
            ]
            m.d.sync += [walk.ln_valid.eq(1), walk.ln_acc.eq(acc_ptr)]
            with m.If(i == accum.m - 1):
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
                with m.Elif(accum.use_gate):
                    m.next = "GATE"
            with m.Else():
                m.d.sync += [i.eq(i + 1), act_ptr.eq(act_ptr + 1), acc_ptr.eq(acc_ptr + 1)]

    def _pool_line(self, m: Module, walk: _Walk) -> None:
        """POOL: read a window's line (and, at its first line, the ACC line); step through the
        window, the lines and the n blocks."""
        c = self.config
        pool = self.insn.pool
        j, i, w = walk.j, walk.i, walk.w
        act_ptr, acc_ptr, act_base, acc_base = walk.pointers
        m.d.sync += walk.ln_valid.eq(0)
        with m.If((act_ptr >= c.act_lines) | (acc_ptr >= c.acc_lines)):
            self._range_error(m)
        with m.Elif(~self.halt):
            m.d.comb += [
                self.act.addr.eq(act_ptr),
                self.act.en.eq(1),
                self.acc_rd.addr.eq(acc_ptr),
                self.acc_rd.en.eq(w == 0),  # the ACC line merges into the first line
            ]
            last_w = w == pool.window - 1
            m.d.sync += [
                walk.ln_valid.eq(1),
                walk.ln_acc.eq(acc_ptr),
                walk.ln_first.eq(w == 0),
                walk.ln_last.eq(last_w),
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


class _Walk:
    """The walk - j over n blocks, i over lines (outputs), w over a POOL window, the ACT and
    ACC pointers and their n block bases - and the line read in the previous cycle (``ln_*``),
    whose results are computed and written now."""

    def __init__(self) -> None:
        # A signal is named after the variable it is assigned to; those assigned in a row (to
        # attributes) are not, and the names given below keep the generated Verilog unchanged.
        self.ln_valid, self.ln_acc = Signal(), Signal(isa.LOCAL_ADDR_BITS, name="ln_acc")
        # POOL: the window's last / first line
        self.ln_last, self.ln_first = Signal(), Signal(name="ln_first")
        self.j, self.i, self.w = (
            Signal(_width("n_iter")),
            Signal(_width("m")),
            Signal(_width("window"), name="w"),
        )
        act_ptr, acc_ptr = Signal(POINTER_BITS), Signal(POINTER_BITS, name="acc_ptr")
        act_base, acc_base = Signal(POINTER_BITS), Signal(POINTER_BITS, name="acc_base")
        self.pointers = act_ptr, acc_ptr, act_base, acc_base

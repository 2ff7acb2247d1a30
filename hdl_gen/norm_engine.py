"""Norm engine: NORM (LayerNorm, RMSNorm, masked Softmax per token row), one line per cycle."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from arch import isa, norm_ops
from arch.config import AccelConfig
from arch.isa import MAX_SHIFT, NormMode
from arch.isa.formats import NORM_RECIP_CYCLES, NORM_RSQRT_CYCLES
from hdl_gen.local_ports import param_line_bits, param_view, read_port, write_port
from hdl_gen.norm_scalar import SUM_BITS, V_BITS, NormScalar

_FIELD = isa.NORM.leaf_by_path
S1_BITS = 26  # signed sum of (x - zp) over at most 65 535 channels
S2_BITS = 33  # sum of (x - zp)**2
Z_BITS = 11  # x + mask, and the row maximum's "nothing yet" value below every z
NO_MAX = -(1 << (Z_BITS - 1))
EXP_A, EXP_B = norm_ops.EXP_POLY
MASKED_CODE = -128  # a mask line's code that masks its position
MIN_SHIFT = 8  # a norm's PARAM shift leaves Q8 outputs


class NormEngine(wiring.Component):
    """Runs one NORM (see :data:`arch.isa.NORM` and :mod:`arch.norm_ops`), row after row.

    Per row of ``k_iter`` ACT lines (``act_addr + k*m + i``):

    - LAYERNORM / RMSNORM: a statistics pass (one line per cycle; a ``rows``-lane adder tree
      adds ``x`` and ``x*x`` into the row sums; the PARAM shifts are checked), the row scalar
      of :class:`~hdl_gen.norm_scalar.NormScalar` (``NORM_RSQRT_CYCLES``), and a normalize
      pass that re-reads each ACT line with its PARAM line and writes one ACC line per cycle.
    - SOFTMAX: a maximum pass over ``x + mask`` (mask lines on the second ACT port), a pass
      summing ``e`` (shift + polynomial, per lane), the reciprocal (``NORM_RECIP_CYCLES``),
      and a pass that recomputes ``e`` and writes ``e * R`` scaled to Q8 probabilities.

    Reads issue in one cycle; their results are computed and written in the next, while the
    next read issues, so the engine takes ``isa.norm_cycles`` minus the compute unit's
    dispatch cycle: a setup cycle (the range checks, the row scalar's PARAM read), a check
    cycle (the row scalar), the rows, and a final write.

    Attributes
    ----------
    insn : In(NORM layout)
        The instruction, stable from ``start`` until ``done``.
    bad_fields : Out(1)
        ``insn`` cannot run (zero sizes, too many lanes, mode 3, a mask on a norm): BAD_FIELD.
    start : In(1)
        Begin ``insn`` (only when ``bad_fields`` is low).
    done : Out(1)
        Strobe: the last line is written this cycle.
    halt : In(1)
        Freeze (the accelerator stopped on an error).
    error : Out(1), error_code : Out(ErrorCode)
        Lines past ACT, ACC or PARAM (LOCAL_RANGE), or a row scalar or PARAM shift out of
        range (BAD_FIELD); the engine stops before writing.
    act, act1 : Out(read port)
        ACT reads: the rows, and the mask lines.
    param : Out(read port)
    acc_wr : Out(write port)
    """

    def __init__(self, config: AccelConfig) -> None:
        self.config = c = config
        super().__init__(
            {
                "insn": In(isa.NORM.layout),
                "bad_fields": Out(1),
                "start": In(1),
                "done": Out(1),
                "halt": In(1),
                "error": Out(1),
                "error_code": Out(isa.ErrorCode),
                "act": Out(read_port(c.act_line_bytes * 8)),
                "act1": Out(read_port(c.act_line_bytes * 8)),
                "param": Out(read_port(param_line_bits(c))),
                "acc_wr": Out(write_port(c.acc_line_bytes * 8)),
            }
        )

    def elaborate(self, platform: object) -> Module:
        m = Module()
        c, insn = self.config, self.insn
        m.submodules.scalar = scalar = NormScalar()
        r = _Row(c)
        softmax = insn.mode == NormMode.SOFTMAX
        m.d.comb += [
            r.lanes.eq(Mux(insn.last_lanes == 0, c.rows, insn.last_lanes)),
            r.channels.eq(((insn.k_iter - 1) << (c.rows.bit_length() - 1)) + r.lanes),
            r.count.eq(insn.k_iter * insn.m),
        ]
        masks = insn.mask_lines | insn.causal
        m.d.comb += self.bad_fields.eq(
            (insn.m == 0)
            | (insn.k_iter == 0)
            | (r.lanes > c.rows)
            | (insn.mode.as_value() == 3)
            | (~softmax & masks)
        )
        lanes = self._lanes(m, r, softmax)
        self._row_scalar(m, r, scalar, softmax)
        self._arrive(m, r, lanes, scalar, softmax)
        with m.FSM(name="norm"):
            with m.State("IDLE"), m.If(self.start):
                m.d.sync += [r.i.eq(0), r.line.eq(0), r.offset.eq(0), r.wait.eq(0)]
                m.next = "SETUP"
            with m.State("SETUP"):
                self._setup(m, r)
            with m.State("CHECK"):
                self._check(m, r, softmax)
            for state in ("PASS1", "PASS2", "PASS3"):
                with m.State(state):
                    self._pass(m, r, state, softmax)
            with m.State("WAIT"):  # the row scalar (its first cycle adds the last line in)
                length = Mux(softmax, NORM_RECIP_CYCLES, NORM_RSQRT_CYCLES)
                m.d.comb += r.in_wait.eq(1)
                m.d.sync += r.wait.eq(r.wait + 1)
                with m.If(r.stop):
                    m.next = "STOPPED"
                with m.Elif(r.wait == length - 1):
                    m.d.sync += r.wait.eq(0)
                    m.next = "PASS3"
            with m.State("FLUSH"):  # the last line is written this cycle
                m.d.comb += self.done.eq(1)
                m.next = "IDLE"
            with m.State("STOPPED"):
                pass
        return m

    def _fail(self, m: Module, code: isa.ErrorCode) -> None:
        m.d.comb += [self.error.eq(1), self.error_code.eq(code)]
        m.next = "STOPPED"

    def _setup(self, m: Module, r: _Row) -> None:
        """Lines past ACT or ACC, or a row scalar past PARAM: LOCAL_RANGE; else read it."""
        c, insn = self.config, self.insn
        past = (insn.act_addr + r.count > c.act_lines) | (insn.acc_addr + r.count > c.acc_lines)
        with m.If(past | (insn.param_addr >= c.param_lines)):
            self._fail(m, isa.ErrorCode.LOCAL_RANGE)
        with m.Elif(~self.halt):
            m.d.comb += [self.param.addr.eq(insn.param_addr), self.param.en.eq(1)]
            m.next = "CHECK"

    def _check(self, m: Module, r: _Row, softmax: Value) -> None:
        """The row scalar (K below 1 or 2**24, eps below 1: BAD_FIELD), then the mask or PARAM
        lines past their memory (LOCAL_RANGE), as the ISA simulator checks them."""
        c, insn = self.config, self.insn
        value = param_view(self.param.data, c)[0].res_mult
        m.d.sync += r.scalar.eq(value)
        bad = Mux(softmax, (value < 1) | (value >= 1 << 24), value < 1)
        mask_count = Mux(insn.mask_per_row, r.count, insn.k_iter)
        mask_past = softmax & insn.mask_lines & (insn.mask_addr + mask_count > c.act_lines)
        param_past = ~softmax & (insn.param_addr + insn.k_iter > c.param_lines)
        with m.If(bad):
            self._fail(m, isa.ErrorCode.BAD_FIELD)
        with m.Elif(mask_past | param_past):
            self._fail(m, isa.ErrorCode.LOCAL_RANGE)
        with m.Elif(~self.halt):
            m.next = "PASS1"

    def _pass(self, m: Module, r: _Row, state: str, softmax: Value) -> None:
        """Issue line ``r.line`` of this pass: its ACT line, its mask line (SOFTMAX) and its
        PARAM line (the norms); step to the next line, pass or row."""
        insn = self.insn
        row_offset = r.i + r.offset
        with m.If(r.stop):
            m.next = "STOPPED"
        with m.Elif(~self.halt):
            shared_mask = insn.mask_addr + r.line
            m.d.comb += [
                self.act.addr.eq(insn.act_addr + row_offset),
                self.act.en.eq(1),
                self.act1.addr.eq(Mux(insn.mask_per_row, insn.mask_addr + row_offset, shared_mask)),
                self.act1.en.eq(softmax & insn.mask_lines),
                self.param.addr.eq(insn.param_addr + r.line),
                self.param.en.eq(~softmax),
            ]
            last = r.line == insn.k_iter - 1
            m.d.sync += [
                r.ln_valid.eq(1),
                r.ln_pass.eq(int(state[-1])),
                r.ln_line.eq(r.line),
                r.ln_first.eq(r.line == 0),
                r.ln_last.eq(last),
                r.ln_acc.eq(insn.acc_addr + row_offset),
                r.ln_limit.eq(insn.row0 + r.i),
                r.line.eq(r.line + 1),
                r.offset.eq(r.offset + insn.m),
            ]
            with m.If(last):
                m.d.sync += [r.line.eq(0), r.offset.eq(0)]
                if state == "PASS1":
                    with m.If(softmax):
                        m.next = "PASS2"
                    with m.Else():
                        m.next = "WAIT"
                elif state == "PASS2":
                    m.next = "WAIT"
                else:
                    m.d.sync += r.i.eq(r.i + 1)
                    with m.If(r.i == insn.m - 1):
                        m.next = "FLUSH"
                    with m.Else():
                        m.next = "PASS1"

    def _row_scalar(self, m: Module, r: _Row, scalar: NormScalar, softmax: Value) -> None:
        """Start the row scalar in the second WAIT cycle, once the last line's sums are in."""
        rms = self.insn.mode == NormMode.RMSNORM
        variance = Signal(signed(V_BITS + 4))
        m.d.comb += variance.eq(r.channels * r.s2 - Mux(rms, 0, r.s1 * r.s1) + r.scalar.as_signed())
        second = r.in_wait & (r.wait == 1)
        m.d.comb += [
            scalar.v.eq(variance[:V_BITS]),
            scalar.s.eq(r.s2[:SUM_BITS]),  # SOFTMAX keeps the sum of e in s2
            scalar.start_rsqrt.eq(second & ~softmax),
            scalar.start_recip.eq(second & softmax),
        ]

    def _lanes(self, m: Module, r: _Row, softmax: Value) -> list[_Lane]:
        """Per lane, from the line that arrived: its codes, whether it is in the row or masked,
        and the values the passes combine or write."""
        c, insn = self.config, self.insn
        acts = data.View(data.ArrayLayout(signed(c.in_bits), c.rows), self.act.data)
        marks = data.View(data.ArrayLayout(signed(c.in_bits), c.rows), self.act1.data)
        rms = insn.mode == NormMode.RMSNORM
        lanes = []
        for lane in range(c.rows):
            ln = _Lane(lane)
            in_row = lane < Mux(r.ln_last, r.lanes, c.rows)
            code = marks[lane]
            masked_code = insn.mask_lines & (code == MASKED_CODE)
            position = Cat(Const(lane, c.rows.bit_length() - 1), r.ln_line)
            late = insn.causal & (position > r.ln_limit)
            m.d.comb += [
                ln.used.eq(in_row & ~(softmax & (masked_code | late))),
                ln.x.eq(acts[lane] - Mux(rms, insn.zp_in, 0)),
                ln.z.eq(acts[lane] + Mux(insn.mask_lines & ~masked_code, code, 0)),
            ]
            lanes.append(ln)
        return lanes

    def _arrive(
        self, m: Module, r: _Row, lanes: list[_Lane], scalar: NormScalar, softmax: Value
    ) -> None:
        """The line read in the previous cycle: add it into the row sums or maximum, check its
        PARAM shifts, or compute and write its ACC line."""
        c = self.config
        params = param_view(self.param.data, c)
        m.d.sync += r.ln_valid.eq(0)
        outputs = [self._lane(m, r, ln, params[ln.index], scalar, softmax) for ln in lanes]
        line_s1 = sum(Mux(ln.used, ln.x, 0) for ln in lanes)
        line_s2 = sum(Mux(ln.used, ln.xx, 0) for ln in lanes)
        line_max = _max_tree(m, [Mux(ln.used, ln.z, NO_MAX) for ln in lanes])
        line_e = sum(Mux(ln.used, ln.e, 0) for ln in lanes)
        stats = r.ln_valid & (r.ln_pass == 1)
        with m.If(stats):
            m.d.sync += r.top.eq(Mux(r.ln_first | (line_max > r.top), line_max, r.top))
            with m.If(~softmax):
                m.d.sync += [
                    r.s1.eq(Mux(r.ln_first, 0, r.s1) + line_s1),
                    r.s2.eq(Mux(r.ln_first, 0, r.s2) + line_s2),
                ]
        with m.If(r.ln_valid & (r.ln_pass == 2)):
            m.d.sync += r.s2.eq(Mux(r.ln_first, 0, r.s2) + line_e)
        bad_shift = 0
        for ln in lanes:
            shift = params[ln.index].shift
            in_row = ln.index < Mux(r.ln_last, r.lanes, c.rows)
            bad_shift = bad_shift | (shift > MAX_SHIFT) | (in_row & (shift < MIN_SHIFT))
        with m.If(stats & ~softmax & bad_shift):
            m.d.comb += [
                self.error.eq(1),
                self.error_code.eq(isa.ErrorCode.BAD_FIELD),
                r.stop.eq(1),
            ]
        with m.If(r.ln_valid & (r.ln_pass == 3)):
            m.d.comb += [
                self.acc_wr.en.eq(1),
                self.acc_wr.addr.eq(r.ln_acc),
                self.acc_wr.data.eq(Cat(*(out[:32] for out in outputs))),
            ]

    def _lane(
        self,
        m: Module,
        r: _Row,
        ln: _Lane,
        entry: data.View,
        scalar: NormScalar,
        softmax: Value,
    ) -> Value:
        """One lane's datapath, its output (0 outside the row or masked). Three multipliers
        serve both modes and all passes, since no pass needs two uses of one at once:
        ``x*x`` (statistics) or ``C*x`` (normalize); ``d*R`` (norms) or ``delta*K`` (SOFTMAX),
        the first product of both chains; ``h*mult`` (norms) or ``e*R`` (SOFTMAX), the second."""
        rms = self.insn.mode == NormMode.RMSNORM
        name = f"lane{ln.index}"
        by = Signal(signed(17), name=f"{name}_by")
        m.d.comb += by.eq(Mux(r.ln_pass == 1, ln.x, r.channels))
        m.d.comb += ln.xx.eq(by * ln.x)  # x*x, or C*x
        d = Signal(signed(28), name=f"{name}_d")
        m.d.comb += d.eq(ln.xx - Mux(rms, 0, r.s1))
        delta = Signal(10, name=f"{name}_delta")
        m.d.comb += delta.eq((r.top - ln.z)[:10])
        first = Signal(signed(53), name=f"{name}_first")  # d*R, or u = delta*K
        m.d.comb += first.eq(Mux(softmax, delta, d) * Mux(softmax, r.scalar[:24], scalar.r))
        m.d.comb += ln.e.eq(_exp(m, name, first[:34]))
        h = Signal(signed(24), name=f"{name}_h")  # |x_hat| <= sqrt(C) < 2**8, in Q12
        m.d.comb += h.eq((first >> scalar.t) + (first >> (scalar.t - 1)[:6])[0])
        second = Signal(signed(56), name=f"{name}_second")  # h*mult, or e*R
        m.d.comb += second.eq(Mux(softmax, ln.e, h) * Mux(softmax, scalar.r, entry.mult))
        soft_out = second >> (scalar.l - 1)[: len(scalar.l)]
        norm_out = _requant(m, name, second, entry)
        return Mux(ln.used, Mux(softmax, soft_out, norm_out), 0)


def _exp(m: Module, name: str, u: Value) -> Signal:
    """``e = 2**(-u / 2**16)`` in Q15 for ``u = delta * K`` (``arch.norm_ops._exp2_neg``)."""
    f, n = u[:16], u[16:]
    square = Signal(32, name=f"{name}_square")
    m.d.comb += square.eq(f * f)
    inner = Signal(signed(36), name=f"{name}_inner")
    m.d.comb += inner.eq(EXP_A * f + EXP_B * square[16:] + (1 << 15))
    poly = Signal(17, name=f"{name}_poly")
    m.d.comb += poly.eq(32768 + (inner >> 16))
    e = Signal(16, name=f"{name}_e")
    m.d.comb += e.eq(Mux(n >= 16, 0, poly >> n[:4]))
    return e


def _requant(m: Module, name: str, scaled: Value, entry: data.View) -> Signal:
    """``(h * mult) >> (shift - 8)`` plus the bias, saturated to 32 bits
    (``arch.norm_ops.norm_rows_q8``)."""
    q8 = Signal(signed(57), name=f"{name}_q8")
    m.d.comb += q8.eq((scaled >> (entry.shift - MIN_SHIFT)[:6]) + entry.bias)
    out = Signal(signed(32), name=f"{name}_out")
    low, high = isa.INT32_MIN, isa.INT32_MAX
    m.d.comb += out.eq(Mux(q8 < low, low, Mux(q8 > high, high, q8)))
    return out


def _max_tree(m: Module, values: list[Value]) -> Value:
    """The largest of ``values`` (signed ``Z_BITS``), as a balanced tree of named signals: a
    chain of ``Mux(a > b, a, b)`` that names each value twice grows exponentially when
    Amaranth flattens it (16 lanes did not convert in 10 minutes)."""
    level = 0
    while len(values) > 1:
        pairs = []
        for i in range(0, len(values) - 1, 2):
            node = Signal(signed(Z_BITS), name=f"max{level}_{i // 2}")
            a, b = values[i], values[i + 1]
            m.d.comb += node.eq(Mux(a > b, a, b))
            pairs.append(node)
        values = pairs + values[len(values) - len(values) % 2 :]
        level += 1
    return values[0]


class _Lane:
    """One lane of the arrived line: ``x`` (minus ``zp_in`` for RMSNORM), ``z = x + mask``,
    whether it counts (in the row, not masked), ``x*x`` (or ``C*x``) and its ``e``."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.x = Signal(signed(9), name=f"lane{index}_x")
        self.z = Signal(signed(Z_BITS), name=f"lane{index}_z")
        self.used = Signal(name=f"lane{index}_used")
        self.xx = Signal(signed(26), name=f"lane{index}_xx")  # x*x, or C*x
        self.e = Signal(16, name=f"lane{index}_exp")


class _Row:
    """The walk (row i, line of the pass, its ACT/ACC offset ``line*m``, WAIT cycles), the row
    statistics and scalar, and the line read in the previous cycle (``ln_*``)."""

    def __init__(self, c: AccelConfig) -> None:
        m_bits, k_bits = _FIELD["m"].width, _FIELD["k_iter"].width
        self.lanes = Signal(range(64 + 1))
        self.channels = Signal(unsigned(16))
        self.count = Signal(m_bits + k_bits)
        self.i, self.line = Signal(m_bits), Signal(k_bits)
        self.offset = Signal(m_bits + k_bits)
        self.wait = Signal(range(max(NORM_RSQRT_CYCLES, NORM_RECIP_CYCLES)))
        self.in_wait = Signal()
        self.scalar = Signal(signed(32))  # eps_codes or K
        self.s1, self.s2 = Signal(signed(S1_BITS)), Signal(S2_BITS)
        self.top = Signal(signed(Z_BITS))
        self.stop = Signal()
        self.ln_valid, self.ln_pass = Signal(), Signal(2)
        self.ln_line, self.ln_first, self.ln_last = Signal(k_bits), Signal(), Signal()
        self.ln_acc = Signal(isa.LOCAL_ADDR_BITS + 1)
        self.ln_limit = Signal(m_bits + 1)

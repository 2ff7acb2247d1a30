"""Store unit: executes STORE (post-process accumulators, DMA to DRAM), PERF and SYNC."""

from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from arch import isa
from arch.config import AccelConfig
from arch.isa import MAX_SHIFT
from hdl_gen.addrgen import LOOP_COUNT_BITS, AddressGenerator
from hdl_gen.desc_fetch import DescriptorFetcher
from hdl_gen.dram_bus import read_signature, write_signature
from hdl_gen.local_ports import POINTER_BITS, param_line_bits, param_view, read_port
from hdl_gen.read_port import ReadPort
from hdl_gen.requant import clamp, requantize
from hdl_gen.tokens import ErrorLatch, UnitFrame, unit_signature


class StoreUnit(wiring.Component):
    """Walks a STORE's descriptor; for each in-bounds line reads the accumulator line and its
    PARAM line (and, with use_res, the residual's ACT line), adds the bias (use_bias) and the
    requantized residual (use_res), requantizes, adds the output zero point and clamps
    every column to int8 (then, with use_table, maps it through the lookup table, copied from
    PARAM into registers before the first line) and writes the line to DRAM (one line per
    cycle when a line fits a bus beat). A transposing STORE collects each innermost run of
    ``cols`` processed lines as the rows of a byte block, then writes its columns, one line
    each, at the run's DRAM addresses.
    PERF writes a counter snapshot.

    Attributes
    ----------
    acc, param, act : Out(read port)
    wr : Out(stream of DRAM writes)
    perf : In(perf_record layout)
        Live counter values (the tag field is ignored).
    """

    def __init__(self, config: AccelConfig) -> None:
        self.config = c = config
        bus = c.dram_bytes_per_cycle
        super().__init__(
            unit_signature(
                {
                    "desc_base": In(isa.LAUNCH_BITS),
                    "desc_count": In(isa.LAUNCH_BITS),
                    "desc_bus": Out(read_signature(bus)),
                    "acc": Out(read_port(c.acc_line_bytes * 8)),
                    "param": Out(read_port(param_line_bits(c))),
                    "act": Out(read_port(c.act_line_bytes * 8)),
                    "wr": Out(write_signature(bus)),
                    "perf": In(isa.PERF_RECORD.layout),
                }
            )
        )

    def elaborate(self, platform: object) -> Module:
        m = Module()
        c = self.config
        bus = c.dram_bytes_per_cycle
        out_bytes = c.out_line_bytes
        beats = max(1, out_bytes // bus)
        frame = UnitFrame(self, m)
        errors = ErrorLatch(self, m)
        insn = frame.insn.store
        m.submodules.desc_port = desc_port = ReadPort(bus, max(4, isa.DESC_BYTES // bus))
        m.submodules.fetcher = fetcher = DescriptorFetcher(bus)
        m.submodules.addrgen = addrgen = AddressGenerator(c.dram_bytes)
        wiring.connect(m, wiring.flipped(self.desc_bus), desc_port.bus)
        wiring.connect(m, fetcher.addr, desc_port.addr)
        wiring.connect(m, desc_port.data, fetcher.data)
        m.d.comb += [
            fetcher.index.eq(insn.desc),
            fetcher.desc_base.eq(self.desc_base),
            fetcher.desc_count.eq(self.desc_count),
            addrgen.desc.eq(fetcher.desc),
            addrgen.line_bytes.eq(out_bytes),
            addrgen.lines_in_mem.eq(c.acc_lines),
            addrgen.align.eq(min(out_bytes, bus)),
            addrgen.every_line.eq(insn.transpose),
        ]
        errors.raise_(fetcher.error, isa.ErrorCode.BAD_DESCRIPTOR)
        errors.raise_(addrgen.error, addrgen.error_code)

        # Pipeline: A accepts a line and reads ACC/PARAM/ACT; B requantizes; C writes DRAM beats.
        b_valid, b_dram, b_inside = Signal(), Signal(isa.DRAM_ADDR_BITS), Signal()
        c_valid, c_dram, c_line = Signal(), Signal(isa.DRAM_ADDR_BITS), Signal(out_bytes * 8)
        c_beat = Signal(range(beats + 1))
        walking = Signal()
        line = addrgen.lines.payload

        c_last_beat = c_valid & self.wr.ready & (c_beat == beats - 1)
        c_free = ~c_valid | c_last_beat
        # Transpose: B fills row `row` of the block; when the block is full it drains, one
        # column per line into C, while B waits.
        cols = c.cols
        rows = [Signal(out_bytes * 8, name=f"block_{r}") for r in range(cols)]
        row_dram = [Signal(isa.DRAM_ADDR_BITS, name=f"block_dram_{r}") for r in range(cols)]
        row = Signal(range(cols))
        draining = Signal()
        drain_col = Signal(range(cols))
        b_moves = b_valid & Mux(insn.transpose, ~draining, c_free)
        drain_moves = draining & c_free
        a_moves = addrgen.lines.valid & (~b_valid | b_moves) & ~self.halt
        m.d.comb += addrgen.lines.ready.eq(a_moves)

        index = Signal(LOOP_COUNT_BITS)
        with m.Switch(insn.param_loop):
            for level in range(isa.DESC_LOOPS):
                with m.Case(level):
                    m.d.comb += index.eq(line.index[level])
        # The residual's ACT line: res_addr + the ACC line's offset from the descriptor's base.
        res_line = Signal(signed(POINTER_BITS + 1))
        m.d.comb += res_line.eq(insn.res_addr + line.local - fetcher.desc.local_base)
        res_outside = (res_line < 0) | (res_line >= c.act_lines)
        m.d.comb += [
            self.acc.addr.eq(line.local),
            self.acc.en.eq(a_moves),
            self.param.addr.eq(insn.param_addr + index),
            self.param.en.eq(a_moves),
            self.act.addr.eq(res_line[: isa.LOCAL_ADDR_BITS]),
            self.act.en.eq(a_moves & insn.use_res),
        ]
        errors.raise_(a_moves & line.valid & insn.use_res & res_outside, isa.ErrorCode.LOCAL_RANGE)
        with m.If(a_moves):
            m.d.sync += [
                b_valid.eq(line.valid | insn.transpose),
                b_inside.eq(line.valid),
                b_dram.eq(line.dram),
            ]
            with m.If(line.last):
                m.d.sync += walking.eq(0)
        with m.Elif(b_moves):
            m.d.sync += b_valid.eq(0)

        # The lookup table: TABLE_ENTRIES int8 registers, filled a PARAM line per cycle (TABLE
        # state). They are a register file of table_lines words of a line's first entries each,
        # every word read without a clock: Verilator then updates the table only when a line is
        # written, not every cycle (the same flip-flops: area.md counts them as FF bits). No
        # reset: a STORE with use_table loads the whole table before its first line.
        table_lines = isa.table_lines(c.cols)
        table_step = Signal(range(table_lines + 1))
        line_entries = min(param_line_bits(c) // 8, isa.TABLE_ENTRIES)
        m.submodules.lut = table_words = memory.Memory(
            shape=line_entries * 8, depth=table_lines, init=[]
        )
        table_write = table_words.write_port()
        m.d.comb += [
            table_write.addr.eq(table_step - 1),
            table_write.data.eq(self.param.data[: line_entries * 8]),
        ]
        words = []
        for line in range(table_lines):
            port = table_words.read_port(domain="comb")
            m.d.comb += port.addr.eq(line)
            words.append(port.data)
        table = Array(Cat(*words).word_select(t, 8) for t in range(isa.TABLE_ENTRIES))

        accs = data.View(data.ArrayLayout(signed(c.acc_bits), c.cols), self.acc.data)
        residuals = data.View(data.ArrayLayout(signed(c.in_bits), c.cols), self.act.data)
        params = param_view(self.param.data, c)
        lanes = Signal(out_bytes * 8)  # the B stage's output line, once for both uses below
        bad_shift = Signal()
        for col in range(c.cols):
            entry = params[col]
            residual = requantize(m, residuals[col], entry.res_mult, entry.res_shift, f"res_{col}")
            # acc + bias + residual wraps to the accumulator's width, like every sum in ACC.
            value = Signal(signed(c.acc_bits), name=f"value_{col}")
            m.d.comb += value.eq(
                accs[col] + Mux(insn.use_bias, entry.bias, 0) + Mux(insn.use_res, residual, 0)
            )
            scaled = requantize(m, value, entry.mult, entry.shift, f"scaled_{col}")
            shifted = Signal.like(scaled, name=f"shifted_{col}")  # exact: |scaled| <= 2**62
            m.d.comb += shifted.eq(scaled + insn.out_zp.as_signed())  # the output zero point
            clamped = clamp(m, shifted, insn.clamp_lo, insn.clamp_hi, f"clamped_{col}")
            code = clamped[: c.in_bits]
            # Entry t of the table is the output for code t - 128: flip the sign bit.
            looked_up = table[Cat(code[:7], ~code[7])]
            m.d.comb += lanes.word_select(col, 8).eq(Mux(insn.use_table, looked_up, code))
        for entry in params:
            bad_shift = bad_shift | (entry.shift > MAX_SHIFT)
            bad_shift = bad_shift | (insn.use_res & (entry.res_shift > MAX_SHIFT))
        errors.raise_(b_valid & b_inside & bad_shift, isa.ErrorCode.BAD_FIELD)
        with m.If(b_moves & insn.transpose):
            for r in range(cols):
                with m.If(row == r):
                    m.d.sync += [
                        rows[r].eq(Mux(b_inside, lanes, 0)),
                        row_dram[r].eq(b_dram),
                    ]
            m.d.sync += row.eq(Mux(row == cols - 1, 0, row + 1))
            with m.If(row == cols - 1):
                m.d.sync += [draining.eq(1), drain_col.eq(0)]
        # Column 0 of the block is byte 0 of every row; each drained column shifts the rows.
        column = Cat(*(r[:8] for r in rows))
        with m.If(drain_moves):
            m.d.sync += [
                c_valid.eq(1),
                c_dram.eq(row_dram[0]),
                c_line.eq(column),
                c_beat.eq(0),
                drain_col.eq(drain_col + 1),
            ]
            m.d.sync += [r.eq(r >> 8) for r in rows]
            m.d.sync += [row_dram[r].eq(row_dram[r + 1]) for r in range(cols - 1)]
            with m.If(drain_col == cols - 1):
                m.d.sync += draining.eq(0)
        with m.Elif(b_moves & ~insn.transpose):
            m.d.sync += [c_valid.eq(1), c_dram.eq(b_dram), c_line.eq(lanes), c_beat.eq(0)]
        with m.Elif(c_last_beat):
            m.d.sync += c_valid.eq(0)
        with m.If(c_valid & self.wr.ready & ~c_last_beat):
            m.d.sync += c_beat.eq(c_beat + 1)

        # DRAM write beats for STORE lines (or PERF records, below).
        perf_beats = isa.PERF_RECORD.nbytes // bus
        record = Signal(isa.PERF_RECORD.bits)
        perf_beat = Signal(range(perf_beats + 1))
        perf_addr = Signal(isa.DRAM_ADDR_BITS)
        writing_perf = Signal()
        # A select among the record's beats (a variable part-select would shift all 1024 bits).
        record_beats = Array(record.word_select(b, bus * 8) for b in range(perf_beats))
        offset = c_dram[: (bus - 1).bit_length()]  # a narrow shift amount keeps widths small
        with m.If(writing_perf):
            m.d.comb += [
                self.wr.valid.eq(1),
                self.wr.payload.addr.eq(perf_addr + perf_beat * bus),
                self.wr.payload.data.eq(record_beats[perf_beat]),
                self.wr.payload.strb.eq((1 << bus) - 1),
            ]
        with m.Elif(c_valid):
            m.d.comb += self.wr.valid.eq(1)
            if out_bytes >= bus:
                m.d.comb += [
                    self.wr.payload.addr.eq(c_dram + c_beat * bus),
                    self.wr.payload.data.eq(c_line.word_select(c_beat, bus * 8)),
                    self.wr.payload.strb.eq((1 << bus) - 1),
                ]
            else:
                m.d.comb += [
                    self.wr.payload.addr.eq(c_dram),
                    self.wr.payload.data.eq(c_line << (offset * 8)),
                    self.wr.payload.strb.eq(Const((1 << out_bytes) - 1, bus) << offset),
                ]

        record_view = data.View(isa.PERF_RECORD.layout, record)
        with m.FSM(name="store"):
            with m.State("IDLE"), m.If(frame.start):
                m.next = "BEGIN"
            with m.State("BEGIN"):
                opcode = frame.insn.load.opcode
                with m.If(opcode == isa.Opcode.STORE):
                    m.d.comb += fetcher.start.eq(1)
                    m.next = "DESCRIPTOR"
                with m.Elif(opcode == isa.Opcode.PERF):
                    address = frame.insn.perf.dram_addr
                    in_dram = (address & (isa.PERF_RECORD.nbytes - 1) == 0) & (
                        address + isa.PERF_RECORD.nbytes <= c.dram_bytes
                    )
                    with m.If(~in_dram):
                        errors.raise_(1, isa.ErrorCode.DRAM_RANGE)
                        m.next = "STOPPED"
                    with m.Else():
                        m.d.sync += [
                            record.eq(self.perf.as_value()),
                            record_view.tag.eq(frame.insn.perf.tag),
                            perf_addr.eq(address),
                            perf_beat.eq(0),
                            writing_perf.eq(1),
                        ]
                        m.next = "PERF"
                with m.Else():  # SYNC: tokens only
                    m.d.comb += frame.done.eq(1)
                    m.next = "IDLE"
            with m.State("DESCRIPTOR"), m.If(fetcher.done):
                inner = fetcher.desc.loops[isa.DESC_LOOPS - 1].count
                bad = (
                    (fetcher.desc.mem != isa.Mem.ACC)
                    | (insn.clamp_lo.as_signed() > insn.clamp_hi.as_signed())
                    | (insn.transpose & (inner != cols))
                )
                table_outside = insn.table_addr + table_lines > c.param_lines
                with m.If(bad):
                    errors.raise_(1, isa.ErrorCode.BAD_FIELD)
                    m.next = "STOPPED"
                with m.Elif(insn.use_table & table_outside):
                    errors.raise_(1, isa.ErrorCode.LOCAL_RANGE)
                    m.next = "STOPPED"
                with m.Elif(insn.use_table):
                    m.d.sync += table_step.eq(0)
                    m.next = "TABLE"
                with m.Else():
                    m.d.comb += addrgen.start.eq(1)
                    m.d.sync += walking.eq(1)
                    m.next = "MOVE"
            with m.State("TABLE"):
                # Cycle s reads table line s and captures line s - 1 (read data comes a cycle
                # after the address); the cycle after the last capture starts the walk.
                m.d.comb += [
                    self.param.addr.eq(insn.table_addr + table_step),
                    self.param.en.eq(table_step < table_lines),
                ]
                m.d.sync += table_step.eq(table_step + 1)
                m.d.comb += table_write.en.eq(table_step != 0)  # line table_step - 1
                with m.If(table_step == table_lines):
                    m.d.comb += addrgen.start.eq(1)
                    m.d.sync += walking.eq(1)
                    m.next = "MOVE"
            with m.State("MOVE"), m.If(~walking & ~addrgen.busy & ~b_valid & ~draining & ~c_valid):
                m.d.comb += frame.done.eq(1)
                m.next = "IDLE"
            with m.State("PERF"), m.If(self.wr.ready):
                m.d.sync += perf_beat.eq(perf_beat + 1)
                with m.If(perf_beat == perf_beats - 1):
                    m.d.sync += writing_perf.eq(0)
                    m.d.comb += frame.done.eq(1)
                    m.next = "IDLE"
            with m.State("STOPPED"):
                pass
        return m

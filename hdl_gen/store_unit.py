"""Store unit: executes STORE (post-process accumulators, DMA to DRAM), PERF and SYNC."""

from __future__ import annotations

from amaranth import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from arch import isa
from arch.config import AccelConfig
from arch.isa import MAX_SHIFT
from hdl_gen.addrgen import LOOP_COUNT_BITS, AddressGenerator
from hdl_gen.desc_fetch import PrefetchingFetcher
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
        frame = UnitFrame(self, m)
        errors = ErrorLatch(self, m)
        insn = frame.insn.store
        fetcher, addrgen = self._walker(m, insn, frame.start_insn.store, errors)
        lines = _Lines(self.config, insn, addrgen.lines.valid, self.wr.ready, self.halt)
        self._read(m, insn, fetcher, addrgen, lines, errors)
        table, table_step, table_write = self._table(m)
        lanes = self._post_process(m, insn, table, lines, errors)
        self._transpose(m, insn, lines, lanes)
        perf = self._write_beats(m, lines)
        with m.FSM(name="store"):
            with m.State("IDLE"), m.If(frame.start):
                m.next = "BEGIN"
            with m.State("BEGIN"):
                opcode = frame.insn.load.opcode
                with m.If(opcode == isa.Opcode.STORE):
                    m.d.comb += fetcher.start.eq(1)
                    m.next = "DESCRIPTOR"
                with m.Elif(opcode == isa.Opcode.PERF):
                    self._begin_perf(m, frame, perf, errors)
                with m.Else():  # SYNC: tokens only
                    m.d.comb += frame.done.eq(1)
                    m.next = "IDLE"
            with m.State("DESCRIPTOR"), m.If(fetcher.done):
                self._check_descriptor(m, insn, fetcher, addrgen, lines, table_step, errors)
            with m.State("TABLE"):
                self._load_table(m, insn, addrgen, lines, table_step, table_write)
            walked = ~lines.walking & ~addrgen.busy  # the walk has handed over every line
            with m.State("MOVE"), m.If(walked & ~lines.b_valid & ~lines.draining & ~lines.c_valid):
                m.d.comb += frame.done.eq(1)
                m.next = "IDLE"
            with m.State("PERF"), m.If(self.wr.ready):
                m.d.sync += perf.beat.eq(perf.beat + 1)
                with m.If(perf.beat == perf.beats - 1):
                    m.d.sync += perf.writing.eq(0)
                    m.d.comb += frame.done.eq(1)
                    m.next = "IDLE"
            with m.State("STOPPED"):
                pass
        return m

    def _walker(
        self, m: Module, insn: data.View, head: data.View, errors: ErrorLatch
    ) -> tuple[PrefetchingFetcher, AddressGenerator]:
        """The descriptor fetcher (on its own DRAM read port; it reads the queue ``head``'s
        descriptor ahead if that is a STORE: while this one runs, or while it waits for its
        token) and the address generator that walks the descriptor's lines."""
        c = self.config
        bus = c.dram_bytes_per_cycle
        out_bytes = c.out_line_bytes
        m.submodules.desc_port = desc_port = ReadPort(bus, max(4, isa.DESC_BYTES // bus))
        m.submodules.fetcher = fetcher = PrefetchingFetcher(bus)
        m.submodules.addrgen = addrgen = AddressGenerator(c.dram_bytes)
        wiring.connect(m, wiring.flipped(self.desc_bus), desc_port.bus)
        wiring.connect(m, fetcher.addr, desc_port.addr)
        wiring.connect(m, desc_port.data, fetcher.data)
        m.d.comb += [
            fetcher.index.eq(insn.desc),
            fetcher.ahead.eq(self.queue.valid & (head.opcode == isa.Opcode.STORE) & ~self.halt),
            fetcher.ahead_index.eq(head.desc),
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
        return fetcher, addrgen

    def _read(
        self,
        m: Module,
        insn: data.View,
        fetcher: PrefetchingFetcher,
        addrgen: AddressGenerator,
        lines: _Lines,
        errors: ErrorLatch,
    ) -> None:
        """Stage A: take a line of the walk and read its ACC line, its PARAM line (indexed by
        the counter of loop ``param_loop``) and, with use_res, the residual's ACT line."""
        c = self.config
        line, a_moves = addrgen.lines.payload, lines.a_moves
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
                lines.b_valid.eq(line.valid | insn.transpose),
                lines.b_inside.eq(line.valid),
                lines.b_dram.eq(line.dram),
            ]
            with m.If(line.last):
                m.d.sync += lines.walking.eq(0)
        with m.Elif(lines.b_moves):
            m.d.sync += lines.b_valid.eq(0)

    def _table(self, m: Module) -> tuple[Array, Signal, memory.WritePort]:
        """The lookup table: TABLE_ENTRIES int8 registers, filled a PARAM line per cycle (TABLE
        state, at ``table_step``, through the write port returned). They are a register file of
        table_lines words of a line's first entries each, every word read without a clock:
        Verilator then updates the table only when a line is written, not every cycle (the same
        flip-flops: area.md counts them as FF bits). No reset: a STORE with use_table loads the
        whole table before its first line."""
        c = self.config
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
        return table, table_step, table_write

    def _post_process(
        self, m: Module, insn: data.View, table: Array, lines: _Lines, errors: ErrorLatch
    ) -> Signal:
        """Stage B: per column, acc + bias + requantized residual, requantized, plus the output
        zero point, clamped to int8 and (use_table) looked up; returns the processed line. A
        shift above MAX_SHIFT stops the STORE (BAD_FIELD)."""
        c = self.config
        accs = data.View(data.ArrayLayout(signed(c.acc_bits), c.cols), self.acc.data)
        residuals = data.View(data.ArrayLayout(signed(c.in_bits), c.cols), self.act.data)
        params = param_view(self.param.data, c)
        lanes = Signal(c.out_line_bytes * 8)  # the B stage's output line, for both next stages
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
        errors.raise_(lines.b_valid & lines.b_inside & bad_shift, isa.ErrorCode.BAD_FIELD)
        return lanes

    def _transpose(self, m: Module, insn: data.View, lines: _Lines, lanes: Signal) -> None:
        """Stage B to C: a line goes on to C, or (transpose) into row ``row`` of the block
        (zeros for a line outside the bounds); a full block drains into C, a column a line."""
        cols = self.config.cols
        rows, row_dram, row, drain_col = lines.rows, lines.row_dram, lines.row, lines.drain_col
        b_inside = lines.b_inside
        with m.If(lines.b_moves & insn.transpose):
            for r in range(cols):
                with m.If(row == r):
                    m.d.sync += [
                        rows[r].eq(Mux(b_inside, lanes, 0)),
                        row_dram[r].eq(lines.b_dram),
                    ]
            m.d.sync += row.eq(Mux(row == cols - 1, 0, row + 1))
            with m.If(row == cols - 1):
                m.d.sync += [lines.draining.eq(1), drain_col.eq(0)]
        # Column 0 of the block is byte 0 of every row; each drained column shifts the rows.
        column = Cat(*(r[:8] for r in rows))
        c_valid, c_dram, c_line, c_beat = lines.c_valid, lines.c_dram, lines.c_line, lines.c_beat
        with m.If(lines.drain_moves):
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
                m.d.sync += lines.draining.eq(0)
        with m.Elif(lines.b_moves & ~insn.transpose):
            m.d.sync += [c_valid.eq(1), c_dram.eq(lines.b_dram), c_line.eq(lanes), c_beat.eq(0)]
        with m.Elif(lines.c_last_beat):
            m.d.sync += c_valid.eq(0)
        with m.If(c_valid & self.wr.ready & ~lines.c_last_beat):
            m.d.sync += c_beat.eq(c_beat + 1)

    def _write_beats(self, m: Module, lines: _Lines) -> _PerfWrite:
        """Stage C: the DRAM write beats of a STORE line, or of a PERF record (returned: its
        registers, which the BEGIN and PERF states drive)."""
        bus = self.config.dram_bytes_per_cycle
        out_bytes = self.config.out_line_bytes
        perf = _PerfWrite(bus)
        c_valid, c_dram, c_line, c_beat = lines.c_valid, lines.c_dram, lines.c_line, lines.c_beat
        # A select among the record's beats (a variable part-select would shift all 1024 bits).
        record_beats = Array(perf.record.word_select(b, bus * 8) for b in range(perf.beats))
        offset = c_dram[: (bus - 1).bit_length()]  # a narrow shift amount keeps widths small
        with m.If(perf.writing):
            m.d.comb += [
                self.wr.valid.eq(1),
                self.wr.payload.addr.eq(perf.addr + perf.beat * bus),
                self.wr.payload.data.eq(record_beats[perf.beat]),
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
        return perf

    def _begin_perf(
        self, m: Module, frame: UnitFrame, perf: _PerfWrite, errors: ErrorLatch
    ) -> None:
        """BEGIN of a PERF: snapshot the counters (with the instruction's tag) if the record
        fits DRAM at an aligned address, else stop with DRAM_RANGE."""
        c = self.config
        address = frame.insn.perf.dram_addr
        in_dram = (address & (isa.PERF_RECORD.nbytes - 1) == 0) & (
            address + isa.PERF_RECORD.nbytes <= c.dram_bytes
        )
        with m.If(~in_dram):
            errors.raise_(1, isa.ErrorCode.DRAM_RANGE)
            m.next = "STOPPED"
        with m.Else():
            m.d.sync += [
                perf.record.eq(self.perf.as_value()),
                perf.record_view.tag.eq(frame.insn.perf.tag),
                perf.addr.eq(address),
                perf.beat.eq(0),
                perf.writing.eq(1),
            ]
            m.next = "PERF"

    def _check_descriptor(
        self,
        m: Module,
        insn: data.View,
        fetcher: PrefetchingFetcher,
        addrgen: AddressGenerator,
        lines: _Lines,
        table_step: Signal,
        errors: ErrorLatch,
    ) -> None:
        """DESCRIPTOR, once fetched: refuse a bad STORE, else load the table or start the walk."""
        c = self.config
        table_lines = isa.table_lines(c.cols)
        inner = fetcher.desc.loops[isa.DESC_LOOPS - 1].count
        bad = (
            (fetcher.desc.mem != isa.Mem.ACC)
            | (insn.clamp_lo.as_signed() > insn.clamp_hi.as_signed())
            | (insn.transpose & (inner != c.cols))
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
            m.d.sync += lines.walking.eq(1)
            m.next = "MOVE"

    def _load_table(
        self,
        m: Module,
        insn: data.View,
        addrgen: AddressGenerator,
        lines: _Lines,
        table_step: Signal,
        table_write: memory.WritePort,
    ) -> None:
        """TABLE: cycle s reads table line s and captures line s - 1 (read data comes a cycle
        after the address); the cycle after the last capture starts the walk."""
        table_lines = isa.table_lines(self.config.cols)
        m.d.comb += [
            self.param.addr.eq(insn.table_addr + table_step),
            self.param.en.eq(table_step < table_lines),
        ]
        m.d.sync += table_step.eq(table_step + 1)
        m.d.comb += table_write.en.eq(table_step != 0)  # line table_step - 1
        with m.If(table_step == table_lines):
            m.d.comb += addrgen.start.eq(1)
            m.d.sync += lines.walking.eq(1)
            m.next = "MOVE"


class _Lines:
    """The STORE pipeline's registers and moves: stage A takes a line of the walk and reads
    ACC/PARAM/ACT; B post-processes it; C writes it to DRAM in ``beats`` beats. A transposing
    STORE fills row ``row`` of a block of ``cols`` lines from B; a full block drains, one
    column per line into C, while B waits."""

    def __init__(
        self, c: AccelConfig, insn: data.View, walk_valid: Signal, wr_ready: Signal, halt: Signal
    ) -> None:
        out_bytes = c.out_line_bytes
        self.beats = beats = max(1, out_bytes // c.dram_bytes_per_cycle)
        # (Names as the generated Verilog has had them: only the last of each row is named.)
        b_valid, b_dram, b_inside = Signal(), Signal(isa.DRAM_ADDR_BITS), Signal()
        c_valid, c_dram, c_line = Signal(), Signal(isa.DRAM_ADDR_BITS), Signal(out_bytes * 8)
        self.b_valid, self.b_dram, self.b_inside = b_valid, b_dram, b_inside
        self.c_valid, self.c_dram, self.c_line = c_valid, c_dram, c_line
        self.c_beat = c_beat = Signal(range(beats + 1))
        self.walking = Signal()

        self.c_last_beat = c_last_beat = c_valid & wr_ready & (c_beat == beats - 1)
        c_free = ~c_valid | c_last_beat
        cols = c.cols
        self.rows = [Signal(out_bytes * 8, name=f"block_{r}") for r in range(cols)]
        self.row_dram = [Signal(isa.DRAM_ADDR_BITS, name=f"block_dram_{r}") for r in range(cols)]
        self.row = Signal(range(cols))
        self.draining = draining = Signal()
        self.drain_col = Signal(range(cols))
        self.b_moves = b_moves = b_valid & Mux(insn.transpose, ~draining, c_free)
        self.drain_moves = draining & c_free
        self.a_moves = walk_valid & (~b_valid | b_moves) & ~halt


class _PerfWrite:
    """A PERF record being written: the counter snapshot, its DRAM address, the beat."""

    def __init__(self, bus: int) -> None:
        self.beats = isa.PERF_RECORD.nbytes // bus
        self.record = Signal(isa.PERF_RECORD.bits)
        self.beat = Signal(range(self.beats + 1), name="perf_beat")
        self.addr = Signal(isa.DRAM_ADDR_BITS, name="perf_addr")
        self.writing = Signal(name="writing_perf")
        self.record_view = data.View(isa.PERF_RECORD.layout, self.record)

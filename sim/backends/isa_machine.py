"""The ISA simulator: the living definition of every instruction, in numpy.

It executes a program and its descriptor table against a DRAM image for one
:class:`~arch.config.AccelConfig`, with the exact integer arithmetic the RTL does, and stops
with an :class:`IsaSimError` carrying the same :class:`~arch.isa.ErrorCode` the RTL reports
(illegal opcode, descriptor or address out of range, token deadlock...) and naming the
instruction index and field.

Queues run in dataflow order: the LOAD, COMPUTE and STORE queues each execute in program order,
and an instruction runs only when the tokens it pops are available. Alongside the results the
simulator keeps an ideal timing model (each queue busy for its instructions' ideal durations,
tokens carrying completion times), which gives the ideal-cycle estimate reports show next to the
RTL's counters.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from arch import isa
from arch.config import AccelConfig
from arch.isa import MAX_SHIFT, ErrorCode, Launch, Mem, Opcode, dwconv_cycles
from sim.backends.isa_norm import exec_norm
from sim.backends.isa_queues import QueueScheduler
from sim.backends.isa_results import IsaSimError, Stats

__all__ = ["IsaSimError", "Machine", "Stats", "requantize", "run_program", "wrap32"]


def requantize(x: np.ndarray, mult: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """``(x * mult + 2**(shift-1)) >> shift`` (arithmetic shift: round half up); int64."""
    x, mult, shift = (np.asarray(v, dtype=np.int64) for v in (x, mult, shift))
    rounding = np.where(shift > 0, np.left_shift(np.int64(1), np.maximum(shift - 1, 0)), 0)
    return np.right_shift(x * mult + rounding, shift)


def wrap32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.int64).astype(np.int32)


class Machine:
    """Architectural state (DRAM and local memories) of one accelerator instance."""

    def __init__(self, config: AccelConfig, dram: np.ndarray | None = None) -> None:
        self.config = c = config
        if dram is None:
            dram = np.zeros(c.dram_bytes, dtype=np.uint8)
        if dram.dtype != np.uint8 or dram.ndim != 1:
            raise ValueError(f"DRAM must be a 1-D uint8 array, not {dram.dtype} {dram.shape}")
        self.dram = dram
        self.act = np.zeros((c.act_lines, c.rows), dtype=np.int8)
        self.wgt = np.zeros((c.wgt_lines, c.cols), dtype=np.int8)
        self.acc = np.zeros((c.acc_lines, c.cols), dtype=np.int32)
        self.param = {
            leaf.path: np.zeros((c.param_lines, c.cols), dtype=np.int64)
            for leaf in isa.PARAM_ENTRY.leaves
        }
        self.param_bytes = np.zeros((c.param_lines, c.cols * isa.PARAM_ENTRY_BYTES), np.uint8)
        self.stats = Stats()
        self.counters: dict[str, int] = {}  # ideal-model counters for PERF, set by the scheduler
        #: bytes written at or above ``watch_from`` (past the DRAM read back) and the lowest such
        #: address (-1: none), like the RTL testbench's DRAM model (sim/csrc/cosim_dram.cpp)
        self.watch_from = dram.size
        self.stray_writes = (0, -1)

    # ---- running -------------------------------------------------------------------------------
    def run(self, launch: Launch) -> Stats:
        """Check the launch registers, then fetch from ``launch.insn_base`` up to END and execute
        (instructions are decoded as dispatch reaches them, as in the RTL); return the
        statistics."""
        self._check_launch(launch)
        self._check_watchdog()
        descs = self._descriptors(launch)
        QueueScheduler(self, self._instructions(launch), descs).run()
        return self.stats

    def fetch(self, launch: Launch) -> list[isa.Instruction]:
        """The whole program from ``launch.insn_base`` up to END (decode errors raised)."""
        return list(self._instructions(launch))

    def _check_watchdog(self) -> None:
        """The RTL's watchdog where it is certain to fire: the first instruction word arrives
        ``dram_latency`` cycles after the launch with nothing else moving, so a shorter
        ``watchdog_cycles`` stops every program at instruction 0 (longer quiet windows, at most
        a few cycles more, are the RTL's alone)."""
        c = self.config
        if c.watchdog_cycles < c.dram_latency:
            raise IsaSimError(
                ErrorCode.WATCHDOG,
                f"watchdog_cycles {c.watchdog_cycles} < dram_latency {c.dram_latency}: "
                "no progress while the first instruction is fetched",
                0,
            )

    def _check_launch(self, launch: Launch) -> None:
        """What the RTL checks when started: a 16-byte aligned program and a 64-byte aligned
        descriptor table inside DRAM; else DRAM_RANGE at instruction 0, before anything runs."""
        if launch.insn_base % isa.INSN_BYTES:
            raise IsaSimError(
                ErrorCode.DRAM_RANGE,
                f"insn_base 0x{launch.insn_base:x} is not {isa.INSN_BYTES}-byte aligned",
                0,
            )
        end = launch.desc_base + launch.desc_count * isa.DESC_BYTES
        if launch.desc_base % isa.DESC_BYTES or end > self.dram.size:
            raise IsaSimError(
                ErrorCode.DRAM_RANGE,
                f"descriptor table 0x{launch.desc_base:x}+{launch.desc_count}x{isa.DESC_BYTES} "
                f"bytes is misaligned or outside DRAM ({self.dram.size} bytes)",
                0,
            )

    def _instructions(self, launch: Launch) -> Iterator[isa.Instruction]:
        """Decode instructions one at a time from ``launch.insn_base`` up to END: a decode
        error is raised only when dispatch asks for that instruction."""
        address, index = launch.insn_base, 0
        while True:
            if address + isa.INSN_BYTES > self.dram.size:
                raise IsaSimError(
                    ErrorCode.DRAM_RANGE, "program runs off the end of DRAM without END", index
                )
            word = int.from_bytes(self.dram[address : address + isa.INSN_BYTES].tobytes(), "little")
            try:
                insn = isa.decode_insn(word, index)
            except isa.IsaError as exc:
                code = ErrorCode.ILLEGAL_OPCODE if "opcode" in str(exc) else ErrorCode.BAD_FIELD
                raise IsaSimError(
                    code, str(exc).removeprefix(f"instruction {index}: "), index
                ) from None
            if insn.opcode is Opcode.NORM and not self.config.norm_unit:
                raise IsaSimError(
                    ErrorCode.ILLEGAL_OPCODE,
                    f"illegal opcode {Opcode.NORM.value}: NORM needs a config with norm_unit",
                    index,
                )
            self.stats.fetch_bytes += isa.INSN_BYTES
            yield insn
            if insn.opcode is Opcode.END:
                return
            address += isa.INSN_BYTES
            index += 1

    def _descriptors(self, launch: Launch) -> list[bytes]:
        end = launch.desc_base + launch.desc_count * isa.DESC_BYTES
        return [
            self.dram[a : a + isa.DESC_BYTES].tobytes()
            for a in range(launch.desc_base, end, isa.DESC_BYTES)
        ]

    # ---- instruction semantics -----------------------------------------------------------------
    def execute(self, index: int, insn: isa.Instruction, descs: list[bytes]) -> int:
        """Execute one instruction; return its ideal duration in cycles."""
        self.stats.insns[insn.format.name] += 1
        handler = getattr(self, f"_exec_{insn.format.name}")
        return int(handler(index, insn, descs))

    def _descriptor(self, index: int, insn: isa.Instruction, descs: list[bytes]) -> dict[str, Any]:
        number = insn["desc"]
        if number >= len(descs):
            raise IsaSimError(
                ErrorCode.BAD_DESCRIPTOR,
                f"{insn.format.name}.desc = {number} but the table has {len(descs)} descriptors",
                index,
            )
        self.stats.desc_bytes += isa.DESC_BYTES
        desc = isa.decode_record(isa.DESCRIPTOR, int.from_bytes(descs[number], "little"))
        return desc

    def _walk(
        self,
        index: int,
        desc: dict[str, Any],
        lines_in_mem: int,
        line_bytes: int,
        every_line: bool = False,
    ) -> _Walk:
        """Addresses, coordinates and validity of every line of a descriptor, in loop order;
        the DRAM range is checked for the lines inside the bounds (``every_line``: all)."""
        counts = [desc[f"loops[{lv}].count"] for lv in range(isa.DESC_LOOPS)]
        for lv, count in enumerate(counts):
            if count < 1:
                raise IsaSimError(ErrorCode.BAD_FIELD, f"descriptor loops[{lv}].count is 0", index)
        grids = np.indices(counts, dtype=np.int64).reshape(isa.DESC_LOOPS, -1)

        def combine(base: int, key: str) -> np.ndarray:
            steps = np.array([desc[f"loops[{lv}].{key}"] for lv in range(isa.DESC_LOOPS)])
            return base + steps @ grids

        local = combine(desc["local_base"], "local_stride")
        dram = combine(desc["dram_base"], "dram_stride") % (1 << 32)  # 32-bit address arithmetic
        y, x = combine(desc["y0"], "ystep"), combine(desc["x0"], "xstep")
        valid = np.ones(local.shape, dtype=bool)
        if desc["height"]:
            valid &= (y >= 0) & (y < desc["height"])
        if desc["width"]:
            valid &= (x >= 0) & (x < desc["width"])
        bad = np.flatnonzero((local < 0) | (local >= lines_in_mem))
        if bad.size:
            raise IsaSimError(
                ErrorCode.LOCAL_RANGE,
                f"descriptor line {bad[0]} addresses {desc['mem'].name} line {local[bad[0]]}, "
                f"memory has {lines_in_mem} lines",
                index,
            )
        align = min(line_bytes, self.config.dram_bytes_per_cycle)
        in_dram = (dram >= 0) & (dram + line_bytes <= self.dram.size) & (dram % align == 0)
        bad = np.flatnonzero((valid | every_line) & ~in_dram)
        if bad.size:
            raise IsaSimError(
                ErrorCode.DRAM_RANGE,
                f"descriptor line {bad[0]} at DRAM 0x{int(dram[bad[0]]):x} is outside DRAM "
                f"({self.dram.size} bytes) or not {align}-byte aligned",
                index,
            )
        return _Walk(grids, local, dram, valid)

    def _beats(self, nbytes: int) -> int:
        return max(1, math.ceil(nbytes / self.config.dram_bytes_per_cycle))

    def _exec_load(self, index: int, insn: isa.Instruction, descs: list[bytes]) -> int:
        desc = self._descriptor(index, insn, descs)
        mem = desc["mem"]
        if mem is Mem.ACC:
            raise IsaSimError(
                ErrorCode.BAD_FIELD, "load descriptor targets ACC (stores only)", index
            )
        line_bytes = isa.line_bytes(self.config, mem)
        lines = {Mem.ACT: self.config.act_lines, Mem.WGT: self.config.wgt_lines}.get(
            mem, self.config.param_lines
        )
        walk = self._walk(index, desc, lines, line_bytes)
        raw = np.full((walk.local.size, line_bytes), desc["pad_value"] & 0xFF, dtype=np.uint8)
        addresses = walk.dram[walk.valid]
        raw[walk.valid] = self.dram[addresses[:, None] + np.arange(line_bytes)]
        if mem is Mem.ACT:
            self.act[walk.local] = raw.view(np.int8)
        elif mem is Mem.WGT:
            self.wgt[walk.local] = raw.view(np.int8)
        else:
            self.param_bytes[walk.local] = raw
            entries = raw.reshape(-1, self.config.cols, isa.PARAM_ENTRY_BYTES)
            for leaf in isa.PARAM_ENTRY.leaves:
                lo, n = leaf.offset // 8, leaf.width // 8
                field_bytes = np.ascontiguousarray(entries[:, :, lo : lo + n])
                dtype = f"<{'i' if leaf.signed else 'u'}{n}"
                values = field_bytes.view(dtype).reshape(-1, self.config.cols)
                self.param[leaf.path][walk.local] = values
        nvalid = int(walk.valid.sum())
        self.stats.load_bytes[mem.name] += nvalid * line_bytes
        self.stats.pad_lines += walk.local.size - nvalid
        return (
            self.config.dram_latency + nvalid * self._beats(line_bytes) + (walk.local.size - nvalid)
        )

    def _param(self, index: int, name: str, lines: np.ndarray) -> np.ndarray:
        bad = np.flatnonzero((lines < 0) | (lines >= self.config.param_lines))
        if bad.size:
            raise IsaSimError(
                ErrorCode.LOCAL_RANGE,
                f"PARAM line {lines[bad[0]]} is outside PARAM ({self.config.param_lines} lines)",
                index,
            )
        values = self.param[name][lines]
        if name.endswith("shift") and (values > MAX_SHIFT).any():
            raise IsaSimError(
                ErrorCode.BAD_FIELD,
                f"PARAM {name} = {int(values.max())} exceeds {MAX_SHIFT} (line {lines[0]}...)",
                index,
            )
        return values

    def _table(self, index: int, first: int) -> np.ndarray:
        """The STORE lookup table in PARAM lines ``first``.. (LOCAL_RANGE past PARAM)."""
        count = isa.table_lines(self.config.cols)
        self._check_lines(index, "table PARAM", first, count, self.config.param_lines)
        return self.param_bytes[first : first + count].ravel()[: isa.TABLE_ENTRIES].view(np.int8)

    def _exec_store(self, index: int, insn: isa.Instruction, descs: list[bytes]) -> int:
        desc = self._descriptor(index, insn, descs)
        if desc["mem"] is not Mem.ACC:
            raise IsaSimError(
                ErrorCode.BAD_FIELD,
                f"store descriptor mem is {desc['mem'].name}, must be ACC",
                index,
            )
        lo, hi = insn["clamp_lo"], insn["clamp_hi"]
        if lo > hi:
            raise IsaSimError(ErrorCode.BAD_FIELD, f"store clamp_lo {lo} > clamp_hi {hi}", index)
        cols = self.config.cols
        inner = desc[f"loops[{isa.DESC_LOOPS - 1}].count"]
        transpose = bool(insn["transpose"])
        if transpose and inner != cols:
            raise IsaSimError(
                ErrorCode.BAD_FIELD,
                f"transposing store: descriptor loops[{isa.DESC_LOOPS - 1}].count is {inner}, "
                f"must be cols = {cols}",
                index,
            )
        table = self._table(index, insn["table_addr"]) if insn["use_table"] else None
        line_bytes = self.config.out_line_bytes
        walk = self._walk(index, desc, self.config.acc_lines, line_bytes, every_line=transpose)
        params = insn["param_addr"] + walk.grids[insn["param_loop"]][walk.valid]
        acc = self.acc[walk.local[walk.valid]]
        if insn["use_bias"]:
            acc = wrap32(acc.astype(np.int64) + self._param(index, "bias", params))
        if insn["use_res"]:
            acc = wrap32(
                acc.astype(np.int64) + self._store_residual(index, insn, desc, walk, params)
            )
        scaled = requantize(
            acc, self._param(index, "mult", params), self._param(index, "shift", params)
        )
        out = np.clip(scaled + insn["out_zp"], lo, hi).astype(np.int8)
        if table is not None:
            out = table[out.astype(np.int64) + 128]
        written = walk.valid
        if transpose:  # blocks of cols lines (out-of-bounds rows zero), each transposed
            block = np.zeros((walk.local.size, cols), dtype=np.int8)
            block[walk.valid] = out
            out = block.reshape(-1, cols, cols).transpose(0, 2, 1).reshape(-1, cols)
            written = np.ones(walk.local.size, dtype=bool)
        addresses = walk.dram[written]
        self._watch(addresses, line_bytes)
        self.dram[addresses[:, None] + np.arange(line_bytes)] = out.view(np.uint8)
        self.stats.store_bytes += out.size
        self.stats.alu_ops += int(walk.valid.sum()) * cols
        table_cycles = 0 if table is None else isa.table_lines(cols) + 1
        beats = walk.local.size * self._beats(line_bytes)
        collect = walk.local.size if transpose else 0  # a block is read, then written
        return beats + collect + table_cycles  # (its descriptor read: the scheduler's)

    def _store_residual(
        self,
        index: int,
        insn: isa.Instruction,
        desc: dict[str, Any],
        walk: _Walk,
        params: np.ndarray,
    ) -> np.ndarray:
        """STORE use_res: each stored line's residual ACT line (``res_addr`` + its ACC line's
        offset from the descriptor's ``local_base``), requantized by its PARAM line."""
        lines = insn["res_addr"] + walk.local[walk.valid].astype(np.int64) - desc["local_base"]
        outside = np.flatnonzero((lines < 0) | (lines >= self.config.act_lines))
        if outside.size:
            raise IsaSimError(
                ErrorCode.LOCAL_RANGE,
                f"store residual ACT line {lines[outside[0]]} is outside ACT "
                f"({self.config.act_lines} lines)",
                index,
            )
        mult = self._param(index, "res_mult", params)
        shift = self._param(index, "res_shift", params)
        return requantize(self.act[lines].astype(np.int64), mult, shift)

    def _check_lines(self, index: int, what: str, start: int, count: int, limit: int) -> None:
        if start < 0 or start + count > limit:
            raise IsaSimError(
                ErrorCode.LOCAL_RANGE,
                f"{what} lines {start}..{start + count - 1} are outside the memory ({limit} lines)",
                index,
            )

    def _require_positive(self, index: int, insn: isa.Instruction, *names: str) -> None:
        for name in names:
            if insn[name] < 1:
                raise IsaSimError(ErrorCode.BAD_FIELD, f"{insn.format.name}.{name} is 0", index)

    def _exec_gemm(self, index: int, insn: isa.Instruction, descs: list[bytes]) -> int:
        self._require_positive(index, insn, "m", "k_iter", "n_iter")
        m, k_iter, n_iter = insn["m"], insn["k_iter"], insn["n_iter"]
        if n_iter > 1 and insn["acc_n_stride"] < m:
            raise IsaSimError(
                ErrorCode.BAD_FIELD,
                f"gemm.acc_n_stride {insn['acc_n_stride']} < m {m}: accumulator blocks overlap",
                index,
            )
        act_rows = np.add.outer(
            insn["act_addr"] + insn["act_k_stride"] * np.arange(k_iter), np.arange(m)
        )
        return self._array_pass(index, insn, act_rows, insn["acc_n_stride"], insn["transpose_w"])

    def _exec_conv(self, index: int, insn: isa.Instruction, descs: list[bytes]) -> int:
        self._require_positive(index, insn, "m", "k_iter", "n_iter", "out_w", "kh", "kw", "stride")
        m, out_w, kw, stride = insn["m"], insn["out_w"], insn["kw"], insn["stride"]
        pitch = isa.window_span(out_w, kw, stride)
        i = np.arange(m)
        pixel = (i // out_w) * stride * pitch + (i % out_w) * stride
        ky, kx, block = np.meshgrid(
            np.arange(insn["kh"]), np.arange(kw), np.arange(insn["k_iter"]), indexing="ij"
        )
        k_offset = (ky * pitch + kx + block * insn["act_k_stride"]).reshape(-1)
        act_rows = np.add.outer(insn["act_addr"] + k_offset, pixel)
        return self._array_pass(index, insn, act_rows, m)

    def _array_pass(
        self,
        index: int,
        insn: isa.Instruction,
        act_rows: np.ndarray,
        acc_n_stride: int,
        transpose_w: int = 0,
    ) -> int:
        """A GEMM or CONV on the array: k block k reads ACT lines ``act_rows[k]`` (one per
        output row i) against weight tiles (k, j) - each tile transposed with ``transpose_w``;
        n block j goes to ACC lines from ``acc_addr + j*acc_n_stride``."""
        c = self.config
        (k_iter, m), n_iter = act_rows.shape, insn["n_iter"]
        self._check_lines(index, "ACT", int(act_rows.min()), 1, c.act_lines)
        self._check_lines(index, "ACT", int(act_rows.max()), 1, c.act_lines)
        tiles = k_iter * n_iter
        self._check_lines(index, "WGT", insn["wgt_addr"], tiles * c.rows, c.wgt_lines)
        acc_last = insn["acc_addr"] + (n_iter - 1) * acc_n_stride + m
        self._check_lines(index, "ACC", insn["acc_addr"], acc_last - insn["acc_addr"], c.acc_lines)
        # A: (m, k_iter*rows) - the k blocks side by side; W: (k_iter*rows, n_iter*cols).
        a = self.act[act_rows].transpose(1, 0, 2).reshape(m, k_iter * c.rows)
        w = self.wgt[insn["wgt_addr"] : insn["wgt_addr"] + tiles * c.rows]
        w = w.reshape(k_iter, n_iter, c.rows, c.cols)
        if transpose_w:  # line r of a tile is column r of its weights (square arrays only)
            w = w.transpose(0, 1, 3, 2)
        w = w.transpose(0, 2, 1, 3)
        w = w.reshape(k_iter * c.rows, n_iter * c.cols)
        # float64 products of int8 are exact while |sum| < 2**53, far beyond any k_iter here.
        product = (a.astype(np.float64) @ w.astype(np.float64)).astype(np.int64)
        for j in range(n_iter):
            rows = slice(insn["acc_addr"] + j * acc_n_stride, None)
            rows = slice(rows.start, rows.start + m)
            block = product[:, j * c.cols : (j + 1) * c.cols]
            base = self.acc[rows].astype(np.int64) if insn["accumulate"] else 0
            self.acc[rows] = wrap32(base + block)
        self.stats.macs += tiles * m * c.rows * c.cols
        return isa.gemm_cycles(tiles, m, c.rows, c.cols)

    def _exec_accum(self, index: int, insn: isa.Instruction, descs: list[bytes]) -> int:
        c = self.config
        self._require_positive(index, insn, "m", "n_iter")
        m, n_iter = insn["m"], insn["n_iter"]
        if insn["use_gate"] and not insn["use_res"]:
            raise IsaSimError(ErrorCode.BAD_FIELD, "accum.use_gate needs use_res", index)
        for j in range(n_iter):
            acc_start = insn["acc_addr"] + j * insn["acc_n_stride"]
            self._check_lines(index, "ACC", acc_start, m, c.acc_lines)
            rows = slice(acc_start, acc_start + m)
            value = (
                self.acc[rows].astype(np.int64)
                if insn["accumulate"]
                else np.zeros((m, c.cols), np.int64)
            )
            line = np.array([insn["param_addr"] + j])
            if insn["use_bias"]:
                value = value + self._param(index, "bias", line)
            if insn["use_res"]:
                act_start = insn["act_addr"] + j * insn["act_n_stride"]
                self._check_lines(index, "ACT", act_start, m, c.act_lines)
                residual = self.act[act_start : act_start + m].astype(np.int64)
                if insn["use_gate"]:
                    gate = insn["gate_addr"] + j
                    self._check_lines(index, "gate ACT", gate, 1, c.act_lines)
                    residual = residual * self.act[gate]
                mult = self._param(index, "res_mult", line)
                shift = self._param(index, "res_shift", line)
                value = value + requantize(residual, mult, shift)
            self.acc[rows] = wrap32(value)
        self.stats.alu_ops += m * n_iter * c.cols
        return (m + insn["use_gate"]) * n_iter

    def _exec_pool(self, index: int, insn: isa.Instruction, descs: list[bytes]) -> int:
        c = self.config
        self._require_positive(index, insn, "m", "window", "n_iter")
        m, window, n_iter = insn["m"], insn["window"], insn["n_iter"]
        for j in range(n_iter):
            act_start = insn["act_addr"] + j * insn["act_n_stride"]
            self._check_lines(index, "ACT", act_start, m * window, c.act_lines)
            acc_start = insn["acc_addr"] + j * insn["acc_n_stride"]
            self._check_lines(index, "ACC", acc_start, m, c.acc_lines)
            lines = self.act[act_start : act_start + m * window].reshape(m, window, c.rows)
            rows = slice(acc_start, acc_start + m)
            if insn["mode"] is isa.PoolMode.MAX:
                # int8 maxima and sums of <= 255 lines: float64 (astype(None)) holds them too
                value = lines.max(axis=1).astype(np.int64)  # pragma: no mutate
                if insn["accumulate"]:
                    value = np.maximum(value, self.acc[rows])
            else:
                value = lines.astype(np.int64).sum(axis=1)  # pragma: no mutate
                if insn["accumulate"]:
                    value = value + self.acc[rows]
            self.acc[rows] = wrap32(value)
        self.stats.alu_ops += m * window * n_iter * c.rows
        return m * window * n_iter

    def _exec_dwconv(self, index: int, insn: isa.Instruction, descs: list[bytes]) -> int:
        c = self.config
        self._require_positive(index, insn, "out_w", "out_h", "kh", "kw", "stride")
        out_w, out_h, kh, kw = insn["out_w"], insn["out_h"], insn["kh"], insn["kw"]
        stride, pitch = insn["stride"], insn["pitch"]
        in_cols = isa.window_span(out_w, kw, stride)  # input columns streamed per output row
        self._check_lines(index, "WGT", insn["wgt_addr"], kh * kw, c.wgt_lines)
        last_act = insn["act_addr"] + ((out_h - 1) * stride + kh - 1) * pitch + in_cols - 1
        self._check_lines(
            index, "ACT", insn["act_addr"], last_act - insn["act_addr"] + 1, c.act_lines
        )
        self._check_lines(index, "ACC", insn["acc_addr"], out_h * out_w, c.acc_lines)
        if insn["max"] and insn["use_bias"]:
            raise IsaSimError(ErrorCode.BAD_FIELD, "dwconv.max with use_bias", index)
        if insn["use_bias"]:
            self._check_lines(index, "PARAM", insn["param_addr"], 1, c.param_lines)
        # ACT line of (output pixel, tap): (oy*stride + i)*pitch + ox*stride + j.
        oy, ox = np.divmod(np.arange(out_h * out_w), out_w)
        i, j = np.divmod(np.arange(kh * kw), kw)
        lines = insn["act_addr"] + np.add.outer(oy * stride * pitch + ox * stride, i * pitch + j)
        taps = self.wgt[insn["wgt_addr"] : insn["wgt_addr"] + kh * kw]
        # (pixels, taps, lanes); float64 (astype(None)) would hold these sums exactly too
        acts = self.act[lines].astype(np.int64)  # pragma: no mutate
        wgts = taps.astype(np.int64)  # pragma: no mutate
        rows = slice(insn["acc_addr"], insn["acc_addr"] + out_h * out_w)
        if insn["max"]:
            value = acts.max(axis=1)
            if insn["accumulate"]:
                value = np.maximum(value, self.acc[rows])
        else:
            value = (acts * wgts[None]).sum(axis=1)
            if insn["accumulate"]:
                value = value + self.acc[rows]
        if insn["use_bias"]:
            value = value + self.param["bias"][insn["param_addr"]]  # line checked above
        self.acc[rows] = wrap32(value)
        if insn["max"]:
            self.stats.alu_ops += out_h * out_w * kh * kw * c.cols
        else:
            self.stats.macs += out_h * out_w * kh * kw * c.cols
        return dwconv_cycles(out_w, out_h, kh, kw, stride)

    def _exec_norm(self, index: int, insn: isa.Instruction, descs: list[bytes]) -> int:
        return exec_norm(self, index, insn)

    def _exec_sync(self, index: int, insn: isa.Instruction, descs: list[bytes]) -> int:
        return 1

    def _exec_perf(self, index: int, insn: isa.Instruction, descs: list[bytes]) -> int:
        address = insn["dram_addr"]
        size = isa.PERF_RECORD.nbytes
        if address % size or address + size > self.dram.size:
            raise IsaSimError(
                ErrorCode.DRAM_RANGE,
                f"perf.dram_addr 0x{address:x} is not {size}-byte aligned or outside DRAM",
                index,
            )
        self.perf_snapshot(index, insn["tag"], address)
        return self._beats(size)

    def _watch(self, addresses: np.ndarray, nbytes: int) -> None:
        """Count the bytes of writes of ``nbytes`` at ``addresses`` that reach ``watch_from``."""
        ends = addresses.astype(np.int64) + nbytes
        past = ends > self.watch_from
        if not past.any():
            return
        starts = np.maximum(addresses[past].astype(np.int64), self.watch_from)
        count, first = self.stray_writes
        lowest = int(starts.min()) if first < 0 else min(first, int(starts.min()))
        self.stray_writes = (count + int((ends[past] - starts).sum()), lowest)

    def perf_snapshot(self, index: int, tag: int, address: int) -> None:
        """Write the ideal-model counters into a perf_record (filled in by the scheduler)."""
        values = {"tag": tag, **self.counters}
        word = isa.encode_record(isa.PERF_RECORD, values)
        self._watch(np.array([address]), isa.PERF_RECORD.nbytes)
        self.dram[address : address + isa.PERF_RECORD.nbytes] = np.frombuffer(
            word.to_bytes(isa.PERF_RECORD.nbytes, "little"), dtype=np.uint8
        )
        self.stats.store_bytes += isa.PERF_RECORD.nbytes


@dataclass
class _Walk:
    grids: np.ndarray  # (4, lines): loop indices of every line
    local: np.ndarray
    dram: np.ndarray
    valid: np.ndarray


def run_program(
    config: AccelConfig,
    program: Any,
    dram: np.ndarray | None = None,
    *,
    insn_base: int = 0,
    desc_base: int | None = None,
) -> Machine:
    """Place an :class:`arch.asm.Program` in DRAM and run it; return the machine.

    The program goes at ``insn_base`` and the descriptors right after it (64-byte aligned)
    unless ``desc_base`` is given.
    """
    machine = Machine(config, dram)
    insns, descs = program.insn_bytes(), program.desc_bytes()
    if desc_base is None:
        desc_base = -(-(insn_base + len(insns)) // isa.DESC_BYTES) * isa.DESC_BYTES
    for base, blob in ((insn_base, insns), (desc_base, descs)):
        machine.dram[base : base + len(blob)] = np.frombuffer(blob, dtype=np.uint8)
    machine.run(Launch(insn_base, desc_base, len(program.descs)))
    return machine

"""Compute unit: dispatches GEMM to the GEMM engine and ACCUM / POOL to the line engine."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from arch import isa
from arch.config import AccelConfig
from hdl_gen.gemm_engine import GemmEngine
from hdl_gen.line_engine import LineEngine
from hdl_gen.local_ports import param_line_bits, read_port, write_port
from hdl_gen.systolic_array import SystolicArray
from hdl_gen.tokens import ErrorLatch, UnitFrame, unit_signature


class ComputeUnit(wiring.Component):
    """Runs the compute queue: starts each GEMM on the :class:`~hdl_gen.gemm_engine.GemmEngine`
    (which drives the :class:`~hdl_gen.systolic_array.SystolicArray`, a submodule here) and each
    ACCUM or POOL on the :class:`~hdl_gen.line_engine.LineEngine`, latches the first error, and
    shares the ACT and ACC ports between the engines (only one runs at a time).

    Attributes
    ----------
    queue, deps, halt, idle, busy, ...
        What every unit has (:func:`~hdl_gen.tokens.unit_signature`).
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
                    "act": Out(read_port(c.act_line_bytes * 8)),
                    "wgt": Out(read_port(c.wgt_line_bytes * 8)),
                    "param": Out(read_port(param_line_bits(c))),
                    "acc_rd": Out(read_port(c.acc_line_bytes * 8)),
                    "acc_wr": Out(write_port(c.acc_line_bytes * 8)),
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
        m.submodules.gemm = gemm = GemmEngine(c)
        m.submodules.line = line = LineEngine(c)
        wiring.connect(m, gemm.array, array)
        wiring.connect(m, wiring.flipped(self.wgt), gemm.wgt)
        wiring.connect(m, wiring.flipped(self.param), line.param)
        m.d.comb += [
            gemm.insn.eq(frame.insn.gemm),
            line.insn.eq(frame.insn),
            gemm.halt.eq(self.halt),
            line.halt.eq(self.halt),
            self.array_active.eq(gemm.array_active),
            self.weight_load.eq(gemm.weight_load),
        ]

        # ACT and ACC: the GEMM engine's requests while it makes them, else the line engine's
        # (the engines never run at once); read data goes to both.
        for name in ("act", "acc_rd", "acc_wr"):
            port, from_gemm, from_line = (getattr(x, name) for x in (self, gemm, line))
            driven = [key for key, member in port.signature.members.items() if member.flow == Out]
            with m.If(from_gemm.en):
                m.d.comb += [getattr(port, key).eq(getattr(from_gemm, key)) for key in driven]
            with m.Else():
                m.d.comb += [getattr(port, key).eq(getattr(from_line, key)) for key in driven]
            if "data" not in driven:
                m.d.comb += [from_gemm.data.eq(port.data), from_line.data.eq(port.data)]

        with m.FSM(name="compute"):
            with m.State("IDLE"), m.If(frame.start):
                m.next = "BEGIN"
            with m.State("BEGIN"), m.Switch(frame.insn.load.opcode):
                for opcode, engine, state in (
                    (isa.Opcode.GEMM, gemm, "GEMM"),
                    (isa.Opcode.ACCUM, line, "LINES"),
                    (isa.Opcode.POOL, line, "LINES"),
                ):
                    with m.Case(opcode):
                        with m.If(engine.bad_fields):
                            errors.raise_(1, isa.ErrorCode.BAD_FIELD)
                            m.next = "STOPPED"
                        with m.Else():
                            m.d.comb += engine.start.eq(1)
                            m.next = state
                with m.Default():  # SYNC
                    m.d.comb += frame.done.eq(1)
                    m.next = "IDLE"
            for state, engine in (("GEMM", gemm), ("LINES", line)):
                with m.State(state), m.If(engine.done):
                    m.d.comb += frame.done.eq(1)
                    m.next = "IDLE"
            with m.State("STOPPED"):
                pass

        errors.raise_(line.error, line.error_code)
        errors.raise_(gemm.error, isa.ErrorCode.LOCAL_RANGE)
        return m

"""Compute unit: dispatches GEMM and CONV to the GEMM engine, ACCUM / POOL to the line engine,
DWCONV to the window engine and NORM to the norm engine (configs with ``norm_unit``)."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from arch import isa
from arch.config import AccelConfig
from hdl_gen.gemm_engine import GemmEngine
from hdl_gen.line_engine import LineEngine
from hdl_gen.local_ports import param_line_bits, read_port, write_port
from hdl_gen.norm_engine import NormEngine
from hdl_gen.systolic_array import SystolicArray
from hdl_gen.tokens import ErrorLatch, UnitFrame, unit_signature
from hdl_gen.window_engine import WindowEngine

#: Tokens to STORE a GEMM or CONV may owe at once (its rows still draining, or STORE's token
#: FIFO full); the next GEMM or CONV waits to start while that many are owed.
OWED_MAX = 3


class ComputeUnit(wiring.Component):
    """Runs the compute queue: starts each GEMM and CONV on the
    :class:`~hdl_gen.gemm_engine.GemmEngine` (which drives the
    :class:`~hdl_gen.systolic_array.SystolicArray`, a submodule here), each ACCUM or POOL on the
    :class:`~hdl_gen.line_engine.LineEngine` and each DWCONV on the
    :class:`~hdl_gen.window_engine.WindowEngine` and, with ``norm_unit``, each NORM on the
    :class:`~hdl_gen.norm_engine.NormEngine`, latches the first error, and shares the ACT,
    WGT, PARAM and ACC ports between the engines (only one runs at a time).

    Attributes
    ----------
    queue, deps, halt, idle, busy, ...
        What every unit has (:func:`~hdl_gen.tokens.unit_signature`).
    act, wgt, param : Out(read port)
    act1, act2 : Out(read port)
        The window engine's second and third ACT read ports (window rows 1 and 2); the norm
        engine reads its mask lines on ``act1``.
    acc_rd : Out(read port), acc_wr : Out(write port)
    array_active, weight_load : Out(1)
        Perf events: a row entered the array; a weight row was written.
    window_macs : Out(range)
        Perf event: multiply-accumulates the window engine did this cycle.
    draining : Out(1)
        GEMM rows are on their way to ACC: the unit makes progress while it waits for a token.
    """

    def __init__(self, config: AccelConfig) -> None:
        self.config = c = config
        super().__init__(
            unit_signature(
                {
                    "act": Out(read_port(c.act_line_bytes * 8)),
                    "act1": Out(read_port(c.act_line_bytes * 8)),
                    "act2": Out(read_port(c.act_line_bytes * 8)),
                    "wgt": Out(read_port(c.wgt_line_bytes * 8)),
                    "param": Out(read_port(param_line_bits(c))),
                    "acc_rd": Out(read_port(c.acc_line_bytes * 8)),
                    "acc_wr": Out(write_port(c.acc_line_bytes * 8)),
                    "array_active": Out(1),
                    "weight_load": Out(1),
                    "window_macs": Out(range(isa.DW_KERNEL_MAX**2 * c.cols + 1)),
                    "draining": Out(1),
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
        m.submodules.window = window = WindowEngine(c)
        engines = [gemm, window, line]
        dispatch = [
            (isa.Opcode.GEMM, gemm, "GEMM"),
            (isa.Opcode.CONV, gemm, "GEMM"),
            (isa.Opcode.ACCUM, line, "LINES"),
            (isa.Opcode.POOL, line, "LINES"),
            (isa.Opcode.DWCONV, window, "WINDOW"),
        ]
        shared = ["act", "wgt", "param", "acc_rd", "acc_wr"]
        wiring.connect(m, gemm.array, array)
        if c.norm_unit:  # the norm engine reads its mask lines on act1, beside the window's
            m.submodules.norm = norm = NormEngine(c)
            engines.append(norm)
            dispatch.append((isa.Opcode.NORM, norm, "NORM"))
            shared.insert(1, "act1")
            m.d.comb += [norm.insn.eq(frame.insn.norm), norm.halt.eq(self.halt)]
            errors.raise_(norm.error, norm.error_code)
        else:
            wiring.connect(m, wiring.flipped(self.act1), window.act1)
        wiring.connect(m, wiring.flipped(self.act2), window.act2)
        m.d.comb += [
            gemm.insn.eq(frame.insn.gemm),
            gemm.conv.eq(frame.insn.conv),
            gemm.is_conv.eq(frame.insn.load.opcode == isa.Opcode.CONV),
            line.insn.eq(frame.insn),
            window.insn.eq(frame.insn.dwconv),
            gemm.halt.eq(self.halt),
            line.halt.eq(self.halt),
            window.halt.eq(self.halt),
            self.array_active.eq(gemm.array_active),
            self.weight_load.eq(gemm.weight_load),
            self.window_macs.eq(window.macs),
        ]

        # Shared ports: the requests of whichever engine makes them (the engines never run at
        # once); read data goes to every engine that has the port.
        for name in shared:
            port = getattr(self, name)
            users = [e for e in engines if name in e.signature.members]
            driven = [key for key, member in port.signature.members.items() if member.flow == Out]
            requests = [getattr(e, name) for e in users]

            def drive(request, port=port, driven=driven):
                m.d.comb += [getattr(port, k).eq(getattr(request, k)) for k in driven]

            with m.If(requests[0].en):
                drive(requests[0])
            for request in requests[1:-1]:
                with m.Elif(request.en):
                    drive(request)
            with m.Else():
                drive(requests[-1])
            if "data" not in driven:
                m.d.comb += [getattr(e, name).data.eq(port.data) for e in users]

        # A GEMM or CONV retires once its rows are read; its token to STORE is owed until its
        # last row is in ACC, then pushed here (in program order: the rows drain in order).
        # Any other instruction starts once every row has drained and every token is pushed.
        owed = Signal(range(OWED_MAX + 1))
        is_gemm = (frame.insn.load.opcode == isa.Opcode.GEMM) | (
            frame.insn.load.opcode == isa.Opcode.CONV
        )
        m.d.comb += [
            gemm.owes_token.eq(frame.insn.load.deps.push_next),
            frame.defer_next.eq(is_gemm),
        ]
        pushing = (owed != 0) & self.deps.room_next & ~self.halt
        m.d.sync += owed.eq(owed + gemm.token_due - pushing)
        settled = ~gemm.draining & (owed == 0)
        m.d.comb += self.draining.eq(gemm.draining)

        with m.FSM(name="compute"):
            with m.State("IDLE"), m.If(frame.start):
                m.next = "BEGIN"
            with m.State("BEGIN"), m.Switch(frame.insn.load.opcode):
                for opcode, engine, state in dispatch:
                    with m.Case(opcode):
                        # (only a GEMM or CONV starts while the last one's rows drain)
                        ready = (owed != OWED_MAX) if engine is gemm else settled
                        with m.If(engine.bad_fields):
                            errors.raise_(1, isa.ErrorCode.BAD_FIELD)
                            m.next = "STOPPED"
                        with m.Elif(ready):
                            m.d.comb += engine.start.eq(1)
                            m.next = state
                with m.Default(), m.If(settled):  # SYNC
                    m.d.comb += frame.done.eq(1)
                    m.next = "IDLE"
            for state, engine in {state: engine for _, engine, state in dispatch}.items():
                finished = gemm.streamed if engine is gemm else engine.done  # (owed: above)
                with m.State(state), m.If(finished):
                    m.d.comb += frame.done.eq(1)
                    m.next = "IDLE"
            with m.State("STOPPED"):
                pass

        with m.If(pushing):
            m.d.comb += self.deps.push_next.eq(1)
        with m.If((owed != 0) & ~self.deps.room_next):
            m.d.comb += self.token_wait.eq(1)
        with m.If(~settled):  # not idle while rows are on their way to ACC or tokens owed
            m.d.comb += self.idle.eq(0)
        errors.raise_(line.error, line.error_code)
        errors.raise_(gemm.error, isa.ErrorCode.LOCAL_RANGE)
        errors.raise_(window.error, isa.ErrorCode.LOCAL_RANGE)
        return m

"""The accelerator: fetch, three decoupled units joined by dependency tokens, local memories,
DRAM arbitration, status and performance counters."""

from __future__ import annotations

from amaranth import Module, Mux, Signal, Value
from amaranth.lib import fifo, memory, wiring
from amaranth.lib.wiring import In, Out

from arch import isa
from arch.config import AccelConfig
from hdl_gen import checks
from hdl_gen.compute_unit import ComputeUnit
from hdl_gen.dram_arbiter import ReadArbiter
from hdl_gen.dram_bus import read_request, read_response, write_signature
from hdl_gen.fetch import Fetch
from hdl_gen.load_unit import LoadUnit
from hdl_gen.local_ports import param_line_bits
from hdl_gen.store_unit import StoreUnit
from hdl_gen.tokens import QUEUE_ENTRY, TokenCounter
from hdl_gen.top_ports import TOP_PORTS

DEADLOCK_CYCLES = 8  # every queue blocked on tokens this long = deadlock


class Accelerator(wiring.Component):
    """The systolic GEMM accelerator for one :class:`~arch.config.AccelConfig`.

    Attributes
    ----------
    start : In(1)
        Pulse to run the program at ``insn_base`` with ``desc_count`` descriptors at ``desc_base``.
    done : Out(1)
        Held high once END was dispatched and every queue has drained.
    error : Out(1), error_code : Out(ErrorCode), error_index : Out(INSN_INDEX_BITS)
        The first error and the index of the instruction that raised it; the accelerator stops.
    perf : Out(perf_record layout)
        Live performance counters (see docs/isa.md, perf_record).
    insn_started, insn_frontier : Out(INSN_INDEX_BITS)
        Program progress, for windowed waveforms: one past the highest instruction index any
        unit has started, and the lowest index not yet retired (dispatched or not).
    dram_req, dram_resp, dram_wr : the DRAM links.

    Parameters
    ----------
    config : AccelConfig
    checks : bool
        Add the assertions of hdl_gen/checks.py (the simulation variant ``COSIM_ASSERT=1``).
    """

    def __init__(self, config: AccelConfig, checks: bool = False) -> None:
        self.config = config
        self.checks = checks
        bus = config.dram_bytes_per_cycle
        self.read_clients = 4  # fetch, load descriptors, load data, store descriptors
        self.tag_bits = max(1, (self.read_clients - 1).bit_length())
        super().__init__(
            {
                **TOP_PORTS,
                "dram_req": Out(read_request(self.tag_bits)),
                "dram_resp": In(read_response(bus, self.tag_bits)),
                "dram_wr": Out(write_signature(bus)),
            }
        )

    def elaborate(self, platform: object) -> Module:
        m = Module()
        c = self.config
        m.submodules.fetch = fetch = Fetch(c)
        m.submodules.load = load = LoadUnit(c)
        m.submodules.compute = compute = ComputeUnit(c)
        m.submodules.store = store = StoreUnit(c)
        units = (load, compute, store)
        halt = Signal()
        self._queues(m, fetch, load, compute, store)
        counters = self._tokens(m, load, compute, store)
        self._dram(m, fetch, load, store)
        self._memories(m, load, compute, store)
        for unit in (load, store):
            m.d.comb += [unit.desc_base.eq(self.desc_base), unit.desc_count.eq(self.desc_count)]
        m.d.comb += [fetch.start.eq(self.start & ~self.running), fetch.insn_base.eq(self.insn_base)]

        # Status: running -> done, or the first error (which halts everything).
        with m.If(self.start & ~self.running & ~self.done):
            m.d.sync += self.running.eq(1)
        drained = fetch.ended & load.idle & compute.idle & store.idle
        with m.If(self.running & drained & ~self.error):
            m.d.sync += [self.done.eq(1), self.running.eq(0)]
        m.d.comb += halt.eq(self.error)
        m.d.comb += fetch.halt.eq(halt)
        for unit in units:
            m.d.comb += unit.halt.eq(halt)

        # Later calls of _fail win in Amaranth, so the first source listed has priority.
        self._watchdog(m, fetch, load, compute, store)
        self._deadlock(m, fetch, units)
        for unit in reversed(units):
            self._fail(m, unit.error, unit.error_code, unit.index)
        self._fail(m, fetch.error, fetch.error_code, fetch.pc)
        self._launch_check(m)
        self._progress(m, fetch, units)
        self._counters(m, fetch, load, compute, store)
        if self.checks:
            self._checks(m, fetch, counters, halt)
        return m

    def _queues(
        self, m: Module, fetch: Fetch, load: LoadUnit, compute: ComputeUnit, store: StoreUnit
    ) -> None:
        """The instruction queues between fetch and the units."""
        c = self.config
        for name, source, unit in (
            ("load", fetch.load_q, load),
            ("compute", fetch.compute_q, compute),
            ("store", fetch.store_q, store),
        ):
            queue = fifo.SyncFIFOBuffered(width=QUEUE_ENTRY.size, depth=c.queue_depth)
            m.submodules[f"{name}_queue"] = queue
            m.d.comb += [
                queue.w_en.eq(source.valid),
                queue.w_data.eq(source.payload),
                source.ready.eq(queue.w_rdy),
                unit.queue.valid.eq(queue.r_rdy),
                unit.queue.payload.eq(queue.r_data),
                queue.r_en.eq(unit.queue.ready),
            ]

    def _tokens(
        self, m: Module, load: LoadUnit, compute: ComputeUnit, store: StoreUnit
    ) -> dict[str, TokenCounter]:
        """The dependency token counters: load->compute, compute->load, compute->store,
        store->compute. Each unit pushes into the counter towards a neighbour and pops from the
        one back from it."""
        c = self.config
        counters = {}
        for name in ("l2c", "c2l", "c2s", "s2c"):
            counters[name] = m.submodules[f"tokens_{name}"] = TokenCounter(c.token_depth)
        # (a unit, its side towards the neighbour, the counter it pushes to, the one it pops)
        links = [
            (load, "next", counters["l2c"], counters["c2l"]),
            (compute, "prev", counters["c2l"], counters["l2c"]),
            (compute, "next", counters["c2s"], counters["s2c"]),
            (store, "prev", counters["s2c"], counters["c2s"]),
        ]
        for unit, side, outgoing, incoming in links:
            m.d.comb += [
                outgoing.push.eq(getattr(unit.deps, f"push_{side}")),
                incoming.pop.eq(getattr(unit.deps, f"pop_{side}")),
                getattr(unit.deps, f"has_{side}").eq(incoming.has),
                getattr(unit.deps, f"room_{side}").eq(outgoing.room),
            ]
        return counters

    def _dram(self, m: Module, fetch: Fetch, load: LoadUnit, store: StoreUnit) -> None:
        """DRAM: reads arbitrated among fetch, load (descriptors, data) and store (descriptors);
        the store unit alone writes."""
        bus = self.config.dram_bytes_per_cycle
        m.submodules.arbiter = arbiter = ReadArbiter(self.read_clients, bus)
        for index, link in enumerate((fetch.bus, load.desc_bus, load.data_bus, store.desc_bus)):
            wiring.connect(m, link, arbiter.client(index))
        wiring.connect(m, wiring.flipped(self.dram_req), arbiter.dram_req)
        wiring.connect(m, wiring.flipped(self.dram_resp), arbiter.dram_resp)
        wiring.connect(m, wiring.flipped(self.dram_wr), store.wr)

    def _memories(self, m: Module, load: LoadUnit, compute: ComputeUnit, store: StoreUnit) -> None:
        """The local memories (ACT, WGT, PARAM, ACC) and the units' ports on them."""
        c = self.config
        m.submodules.act_mem = act_mem = memory.Memory(
            shape=c.act_line_bytes * 8, depth=c.act_lines, init=[]
        )
        m.submodules.wgt_mem = wgt_mem = memory.Memory(
            shape=c.wgt_line_bytes * 8, depth=c.wgt_lines, init=[]
        )
        m.submodules.param_mem = param_mem = memory.Memory(
            shape=param_line_bits(c), depth=c.param_lines, init=[]
        )
        m.submodules.acc_mem = acc_mem = memory.Memory(
            shape=c.acc_line_bytes * 8, depth=c.acc_lines, init=[]
        )
        _connect_write(m, act_mem, load.act)
        # ACT has three read ports for the compute unit: the window engine reads a column of
        # up to three input rows per cycle (DWCONV); the other engines use the first.
        _connect_read(m, act_mem, compute.act)
        _connect_read(m, act_mem, compute.act1)
        _connect_read(m, act_mem, compute.act2)
        _connect_write(m, wgt_mem, load.wgt)
        _connect_read(m, wgt_mem, compute.wgt)
        _connect_write(m, param_mem, load.param)
        _connect_read(m, param_mem, compute.param)
        _connect_read(m, param_mem, store.param)
        _connect_read(m, act_mem, store.act)  # a STORE's residual (use_res)
        acc_write = _connect_write(m, acc_mem, compute.acc_wr)
        _connect_read(m, acc_mem, compute.acc_rd, transparent_for=(acc_write,))
        _connect_read(m, acc_mem, store.acc)

    def _fail(self, m: Module, condition: Value, code: Value, index: Value) -> None:
        """Stop with the first error: its code and the index of the instruction that raised it."""
        with m.If(condition & ~self.error):
            m.d.sync += [
                self.error.eq(1),
                self.error_code.eq(code),
                self.error_index.eq(index),
                self.running.eq(0),
            ]

    def _watchdog(
        self, m: Module, fetch: Fetch, load: LoadUnit, compute: ComputeUnit, store: StoreUnit
    ) -> None:
        """WATCHDOG: ``watchdog_cycles`` cycles in a row without any progress. Progress is a
        transfer (an instruction into a queue, DRAM data in or out) or a unit's work (a retire,
        the array, an ACC or WGT access); a queue that merely has room is none, nor is waiting
        for DRAM, so a watchdog shorter than the DRAM latency stops at the first fetch."""
        c = self.config
        watchdog = Signal(range(c.watchdog_cycles + 1))
        progress = (
            load.retired
            | compute.retired
            | store.retired
            | (fetch.load_q.valid & fetch.load_q.ready)
            | (fetch.compute_q.valid & fetch.compute_q.ready)
            | (fetch.store_q.valid & fetch.store_q.ready)
            | self.dram_resp.valid
            | self.dram_wr.valid
            | compute.array_active
            | compute.acc_wr.en
            | compute.wgt.en
        )
        with m.If(~self.running | progress):
            m.d.sync += watchdog.eq(0)
        with m.Elif(watchdog < c.watchdog_cycles):
            m.d.sync += watchdog.eq(watchdog + 1)
        self._fail(m, watchdog == c.watchdog_cycles, isa.ErrorCode.WATCHDOG, fetch.pc)

    def _deadlock(self, m: Module, fetch: Fetch, units: tuple) -> None:
        """DEADLOCK: fetch cannot move and every unit is idle or waiting for a token - no load
        line on its way but one waiting to push, no GEMM row on its way to ACC - for
        DEADLOCK_CYCLES cycles; the error names the waiting instruction."""
        load, compute, store = units
        blocked_for = Signal(range(DEADLOCK_CYCLES + 1))
        fetch_blocked = fetch.ended | fetch.stalled
        units_blocked = (
            (load.idle | load.token_wait)
            & ~load.landing
            & (compute.idle | compute.token_wait)
            & ~compute.draining
            & (store.idle | store.token_wait)
        )
        waiting = load.token_wait | compute.token_wait | store.token_wait | fetch.stalled
        with m.If(self.running & fetch_blocked & units_blocked & waiting):
            with m.If(blocked_for < DEADLOCK_CYCLES):
                m.d.sync += blocked_for.eq(blocked_for + 1)
        with m.Else():
            m.d.sync += blocked_for.eq(0)
        waiting_index = Signal(isa.INSN_INDEX_BITS)
        m.d.comb += waiting_index.eq(fetch.pc)
        for unit in reversed(units):  # LOAD's instruction first, then COMPUTE's, STORE's
            with m.If(unit.token_wait):
                # The waiting instruction: the queue head while it waits to pop (`index` still
                # names the unit's previous one), the current one while it waits to push.
                m.d.comb += waiting_index.eq(unit.pending_index)
        self._fail(m, blocked_for == DEADLOCK_CYCLES, isa.ErrorCode.DEADLOCK, waiting_index)

    def _launch_check(self, m: Module) -> None:
        """The launch registers (checked first, at instruction 0, as the ISA simulator does): a
        16-byte aligned program and a 64-byte aligned descriptor table inside DRAM."""
        c = self.config
        bad_launch = Signal()
        with m.If(self.start & ~self.running & ~self.done):
            table_end = self.desc_base + self.desc_count * isa.DESC_BYTES
            m.d.sync += bad_launch.eq(
                (self.insn_base % isa.INSN_BYTES != 0)
                | (self.desc_base % isa.DESC_BYTES != 0)
                | (table_end > c.dram_bytes)
            )
        self._fail(m, self.running & bad_launch, isa.ErrorCode.DRAM_RANGE, 0)

    def _counters(
        self, m: Module, fetch: Fetch, load: LoadUnit, compute: ComputeUnit, store: StoreUnit
    ) -> None:
        """The performance counters (the PERF instruction snapshots them)."""
        c = self.config
        bus = c.dram_bytes_per_cycle
        perf = self.perf
        events = {
            "cycles": self.running,
            "insns_retired": load.retired + compute.retired + store.retired,
            "load_busy": load.busy,
            "compute_busy": compute.busy,
            "store_busy": store.busy,
            "array_active": compute.array_active,
            "weight_load": compute.weight_load,
            "load_token_wait": load.token_wait,
            "compute_token_wait": compute.token_wait,
            "store_token_wait": store.token_wait,
            "dram_read_bytes": self.dram_resp.valid * bus,
            "dram_write_bytes": self.dram_wr.valid
            * sum(self.dram_wr.payload.strb[i] for i in range(bus)),
            "dram_stall": load.dram_wait,
            "macs": compute.array_active * (c.rows * c.cols) + compute.window_macs,
            "fetch_stall": fetch.stalled,
        }
        for name, amount in events.items():
            counter = getattr(perf, name)
            with m.If(self.running):
                m.d.sync += counter.eq(counter + amount)
        m.d.comb += store.perf.eq(perf)

    def _checks(
        self, m: Module, fetch: Fetch, counters: dict[str, TokenCounter], halt: Signal
    ) -> None:
        """Assertions (hdl_gen/checks.py): the stream rules of fetch's queue links and of the
        DRAM links, token counters within bounds, DRAM addresses inside the DRAM, writes with
        strobes, a defined error code. An error halts every unit and withdraws fetch's offers
        (fetch's own error a cycle before the halt): the stream rules hold until then."""
        c = self.config
        for name in ("load_q", "compute_q", "store_q"):
            link = getattr(fetch, name)
            stopped = halt | fetch.error  # fetch stops offering as soon as it finds an error
            checks.stream_rules(m, f"fetch.{name}", link.valid, link.ready, link.payload, stopped)
        for name, link in (("dram_req", self.dram_req), ("dram_wr", self.dram_wr)):
            checks.stream_rules(m, name, link.valid, link.ready, link.payload, halt)
            checks.in_range(m, f"{name}.addr", link.valid, link.payload.addr, c.dram_bytes)
        # Byte addresses need not be bus-aligned (the DRAM aligns them down and a narrow write
        # strobes the bytes at the address's offset), but a write strobes at least one byte.
        checks.check(m, "dram_wr.strobes", ~self.dram_wr.valid | (self.dram_wr.payload.strb != 0))
        for name, counter in counters.items():
            checks.counter_bounds(
                m, f"tokens_{name}", counter.push, counter.pop, counter.count, c.token_depth
            )
        defined = max(code.value for code in isa.ErrorCode)
        checks.check(m, "error_code.defined", self.error_code.as_value() <= defined)

    def _progress(self, m: Module, fetch: Fetch, units: tuple) -> None:
        """Drive ``insn_started`` and ``insn_frontier`` (units run their queues in order)."""
        highest = self.insn_started
        for unit in units:
            begins = unit.queue.valid & unit.queue.ready
            candidate = Signal(isa.INSN_INDEX_BITS)
            m.d.comb += candidate.eq(unit.queue.payload.index + 1)
            larger = Signal(isa.INSN_INDEX_BITS)
            m.d.comb += larger.eq(Mux(begins & (candidate > highest), candidate, highest))
            highest = larger
        m.d.sync += self.insn_started.eq(highest)
        frontier = fetch.pc
        for unit in units:
            oldest = Signal(isa.INSN_INDEX_BITS)
            m.d.comb += oldest.eq(
                Mux(unit.pending & (unit.pending_index < frontier), unit.pending_index, frontier)
            )
            frontier = oldest
        m.d.comb += self.insn_frontier.eq(frontier)


def _connect_write(m: Module, mem: memory.Memory, port: wiring.PureInterface) -> memory.WritePort:
    """A write port of ``mem`` driven by a unit's write port."""
    w = mem.write_port()
    m.d.comb += [w.addr.eq(port.addr), w.data.eq(port.data), w.en.eq(port.en)]
    return w


def _connect_read(
    m: Module, mem: memory.Memory, port: wiring.PureInterface, transparent_for: tuple = ()
) -> None:
    """A read port of ``mem`` serving a unit's read port."""
    r = mem.read_port(transparent_for=transparent_for)
    m.d.comb += [r.addr.eq(port.addr), r.en.eq(port.en), port.data.eq(r.data)]

"""Drive a Verilated design directly from Python (pyverilator): unit tests, notebooks, debugging.

>>> from hdl_gen.pe import ProcessingElement
>>> from sim.verilate.block import open_component
>>> with open_component(ProcessingElement(), "pe") as dut:
...     dut.reset()
...     dut["a_in"], dut["w_en"], dut["w_data"] = -3, 1, 7
...     dut.step()                  # one clock cycle: rising edge, then falling edge
...     dut.signed("psum_out")
...     dut.trace()                 # from now on: waves/pe-pyverilator.vcd (built with waves)

Values are integers: writing sets an input and re-evaluates the model (combinational outputs
follow at once, as in pyverilator), reading gives the unsigned bits (:meth:`Block.signed` for
two's complement). :meth:`Block.step` runs its cycles in C++ (sim/csrc/pyverilator_clock.cpp),
so stepping many cycles costs one Python call. Only top-level ports are visible.

The model is a shared object loaded in this process; opening the same build twice shares its
global state (e.g. the DPI DRAM of the accelerator), so use one :class:`Block` per build at a time.
"""

from __future__ import annotations

import ctypes
import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.verilate.build import BUILD_ROOT, WORK_ROOT, BuildSpec, BuiltModel
from sim.verilate.pyverilator_build import PYVERILATOR_MAIN, build_pyverilator

WAVES_ROOT = WORK_ROOT / "waves"


class SignalError(LookupError):
    """A port name that does not exist, or an input/output mix-up; the message lists the ports."""

    def __str__(self) -> str:  # LookupError would quote the message
        return str(self.args[0])


@dataclass(frozen=True)
class Port:
    name: str  # as in the Verilog (Amaranth: "operands__payload")
    width: int
    direction: str  # "input" or "output"


class Block:
    """A pyverilator model with one clock: reset, step, set/get ports by name, optional trace.

    Parameters
    ----------
    model : BuiltModel
        A build from :func:`sim.verilate.pyverilator_build.build_pyverilator` (or
        :func:`open_verilog`, :func:`open_component`, which build and open).
    clock, reset : str
        Names of the clock and (active-high, synchronous) reset inputs; ``reset`` may be absent.
    plusargs : sequence of str
        ``+name=value`` arguments the model's ``$value$plusargs`` reads (pyverilator's
        ``command_args``).
    """

    def __init__(
        self,
        model: BuiltModel,
        *,
        clock: str = "clk",
        reset: str = "rst",
        plusargs: Sequence[str] = (),
    ) -> None:
        from pyverilator import PyVerilator

        if model.spec.main != PYVERILATOR_MAIN:
            raise ValueError(f"{model.build_dir.name} is not a pyverilator build")
        self.model = model
        self.name = model.spec.toplevel
        # pyverilator's own API, if wanted; argv[0] first, then the ``+name=value`` plusargs
        self.sim: Any = PyVerilator(str(model.executable), command_args=[self.name, *plusargs])
        self.lib: ctypes.CDLL = self.sim.lib
        # pyverilator names signals as Verilator encodes them ("a___05Fb" for "a__b"); the
        # Signal objects know both.
        self._signals = {sig.short_name: sig for sig in self.sim.all_signals.values()}
        self.ports = {
            name: Port(name, sig.width, "input" if hasattr(sig, "write") else "output")
            for name, sig in self._signals.items()
        }
        self._clock = self._port(clock, "input")
        self._reset, self._reset_name = (reset if reset in self.ports else None), reset
        self.cycle = 0  # cycles stepped since the model was opened
        self._setup_clock_loop()
        self._trace: int | None = None
        self.trace_path: Path | None = None

    # ---- ports ---------------------------------------------------------------------------------
    def _port(self, name: str, direction: str | None = None) -> Port:
        port = self.ports.get(name)
        if port is None:
            close = difflib.get_close_matches(name, self.ports, n=3, cutoff=0.5)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise SignalError(
                f"{self.name} has no port {name!r}{hint} (ports: {', '.join(sorted(self.ports))})"
            )
        if direction is not None and port.direction != direction:
            same = sorted(p.name for p in self.ports.values() if p.direction == direction)
            raise SignalError(
                f"{name!r} is an {port.direction} of {self.name}, not an {direction} "
                f"({direction}s: {', '.join(same)})"
            )
        return port

    def __getitem__(self, name: str) -> int:
        self._port(name)
        return int(self._signals[name].value)

    def __setitem__(self, name: str, value: int) -> None:
        port = self._port(name, "input")
        value = int(value)
        if not -(1 << (port.width - 1)) <= value < (1 << port.width):
            raise ValueError(f"{value} does not fit the {port.width}-bit input {name!r}")
        self._signals[name].write(value & ((1 << port.width) - 1))

    def signed(self, name: str) -> int:
        """The value of ``name`` as a two's-complement number."""
        width = self._port(name).width
        value = self[name]
        return value - (1 << width) if value >> (width - 1) else value

    # ---- clock ---------------------------------------------------------------------------------
    def _function(self, name: str) -> int:
        address = ctypes.cast(getattr(self.lib, name), ctypes.c_void_p).value
        assert address is not None
        return address

    def _setup_clock_loop(self) -> None:
        clock_loop = self.lib.cosim_clock
        clock_loop.restype = ctypes.c_uint64
        clock_loop.argtypes = [
            ctypes.c_void_p,  # the model
            ctypes.c_void_p,  # set_<clock>
            ctypes.POINTER(ctypes.c_void_p),  # get_<stop> functions
            ctypes.c_uint32,
            ctypes.c_uint64,  # cycles
            ctypes.c_void_p,  # trace or NULL
            ctypes.POINTER(ctypes.c_uint64),  # time
            ctypes.c_uint64,  # half period in trace time units
        ]
        self._clock_loop = clock_loop
        self._set_clock = self._function(f"set_{self._signals[self._clock.name].verilator_name}")
        self._stops: dict[tuple[str, ...], Any] = {}
        self.lib.cosim_time_precision.restype = ctypes.c_int
        self.lib.cosim_time_precision.argtypes = [ctypes.c_void_p]
        precision = self.lib.cosim_time_precision(self.sim.model)  # -12: trace times in ps
        period = self.model.spec.clock_period_ns * 10 ** max(0, -9 - precision)
        self._half = ctypes.c_uint64(max(1, period // 2))
        self._time = ctypes.c_uint64(0)

    def step(self, cycles: int = 1, until: Sequence[str] = ()) -> int:
        """Run ``cycles`` clock cycles, or fewer: stop after the first cycle that ends with one of
        the ``until`` ports non-zero. Returns the number of cycles run."""
        if cycles < 0:
            raise ValueError(f"cycles must be >= 0, not {cycles}")
        key = tuple(until)
        stops = self._stops.get(key)
        if stops is None:
            for name in key:
                self._port(name)
            getters = [self._function(f"get_{self._signals[n].verilator_name}") for n in key]
            stops = self._stops[key] = (ctypes.c_void_p * max(1, len(key)))(*getters)
        ran = int(
            self._clock_loop(
                self.sim.model,
                self._set_clock,
                stops,
                len(key),
                cycles,
                self._trace,
                ctypes.byref(self._time),
                self._half,
            )
        )
        self.cycle += ran
        return ran

    def reset(self, cycles: int = 2) -> None:
        """Hold the reset input high for ``cycles`` cycles, then release it."""
        if self._reset is None:
            raise SignalError(
                f"{self.name} has no reset input {self._reset_name!r}; open it with reset=<name> "
                "or drive the reset by hand"
            )
        self[self._reset] = 1
        self.step(cycles)
        self[self._reset] = 0

    # ---- waves ---------------------------------------------------------------------------------
    def trace(self, path: Path | str | None = None) -> Path:
        """Record every following cycle to ``path`` (default ``waves/<top>-pyverilator.<fmt>``);
        the format is the build's (``waves="vcd"`` or ``"fst"``). Returns the path."""
        waves = self.model.spec.waves
        if waves is None:
            raise RuntimeError(
                f"{self.name} was built without waves; open it with waves='vcd' or waves='fst'"
            )
        if self._trace is not None:
            raise RuntimeError(f"already tracing to {self.trace_path}")
        target = Path(path) if path is not None else WAVES_ROOT / f"{self.name}-pyverilator.{waves}"
        target.parent.mkdir(parents=True, exist_ok=True)
        start = self.lib.start_vcd_trace
        start.restype = ctypes.c_void_p
        start.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        self._trace = start(self.sim.model, str(target).encode())
        self.trace_path = target
        return target

    def stop_trace(self) -> None:
        """Dump the current state and close the trace file."""
        if self._trace is None:
            return
        self.lib.cosim_dump.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
        self.lib.cosim_dump(self._trace, self._time.value)
        self.lib.cosim_close_trace.argtypes = [ctypes.c_void_p]
        self.lib.cosim_close_trace(self._trace)
        self._trace = None

    # ---- lifetime ------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the trace and free the model."""
        self.stop_trace()
        if self.sim.model is not None:
            destruct = self.lib.destruct
            destruct.argtypes = [ctypes.c_void_p]
            destruct(self.sim.model)
            self.sim.model = None  # pyverilator's __del__ would free it again

    def __enter__(self) -> Block:
        return self

    def __del__(self) -> None:  # a forgotten close() must not leave a truncated trace
        if getattr(self, "_trace", None) is not None:
            self.stop_trace()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        ports = ", ".join(f"{p.name}[{p.width}]" for p in self.ports.values())
        return f"<Block {self.name} at cycle {self.cycle}: {ports}>"


def open_verilog(
    sources: Sequence[Path | str],
    top: str,
    *,
    waves: str | None = None,
    clock: str = "clk",
    reset: str = "rst",
    tag: str = "block",
) -> Block:
    """Build (or reuse from the cache) Verilog ``sources`` with top module ``top`` and open it.
    ``waves``: ``"vcd"`` or ``"fst"`` to allow :meth:`Block.trace`; ``tag`` names the build."""
    spec = BuildSpec(top, tag, tuple(Path(s) for s in sources), top, waves=waves)
    return Block(build_pyverilator(spec, clock), clock=clock, reset=reset)


def open_component(component: Any, name: str, *, waves: str | None = None) -> Block:
    """Generate Verilog for an Amaranth component (top module ``name``), build it and open it."""
    from hdl_gen.emit import write_by_content

    path, digest = write_by_content(component, name, BUILD_ROOT / "gen")
    return open_verilog([path], name, waves=waves, tag=digest)

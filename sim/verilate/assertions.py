"""Name a failed RTL assertion from a simulator log.

An assertion of hdl_gen/checks.py prints ``assertion <name>: failed`` and Verilator (``--assert``)
follows with ``%Error: <file>:<line>: Assertion failed in <scope>`` and stops the simulator;
cocotb then logs the simulation time it stopped at. :func:`find` turns that into one line with
the name, the scope, the clock cycle and a waveform window around it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FAILED = re.compile(
    r"assertion (?P<name>\S+): failed\s*\[\d+\]\s*%Error: (?P<where>\S+?):(?P<line>\d+): "
    r"Assertion failed in (?P<scope>\S+?):"
)
_TIME = re.compile(r"^\s*(?P<ns>\d+(?:\.\d+)?)ns\s", re.M)
WINDOW_BEFORE = 200  # cycles of waveform before the failing edge


@dataclass(frozen=True)
class FailedAssertion:
    name: str
    scope: str
    source: str  # file:line of the assert statement in the generated Verilog
    time_ns: float | None
    cycle: int | None  # rising clock edges since time 0, when the clock period is known

    def window(self) -> tuple[int, int] | None:
        """A cycle window (``WAVE_CYCLES=a:b``) ending just after the failure."""
        if self.cycle is None:
            return None
        return max(0, self.cycle - WINDOW_BEFORE), self.cycle + 2

    def describe(self) -> str:
        when = f" at cycle {self.cycle}" if self.cycle is not None else ""
        when += f" ({self.time_ns:g} ns)" if self.time_ns is not None else ""
        window = self.window()
        wave = f"; waveform window: WAVE_CYCLES={window[0]}:{window[1]}" if window else ""
        return f"assertion {self.name} failed{when} in {self.scope} ({self.source}){wave}"


def find(log: str, clock_period_ns: float | None = None) -> FailedAssertion | None:
    """The first failed assertion in ``log`` (a cocotb sim.log), or ``None``. With the clock's
    period (first rising edge at half a period, as the simulators here run it), the cycle."""
    match = _FAILED.search(log)
    if match is None:
        return None
    later = _TIME.search(log, match.end())
    time_ns = float(later.group("ns")) if later else None
    cycle = None
    if time_ns is not None and clock_period_ns:
        cycle = int((time_ns - clock_period_ns / 2) // clock_period_ns)
    source = f"{match.group('where').rsplit('/', 1)[-1]}:{match.group('line')}"
    return FailedAssertion(match.group("name"), match.group("scope"), source, time_ns, cycle)

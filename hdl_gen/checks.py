"""Assertions on the accelerator's invariants, in Amaranth (``Assert`` in the sync domain).

They are generated only into the assertion variant of the RTL (``SimTop(config, checks=True)``,
built when ``COSIM_ASSERT=1``; sim/backends/accelerator.py) and compiled with Verilator's
``--assert``: the committed RTL and the normal simulation builds carry none. Each message starts
with ``assertion <name>:`` so a failed run can name it (sim/verilate/assertions.py).
"""

from __future__ import annotations

from amaranth import Module, Signal, Value
from amaranth.hdl import Assert

PREFIX = "assertion "


def check(m: Module, name: str, ok: Value) -> None:
    """``ok`` must hold at every rising clock edge outside reset; the failure names ``name``."""
    m.d.sync += Assert(ok, f"{PREFIX}{name}: failed")


def stream_rules(
    m: Module, name: str, valid: Value, ready: Value, payload: Value, stopped: Value | int = 0
) -> None:
    """The stream rules (amaranth docs/stdlib/stream.rst) a source must keep: once ``valid``
    is high it stays high, with the same ``payload``, until ``ready`` takes the transfer -
    except when ``stopped`` (an error halts the accelerator and withdraws every offer)."""
    waiting = Signal(name=f"{name}_waiting")  # last cycle: valid and not ready
    held = Signal.like(payload, name=f"{name}_held")
    m.d.sync += [waiting.eq(valid & ~ready), held.eq(payload)]
    check(m, f"{name}.valid_held", ~waiting | valid | stopped)
    check(m, f"{name}.payload_stable", ~waiting | (payload == held) | stopped)


def counter_bounds(m: Module, name: str, push: Value, pop: Value, count: Value, depth: int) -> None:
    """A token counter is never pushed when full or popped when empty (net of the other)."""
    check(m, f"{name}.no_overflow", ~(push & ~pop & (count == depth)))
    check(m, f"{name}.no_underflow", ~(pop & ~push & (count == 0)))


def in_range(m: Module, name: str, valid: Value, value: Value, limit: int) -> None:
    """While ``valid``, ``value`` is below ``limit``."""
    check(m, f"{name}.in_range", ~valid | (value < limit))

"""User hooks on RTL runs: cocotb coroutines of your own, attached to every device program the
rtl backend runs (``make sim ... HOOKS=my_pkg.my_monitor``, ``cosim sim --hooks``, or
``COSIM_HOOKS`` in the environment of ``make test`` / the Python API).

A hook module (comma-separate several) defines::

    async def hook(dut, ctx: HookContext) -> None: ...

started in the simulator process just before the program's reset sequence (``await
FallingEdge(dut.rst)`` to act after reset; ``start`` follows one cycle later), and cancelled when
the program ends (done, error or timeout). ``dut`` is the testbench top (sim/hdl/tb_top.v): its
ports, and in a hook build (its own cache key) the accelerator's DRAM streams under ``dut.dut``
(``dram_req__*``, ``dram_resp__*``, ``dram_wr__*``) and its live PERF counters
``dut.dut.accel.perf``, forceable (cocotb ``Force``/``Release``). What the hook puts in
``ctx.result`` (plain JSON) lands in ``report.json`` under ``hooks.<module>``, one entry per
device program with the layer name of each PERF record. Optionally::

    def on_report(report: dict) -> str | None: ...

checks the finished report: it returns a line to print, or raises :class:`HookCheckFailed`.
Every call into a hook module (its import, each step of ``hook`` between two awaits,
``on_report``) is bounded in wall-clock time by ``COSIM_HOOK_SECONDS``: one that overstays is
stopped (:class:`HookTimeout`, naming it). This module imports nothing heavy: the simulator
process loads it too.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import signal
import stat
import sys
import threading
from collections.abc import Coroutine, Generator, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from sim import knobs

ENV = knobs.HOOKS.name


class HookError(ValueError):
    """A HOOKS value names no importable hook module; the message says which and why."""


class HookCheckFailed(AssertionError):
    """A hook's ``on_report`` found the report wrong."""


class HookFailed(RuntimeError):
    """The hook's own code failed - its ``on_report`` raised something other than
    :class:`HookCheckFailed` (a bug of the hook, not a finding about the report), or a call into
    it overstayed (:class:`HookTimeout`); the message names the hook."""


class HookTimeout(HookFailed):
    """A call into a hook module ran longer than its time bound and was stopped."""


def time_bound() -> float:
    """The bound of one call into a hook, in seconds (``COSIM_HOOK_SECONDS``)."""
    try:
        return knobs.HOOK_SECONDS.seconds()
    except knobs.KnobError as exc:
        raise HookError(str(exc)) from None


@contextlib.contextmanager
def bounded(name: str, seconds: float) -> Iterator[None]:
    """Stop the block with :class:`HookTimeout` naming hook ``name`` after ``seconds`` (a
    SIGALRM timer: only on the main thread; elsewhere the block runs unbounded)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(_signum: int, _frame: object) -> None:
        raise HookTimeout(
            f"hook {name!r} ran longer than its time bound of {seconds:g} s "
            f"({knobs.HOOK_SECONDS.name}) and was stopped"
        )

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class _BoundedSteps:
    """Awaitable that drives a hook's coroutine one step (from an await to the next) at a
    time, each step under :func:`bounded`: cocotb sees the triggers the hook awaits."""

    def __init__(self, coro: Coroutine[Any, Any, Any], name: str, seconds: float) -> None:
        self.coro, self.name, self.seconds = coro, name, seconds

    def __await__(self) -> Generator[Any, Any, Any]:
        value: Any = None
        error: BaseException | None = None
        while True:
            with bounded(self.name, self.seconds):
                try:
                    trigger = self.coro.send(value) if error is None else self.coro.throw(error)
                except StopIteration as stop:
                    return stop.value
            try:
                value, error = (yield trigger), None
            except BaseException as exc:  # noqa: BLE001 - cancellation: handed to the hook
                value, error = None, exc


async def run_hook(module: ModuleType, dut: Any, ctx: HookContext, seconds: float) -> Any:
    """``module.hook(dut, ctx)`` with each of its steps bounded to ``seconds``."""
    return await _BoundedSteps(module.hook(dut, ctx), module.__name__, seconds)


@dataclass
class HookContext:
    """What a hook gets besides ``dut``.

    Attributes
    ----------
    index : int
        The program's position in the simulator's batch.
    run : dict
        Its job entry: launch registers, ``perf_base`` / ``perf_count`` when the program writes
        PERF records, ...
    dram : object
        The DPI DRAM (sim/backends/dram.py): ``read_bytes(address, size)``.
    perf_bytes : int
        Size of one PERF record.
    bus_bytes : int
        DRAM bytes per beat (the config's ``dram_bytes_per_cycle``).
    result : dict
        Filled by the hook; reported.
    """

    index: int
    run: dict[str, Any]
    dram: Any
    perf_bytes: int
    bus_bytes: int
    result: dict[str, Any] = field(default_factory=dict)


def names(value: str | None = None) -> list[str]:
    """Module names from ``value`` (default: ``$COSIM_HOOKS``), comma-separated."""
    value = knobs.HOOKS.get() if value is None else value
    return [name.strip() for name in value.split(",") if name.strip()]


def _unreadable_source(name: str) -> str | None:
    """The ``<name>.py`` on ``sys.path`` that exists but is no regular file (a FIFO, a device,
    a directory: Python's import skips it and says the module is missing), if any."""
    relative = name.replace(".", os.sep) + ".py"
    for entry in sys.path:
        path = os.path.join(entry or ".", relative)
        try:
            mode = os.stat(path).st_mode
        except OSError:
            continue
        if not stat.S_ISREG(mode):
            return path
    return None


def load(modules: list[str]) -> list[ModuleType]:
    """Import each hook module; :class:`HookError` names the first that is missing or has no
    ``async def hook(dut, ctx)``."""
    loaded = []
    seconds = time_bound()
    for name in modules:
        try:
            with bounded(name, seconds):
                module = importlib.import_module(name)
        except HookTimeout as exc:
            raise HookError(f"HOOKS: importing {name!r}: {exc}") from None
        except ModuleNotFoundError as exc:
            source = _unreadable_source(exc.name or name)
            if source is not None:
                raise HookError(
                    f"HOOKS: module {name!r}: {source} is not a regular file; give a file"
                ) from None
            raise HookError(f"HOOKS: no module named {exc.name!r} (from {name!r})") from None
        except Exception as exc:  # the user's module failed to import: say so in one line
            raise HookError(
                f"HOOKS: importing {name!r} failed: {type(exc).__name__}: {exc}"
            ) from None
        if not inspect.iscoroutinefunction(getattr(module, "hook", None)):
            raise HookError(f"HOOKS: {name!r} defines no `async def hook(dut, ctx)`")
        loaded.append(module)
    return loaded


def check_report(report: dict[str, Any]) -> list[str]:
    """Run the ``on_report`` of each hook that ran (``report["hooks"]``); their lines."""
    lines = []
    seconds = time_bound()
    for module in load(list(report.get("hooks", {}))):
        check = getattr(module, "on_report", None)
        if check is not None:
            try:
                with bounded(module.__name__, seconds):
                    line = check(report)
            except (HookCheckFailed, HookFailed):  # a finding, or the time bound (named)
                raise
            except Exception as exc:  # the user's code failed: name it, in one line
                raise HookFailed(
                    f"hook {module.__name__}: on_report raised {type(exc).__name__}: {exc}"
                ) from None
            if line:
                lines.append(f"{module.__name__}: {line}")
    return lines

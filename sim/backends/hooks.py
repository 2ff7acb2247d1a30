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
This module imports nothing heavy: the simulator process loads it too.
"""

from __future__ import annotations

import importlib
import inspect
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
    """A hook's ``on_report`` raised something other than :class:`HookCheckFailed` (a bug of
    the hook, not a finding about the report); the message names the hook."""


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


def load(modules: list[str]) -> list[ModuleType]:
    """Import each hook module; :class:`HookError` names the first that is missing or has no
    ``async def hook(dut, ctx)``."""
    loaded = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
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
    for module in load(list(report.get("hooks", {}))):
        check = getattr(module, "on_report", None)
        if check is not None:
            try:
                line = check(report)
            except HookCheckFailed:
                raise
            except Exception as exc:  # the user's code failed: name it, in one line
                raise HookFailed(
                    f"hook {module.__name__}: on_report raised {type(exc).__name__}: {exc}"
                ) from None
            if line:
                lines.append(f"{module.__name__}: {line}")
    return lines

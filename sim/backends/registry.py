"""The backends by name: ``isa``, ``rtl`` and ``pyverilator``. Each is imported when first asked
for, so a run on the ISA simulator does not load the Verilator build layer."""

from __future__ import annotations

import importlib

from sim.backends.base import Backend

#: name -> (module, class), and what each is for (``make help``, ``--help``).
BACKENDS: dict[str, tuple[str, str, str]] = {
    "isa": ("sim.backends.isa", "IsaBackend", "numpy ISA simulator (golden, fast)"),
    "rtl": ("sim.backends.rtl", "RtlBackend", "Verilator + cocotb (the real thing)"),
    "pyverilator": (
        "sim.backends.pyverilator",
        "PyverilatorBackend",
        "the same RTL driven in this process by pyverilator",
    ),
}
NAMES: tuple[str, ...] = tuple(BACKENDS)


class UnknownBackend(ValueError):
    """A backend name that is not registered."""


def get_backend(name: str) -> Backend:
    """The backend called ``name``; an unknown name is an error listing the known ones."""
    if name not in BACKENDS:
        raise UnknownBackend(f"unknown backend {name!r}; choose one of {', '.join(NAMES)}")
    module, cls, _doc = BACKENDS[name]
    backend: Backend = getattr(importlib.import_module(module), cls)()
    return backend

"""Ctrl-C or SIGTERM while ``python -m sim.app.cli`` is still importing (a few seconds: numpy,
onnx, Dask): the one line and exit code a run ends with (``interrupted`` 130, ``terminated``
143), not a KeyboardInterrupt traceback. Imported first by :mod:`sim.app.cli`; acts only when
that module is the program, and :func:`release` hands the signals to the run's own handling."""

from __future__ import annotations

import os
import signal
import sys

_WORDS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}


def _end(signum: int, _frame: object) -> None:
    os.write(2, f"{_WORDS[signal.Signals(signum)]}\n".encode())
    os._exit(128 + signum)


def _is_the_program() -> bool:
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == "sim.app.cli"


_INSTALLED = _is_the_program()
if _INSTALLED:
    for _number in _WORDS:
        signal.signal(_number, _end)


def release() -> None:
    """Ctrl-C raises KeyboardInterrupt again and SIGTERM takes its default (the run's own
    handlers take over); nothing when this module did not act."""
    if _INSTALLED:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

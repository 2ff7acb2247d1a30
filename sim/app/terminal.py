"""What the command line prints, readable where people read it: whole tables also when the
output is a CI log or a pipe (rich would cut them to 80 columns), and the build layer's log
lines (what is built, its progress, how long it took) on stderr."""

from __future__ import annotations

import logging
import sys
from typing import IO, Any

#: Widest a table is drawn on a terminal-less stream before rich wraps a cell.
MAX_WIDTH = 400


def show(renderable: Any, file: IO[str] | None = None) -> None:
    """Print a rich renderable on ``file`` (stdout): at the terminal's width on a terminal,
    else as wide as it needs (no cell cut to ``…`` in a log)."""
    from rich.console import Console

    file = file or sys.stdout
    if file.isatty():
        Console(file=file).print(renderable)
        return
    console = Console(file=file, width=MAX_WIDTH)
    width = console.measure(renderable).maximum
    Console(file=file, width=min(max(width, 1), MAX_WIDTH)).print(renderable)


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg, unused-ignore]
    """Writes to whatever ``sys.stderr`` is when a message comes (not when made)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def log_to_stderr(name: str = "cosim") -> None:
    """Print the INFO messages of logger ``name`` (and its children) on stderr, once."""
    logger = logging.getLogger(name)
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        handler = _Stderr(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)

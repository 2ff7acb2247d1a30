"""The status of an RTL run while it runs: one updating line on a terminal, whole lines in a log.

On a terminal the line is redrawn in place (``\\r``) about twice a second. Where stderr is a file
or a pipe (a CI log), a carriage return would run every update into one endless line, so a whole
line is printed when a layer finishes, or after ``every_s`` seconds without one. Each line says
the layer, the cycles so far, simulated cycles per second and an ETA: the wall time so far scaled
by the share of the network's multiply-accumulates still to run (no ETA before the first layer
with MACs is done).
"""

from __future__ import annotations

import math
import sys
from typing import IO, Any

from arch.executable import Executable

__all__ = ["Progress", "eta_seconds"]

#: Seconds between lines in a log while no layer finishes.
EVERY_S = 30.0


def eta_seconds(wall_s: float, macs_done: int, macs_total: int) -> float | None:
    """Seconds still to go if the rest runs at the MACs per second so far; None when unknown."""
    if macs_done <= 0 or wall_s <= 0:
        return None
    return wall_s * max(macs_total - macs_done, 0) / macs_done


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "--"
    seconds = math.ceil(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


class Progress:
    """The progress callback of a run of ``exe`` (``{cycles, layers_done, wall_s}`` states)."""

    def __init__(self, exe: Executable, every_s: float = EVERY_S) -> None:
        self.names = [layer.name for layer in exe.layers]
        self.macs = [layer.macs for layer in exe.layers]
        self.every_s = every_s
        self.open = False  # a terminal line is drawn and not yet ended
        self._shown: tuple[int, float] | None = None  # layers done and wall time of the last line

    def line(self, state: dict[str, Any]) -> str:
        done, cycles, wall = state["layers_done"], state["cycles"], state["wall_s"]
        count = len(self.names)
        current = self.names[min(done, count - 1)]
        rate = cycles / wall if wall else 0
        eta = eta_seconds(wall, sum(self.macs[:done]), sum(self.macs))
        return (
            f"  layer {min(done + 1, count)}/{count} {current:<28} {cycles:>12,} cycles  "
            f"{rate:>10,.0f} cycles/s  ETA {_clock(eta)}"
        )

    def __call__(self, state: dict[str, Any], file: IO[str] | None = None) -> None:
        file = file or sys.stderr
        if file.isatty():
            print(f"\r{self.line(state)}", end="", file=file, flush=True)
            self.open = True
            return
        done, wall = state["layers_done"], state["wall_s"]
        if self._shown is None or done != self._shown[0] or wall - self._shown[1] >= self.every_s:
            print(self.line(state), file=file, flush=True)
            self._shown = (done, wall)

    def close(self, file: IO[str] | None = None) -> None:
        """End a drawn terminal line, so that what prints next starts on a line of its own."""
        if self.open:
            print(file=file or sys.stderr, flush=True)
            self.open = False

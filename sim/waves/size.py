"""How big a dump will be, said before it is written.

The model: bytes = window cycles x bits written per sample (the ``WAVE_SIGNALS`` selection's
widths, :mod:`sim.waves.selection`) x bytes per bit and cycle. That last number is measured on
the last dump of the same config, format and selection (kept in ``waves/.rates.json`` by
:func:`record`), else a prior per format, measured here on dumps of ``tiny`` and ``16x16``
(``docs/waveforms.md`` has the table; :data:`PRIOR_PER_BIT`): few of the written bits change
in a cycle, so a bit costs far less than the 1/8 byte a raw sample would.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from arch.config import AccelConfig
from arch.executable import DeviceProgram
from sim import knobs
from sim.waves.window import WAVES_DIR, WaveRequest, Window, resolve

WARN_ENV = knobs.WAVES_WARN_MB.name
WARN_MB = float(knobs.WAVES_WARN_MB.default)
#: Bytes per written bit and cycle before any dump of the config and selection: measured on
#: dumps of the default selection, (processing elements, rate) for tiny (the MLP, whole run)
#: and 16x16 (ResNet-18 layer3.1.conv2); other sizes in between on a log-log line. The wider
#: array's edge signals change in more cycles, so a bit costs more there. (VCD at 16x16: the
#: FST rate times tiny's VCD/FST ratio, not measured.)
PRIOR_PER_BIT: dict[str, tuple[tuple[int, float], tuple[int, float]]] = {
    "fst": ((16, 0.0122), (256, 0.0257)),
    "vcd": ((16, 0.265), (256, 0.0257 * 0.265 / 0.0122)),
}
#: ``all`` and patterns write many bits that seldom change: their prior is this share of the
#: default's (measured on tiny: 0.14 for ``all``, 0.17 for ``dut.accel.load.*``).
OTHER_SELECTION = 0.15


def prior(config: AccelConfig, fmt: str, signals: str = "default") -> float:
    """The prior bytes per bit and cycle for ``config``'s number of processing elements and
    the selection ``signals``."""
    (n0, r0), (n1, r1) = PRIOR_PER_BIT[fmt]
    slope = math.log(r1 / r0) / math.log(n1 / n0)
    share = 1.0 if signals == "default" else OTHER_SELECTION
    return share * r0 * (config.rows * config.cols / n0) ** slope


def _rates_file(directory: Path) -> Path:
    return directory / ".rates.json"


def _key(config: str, fmt: str, signals: str) -> str:
    return f"{config}/{fmt}/{signals}"


def record(
    directory: Path, config: str, fmt: str, nbytes: int, cycles: int, bits: int, signals: str
) -> None:
    """Remember a finished dump's bytes per bit and cycle for its config, format and
    selection."""
    path = _rates_file(directory)
    try:
        rates = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        rates = {}
    rates[_key(config, fmt, signals)] = nbytes / max(cycles, 1) / max(bits, 1)
    try:
        path.write_text(json.dumps(rates, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass  # a read-only waves/ keeps only the prior


def rate(
    config: AccelConfig, fmt: str, signals: str = "default", directory: Path = WAVES_DIR
) -> tuple[float, str]:
    """Bytes per written bit and cycle, and where the number comes from."""
    try:
        measured = json.loads(_rates_file(directory).read_text()).get(
            _key(config.name, fmt, signals)
        )
    except (OSError, ValueError, AttributeError):
        measured = None
    if measured:
        return float(measured), "measured on the last dump of this config and selection"
    return prior(config, fmt, signals), "a prior; no dump of this config and selection yet"


def window_cycles(window: Window, layers: Sequence[tuple[int, int, int]]) -> int:
    """Cycles of ``window`` from the layers' (first instruction, end instruction, cycles)."""
    total = sum(cycles for _a, _b, cycles in layers)
    if window.by == "cycles":
        return max(0, min(window.stop, total) - window.start)
    if window.by == "insn":
        return sum(c for a, b, c in layers if a < window.stop and b > window.start)
    return total


def estimate(cycles: int, bits: int, per_bit: float) -> int:
    """The dump's bytes: ``cycles`` x ``bits`` x ``per_bit``."""
    return int(cycles * bits * per_bit)


def announce(
    window: Window,
    cycles: int,
    bits: int,
    config: AccelConfig,
    fmt: str,
    signals: str = "default",
    directory: Path = WAVES_DIR,
) -> int:
    """Print the estimate in one line on stderr, a warning when it is over
    ``COSIM_WAVES_WARN_MB`` (default 200 MB); returns the estimate in bytes."""
    per_bit, source = rate(config, fmt, signals, directory)
    size = estimate(cycles, bits, per_bit)
    limit = float(knobs.WAVES_WARN_MB.checked() or WARN_MB)
    large = size > limit * 1e6
    print(
        f"waveform: {'warning: ' if large else ''}{window.label} spans about {cycles:,} "
        f"cycles x {bits:,} bits (WAVE_SIGNALS={signals}): about {size / 1e6:,.1f} MB of "
        f"{fmt.upper()} ({per_bit:g} bytes per bit and cycle, {source})"
        + (
            f"; over {WARN_ENV}={limit:g}: a narrower window (WAVE_CYCLES=a:b) or fewer "
            "signals (WAVE_SIGNALS=...) keeps it smaller"
            if large
            else ""
        ),
        file=sys.stderr,
    )
    return size


def check_window(
    request: WaveRequest,
    programs: list[DeviceProgram],
    layers: Sequence[Any],
    config: AccelConfig,
    bits: int,
) -> int:
    """Estimate the dump of ``request`` (``bits`` written per sample) from ``layers`` (results
    with name, insn_range and cycles, e.g. the ISA simulator's) and say it; returns it."""
    window = resolve(request, programs)
    names = {layer.name for layer in programs[window.program].layers}
    rows = [(*layer.insn_range, layer.cycles) for layer in layers if layer.name in names]
    cycles = window_cycles(window, rows)
    return announce(window, cycles, bits, config, request.fmt, request.signals, request.directory)

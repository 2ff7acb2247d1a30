"""How big a dump will be, said before it is written when that is over a threshold.

The size is the window's cycles times bytes per traced cycle: measured on the last dump of the
same config and format (kept in ``waves/.rates.json`` by :func:`record`), else a prior from
dumps of the 4x4 ``tiny`` config scaled by the number of processing elements (VCD: ~3-4 kB per
cycle measured on the MLP and the CNN; FST, not measured here, taken as a tenth of that).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from arch.config import AccelConfig
from arch.executable import DeviceProgram
from sim.verilate.toolchain import find_toolchain
from sim.waves.window import WAVES_DIR, WaveRequest, Window, resolve
from sim import knobs

WARN_ENV = knobs.WAVES_WARN_MB.name
WARN_MB = float(knobs.WAVES_WARN_MB.default)
PRIOR_PER_PE = {"vcd": 4000 / 16, "fst": 400 / 16}  # bytes per cycle per PE (tiny: 16 PEs)


def _rates_file(directory: Path) -> Path:
    return directory / ".rates.json"


def record(directory: Path, config: str, fmt: str, nbytes: int, cycles: int) -> None:
    """Remember a finished dump's bytes per cycle for its config and format."""
    path = _rates_file(directory)
    try:
        rates = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        rates = {}
    rates[f"{config}/{fmt}"] = nbytes / max(cycles, 1)
    try:
        path.write_text(json.dumps(rates, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass  # a read-only waves/ keeps only the prior


def rate(config: AccelConfig, fmt: str, directory: Path = WAVES_DIR) -> tuple[float, str]:
    """Bytes per traced cycle and where the number comes from."""
    try:
        measured = json.loads(_rates_file(directory).read_text()).get(f"{config.name}/{fmt}")
    except (OSError, ValueError):
        measured = None
    if measured:
        return float(measured), "measured on the last dump of this config"
    return PRIOR_PER_PE[fmt] * config.rows * config.cols, "a prior; no dump of this config yet"


def window_cycles(window: Window, layers: Sequence[tuple[int, int, int]]) -> int:
    """Cycles of ``window`` from the layers' (first instruction, end instruction, cycles)."""
    total = sum(cycles for _a, _b, cycles in layers)
    if window.by == "cycles":
        return max(0, min(window.stop, total) - window.start)
    if window.by == "insn":
        return sum(c for a, b, c in layers if a < window.stop and b > window.start)
    return total


def warn_if_large(
    window: Window, cycles: int, config: AccelConfig, fmt: str, directory: Path = WAVES_DIR
) -> int:
    """Print one line on stderr when the dump is estimated over ``COSIM_WAVES_WARN_MB``
    (default 200 MB); returns the estimate in bytes."""
    per_cycle, source = rate(config, fmt, directory)
    estimate = int(cycles * per_cycle)
    limit = float(knobs.WAVES_WARN_MB.checked() or WARN_MB)
    if estimate > limit * 1e6:
        print(
            f"waveform: warning: {window.label} spans about {cycles:,} cycles, about "
            f"{estimate / 1e6:,.0f} MB of {fmt.upper()} ({per_cycle:,.0f} bytes/cycle, {source}; "
            f"over {WARN_ENV}={limit:g}); a narrower window (WAVE_CYCLES=a:b) keeps it smaller",
            file=sys.stderr,
        )
    return estimate


def check_window(
    request: WaveRequest,
    programs: list[DeviceProgram],
    layers: Sequence[Any],
    config: AccelConfig,
) -> int:
    """Estimate the dump of ``request`` from ``layers`` (results with name, insn_range and
    cycles, e.g. the ISA simulator's) and warn if it is large; returns the estimate."""
    window = resolve(request, programs)
    names = {layer.name for layer in programs[window.program].layers}
    rows = [(*layer.insn_range, layer.cycles) for layer in layers if layer.name in names]
    fmt = request.fmt if request.fmt == "vcd" or find_toolchain().fst_ok else "vcd"
    return warn_if_large(window, window_cycles(window, rows), config, fmt, request.directory)

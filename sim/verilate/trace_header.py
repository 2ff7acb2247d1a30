"""The header of a traced build's dump: every signal it can write, without running a test.

The clocked cocotb harness (``sim/csrc/cocotb_main.cpp``) writes it with ``--trace-names``: the
file is opened, one sample at time 0 written and closed before cocotb starts. A waveform
selection (``WAVE_SIGNALS``, :mod:`sim.waves.selection`) is matched against its names.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from sim.verilate.build import BuildError, BuiltModel


def trace_header(model: BuiltModel) -> Path:
    """``<build dir>/signals-header.<fst|vcd>`` of the traced build ``model`` (written once)."""
    if model.spec.waves is None or model.spec.clock is None:
        raise ValueError(f"{model.spec.design} is not a traced build with the clocked harness")
    header = model.build_dir / f"signals-header.{model.spec.waves}"
    if header.exists():
        return header
    # One partial file per process: two writers of one file interleave their blocks (two
    # hierarchies in one FST, which readers refuse).
    partial = header.with_name(f"partial-{os.getpid()}-{header.name}")
    done = subprocess.run(
        [str(model.executable), "--trace-names", "--trace-file", str(partial)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or not partial.exists():
        raise BuildError(
            f"{model.executable} --trace-names wrote no header (exit {done.returncode}): "
            f"{done.stderr.strip()[-300:]}"
        )
    partial.replace(header)
    return header

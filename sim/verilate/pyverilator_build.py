"""Verilator models that pyverilator loads: the same build layer, a shared object instead of a
cocotb executable.

A pyverilator build is the :class:`~sim.verilate.build.BuildSpec` of the cocotb path with a
different "main" (sim/csrc/pyverilator_clock.cpp, which includes pyverilator-mm's generated
wrapper), compiled position-independent and linked ``-shared``. It goes through
:func:`sim.verilate.build.build`: same toolchain, flags and waivers, same content-hash cache
under ``build/verilator/`` (directory ``<design>_pyv-<config>-<key>``), same shared runtime
objects. The wrapper is generated between the Verilator and the make steps
(sim/verilate/pyverilator_compat.py, which holds every pyverilator-mm workaround).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from sim.verilate import pyverilator_compat
from sim.verilate.build import (
    BUILD_ROOT,
    SIM_ROOT,
    BuildSpec,
    BuiltModel,
    CosimVerilator,
    build,
)

PYVERILATOR_MAIN = SIM_ROOT / "csrc" / "pyverilator_clock.cpp"
COMPAT_SCRIPT = Path(pyverilator_compat.__file__)


def pyverilator_spec(spec: BuildSpec, clock: str = "clk") -> BuildSpec:
    """``spec`` built for pyverilator, with ``clock`` toggled by the C++ clock loop.

    No signal needs to be public: the wrapper reads and writes the top ports as members of the
    model class. The wrapper's fingerprint (pyverilator-mm version, compat code) enters the cache
    key as an (unused) Verilog define."""
    if spec.main is not None:
        raise ValueError(
            f"{spec.design} has its own C++ main ({spec.main}); pyverilator needs none"
        )
    return dataclasses.replace(
        spec,
        design=f"{spec.design}_pyv",
        public=(),
        main=PYVERILATOR_MAIN,
        clock=clock,
        extra_args=(
            *spec.extra_args,
            "-CFLAGS",
            pyverilator_compat.CFLAGS,
            "-LDFLAGS",
            pyverilator_compat.LDFLAGS,
            f"+define+COSIM_PYVERILATOR_WRAPPER={pyverilator_compat.fingerprint()}",
        ),
    )


class _PyverilatorRunner(CosimVerilator):
    """The cocotb-path build commands with one more step: write the wrapper after Verilator."""

    def _build_command(self) -> list[list[str]]:
        verilate, *rest = super()._build_command()
        wrapper = [sys.executable, str(COMPAT_SCRIPT), "wrapper", str(self.build_dir)]
        return [verilate, wrapper, *rest]


def build_pyverilator(spec: BuildSpec, clock: str = "clk", root: Path = BUILD_ROOT) -> BuiltModel:
    """Build (or reuse) ``spec`` as a pyverilator model; its ``executable`` is the shared object.

    Raises :class:`sim.verilate.build.BuildError` (naming the build log) when the build fails."""
    return build(pyverilator_spec(spec, clock), root, runner_class=_PyverilatorRunner)

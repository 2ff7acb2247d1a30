"""Verilator settings chosen by the array's size.

The store unit's output line (``lanes``, hdl_gen/store_unit.py) is written a column at a time,
each column through a 256-way case (the activation table). Verilator's DFG optimiser joins the
columns into one expression for the whole line, which no ``--output-split-cfuncs`` can cut: at
64x64 it was one C++ function of 131,000 lines in an 11 MB file, and the C++ compiler spent 87
minutes on it at ``-O2``. Splitting the variable (``split_var``) keeps a statement per column,
and the generated functions then split into pieces of :data:`SPLIT_STATEMENTS` statements
(docs/performance.md, "Array sizes").
"""

from __future__ import annotations

from arch.config import AccelConfig
from hdl_gen.sim_top import TOP_NAME

#: Arrays of at least this many PEs get :func:`control_lines` and :func:`verilator_args`.
LARGE_ARRAY_PES = 32 * 32
#: Statements per generated C++ function (Verilator's ``--output-split-cfuncs``).
SPLIT_STATEMENTS = 3000
SPLIT_LANES = f'split_var -module "{TOP_NAME}.accel.store" -var "lanes"'


def is_large(config: AccelConfig) -> bool:
    """Whether ``config``'s array has :data:`LARGE_ARRAY_PES` processing elements or more."""
    return config.rows * config.cols >= LARGE_ARRAY_PES


def control_lines(config: AccelConfig) -> tuple[str, ...]:
    """Lines for the build's Verilator control file: the store's line split a column a
    variable for a large array; none for a smaller one (its build and cache key unchanged)."""
    return (SPLIT_LANES,) if is_large(config) else ()


def verilator_args(config: AccelConfig) -> tuple[str, ...]:
    """Verilator arguments: functions split at :data:`SPLIT_STATEMENTS` statements for a large
    array; none for a smaller one."""
    return ("--output-split-cfuncs", str(SPLIT_STATEMENTS)) if is_large(config) else ()

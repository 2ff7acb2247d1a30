"""Curated RTL mutants of the norm unit: the set ``norm`` (:mod:`mutation.sets`). The unit is
generated only for configs with ``norm_unit``, so no preset's RTL is regenerated and their
killers are the norm unit's own tests (:data:`NORM_KILLERS`), which build their config."""

from __future__ import annotations

from mutation.table import Mutant

_E = "hdl_gen/norm_engine.py"
_S = "hdl_gen/norm_scalar.py"

#: pytest node ids, cheap first: the row scalar in Amaranth's simulator, then NORM on the
#: tiny config with the norm unit (RTL against the ISA simulator and ``arch.norm_ops``).
NORM_KILLERS = (
    "tests/unit/build/test_norm_scalar.py",
    "tests/instruction/test_norm_rtl.py::test_norm_rtl_matches_norm_ops_and_isa_on_tiny",
)

NORM: list[Mutant] = [
    Mutant(
        "norm-isqrt-bit-short",
        _S,
        "for _ in range(NORM_ISQRT_BITS_PER_CYCLE):",
        "for _ in range(NORM_ISQRT_BITS_PER_CYCLE - 1):",
        "each cycle decides one root bit too few: the last root bits are never decided",
    ),
    Mutant(
        "norm-div-bit-short",
        _S,
        "divide(NORM_DIV_BITS_PER_CYCLE)",
        "divide(NORM_DIV_BITS_PER_CYCLE - 1)",
        "each divider cycle takes one quotient bit too few",
    ),
    Mutant(
        "norm-isqrt-always-subtracts",
        _S,
        "rem = Mux(fits, rem - trial, rem)[:width]",
        "rem = (rem - trial)[:width]",
        "the root's remainder drops the trial even when it does not fit",
    ),
    Mutant(
        "norm-scalar-read-early",
        _E,
        "with m.Elif(r.wait == length - 1):",
        "with m.Elif(r.wait == length - 2):",
        "the normalize pass starts a cycle before the row scalar is final",
    ),
]

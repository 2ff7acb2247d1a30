"""Mutants of the checking machinery itself - the test runner's verdicts, guard bands, the
reference rounding rule, the fake-quantized twin - and the tests that must kill each (issue #22's
three named gaps, issue #41's softmax temperature and max-pool padding)."""

from __future__ import annotations

from mutation.table import Mutant

_RUNNER_COUNTS = "tests/block/test_runner_counts.py"
_TIES = "tests/unit/arch/test_requant_ties.py"

HARNESS_MUTANTS: list[Mutant] = [
    Mutant(
        "cocotb-zero-tests-pass",
        "sim/verilate/build.py",
        'if all(case.find("skipped") is not None for case in cases):',
        'if cases and all(case.find("skipped") is not None for case in cases):',
        "a cocotb results file with zero test cases counts as a pass (issue #22)",
    ),
    Mutant(
        "cocotb-no-results-pass",
        "sim/verilate/build.py",
        'else [f"no cocotb test ran: no results file written (does {test_module} define one?)"]',
        "else []",
        "a cocotb run that writes no results file counts as a pass",
    ),
    Mutant(
        "make-test-passes-no-tests",
        "Makefile",
        ' )$(PY) -m pytest -n $(JOBS) -m "not long and not docs_run" $(PYTEST_ARGS)\n',
        ' )$(PY) -m pytest -n $(JOBS) -m "not long and not docs_run" $(PYTEST_ARGS)'
        " || test $$? -eq 5\n",
        "`make test` (and so .ci/run) passes when pytest runs no test",
    ),
    Mutant(
        "guard-check-off",
        "sim/runtime/guard.py",
        "        if not bad.size:\n            return None",
        "        if True:\n            return None",
        "guard bands never report a changed canary",
    ),
    Mutant(
        "rtl-compare-no-guards",
        "tests/instruction/rtl_compare.py",
        "    assert_guards(outcome.name, outcome.guard, rtl=outcome.rtl, isa=outcome.isa)\n",
        "",
        "instruction-level comparisons stop at the builder's top: a store past its region passes",
    ),
    Mutant(
        "isa-neg-tie-away",
        "sim/backends/isa_machine.py",
        "    return np.right_shift(x * mult + rounding, shift)",
        "    product = x * mult\n"
        "    tie = (shift > 0) & (product < 0) & ((product & ((1 << shift) - 1)) == rounding)\n"
        "    return np.right_shift(product + rounding, shift) - tie",
        "the ISA simulator rounds negative exact ties away from zero (-2.5 -> -3) (issue #22)",
    ),
    Mutant(
        "reference-neg-tie-away",
        "arch/reference_ops.py",
        "    return np.asarray((x.astype(np.int64) * m + half) >> s, dtype=np.int64)",
        "    p = x.astype(np.int64) * m\n"
        "    tie = (s > 0) & (p < 0) & ((p & ((np.int64(1) << s) - 1)) == half)\n"
        "    return np.asarray(((p + half) >> s) - tie, dtype=np.int64)",
        "the reference ops round negative exact ties away from zero",
    ),
    Mutant(
        "softmax-temperature-1-over-d",
        "compiler/onnx/attention.py",
        "[0]) * factor\n        take_over(",
        "[0]) * factor * factor\n        take_over(",
        "attention scores scaled by 1/d instead of 1/sqrt(d): the compiler and its reference "
        "agree, only an oracle of the original model sees it (issue #41)",
    ),
    Mutant(
        "maxpool-pads-with-zero-point",
        "compiler/passes/pool_steps.py",
        "pad_value=-128 if mode is isa.PoolMode.MAX else z_in,",
        "pad_value=z_in,",
        "a max pool on the POOL path pads with the zero point (real 0), not -128: a border "
        "window of negative values gets max 0 (issue #41)",
    ),
]

KILLERS_OF: dict[str, tuple[str, ...]] = {
    "cocotb-zero-tests-pass": (_RUNNER_COUNTS,),
    "cocotb-no-results-pass": (_RUNNER_COUNTS,),
    "make-test-passes-no-tests": (_RUNNER_COUNTS,),
    "guard-check-off": ("tests/unit/run/test_guard.py",),
    "rtl-compare-no-guards": ("tests/instruction/test_guard_bands_rtl.py",),
    "isa-neg-tie-away": (_TIES,),
    "reference-neg-tie-away": (_TIES,),
    "softmax-temperature-1-over-d": ("tests/unit/run/test_twin.py",),
    "maxpool-pads-with-zero-point": ("tests/unit/back/test_window_ops.py",),
}

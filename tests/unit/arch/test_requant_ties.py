"""The requantization tie rule (round half up: -2.5 -> -2, 2.5 -> 3) on the integer reference ops
and the ISA simulator, against exact rational arithmetic (tests/tie_cases.py): shifts 1..3 and
62, multipliers +-1 and +-3, odd negative and positive values, clamps at -128 / 127 and ReLU."""

import numpy as np
import pytest

from arch import reference_ops as ref
from arch.config import PRESETS
from sim.backends import isa_machine
from tests.tie_cases import CLAMPS, assert_outputs, exact_requant, tie_programs

X = np.arange(-40, 41)  # every residue mod 8, odd and even, both signs
GRID = [(mult, shift) for mult in (1, -1, 3, -3) for shift in (0, 1, 2, 3)]
WIDE = [(-(1 << 31), 62), (1 << 30, 62), (-(1 << 30), 62), ((1 << 31) - 1, 62), (1, 31)]
WIDE_X = np.array([-(1 << 31), -(1 << 31) + 1, -(1 << 30), -1, 0, 1, (1 << 30), (1 << 31) - 1])


def expected(x, mult, shift):
    return np.array([exact_requant(int(v), mult, shift) for v in x], dtype=np.int64)


@pytest.mark.parametrize(("mult", "shift"), GRID + WIDE)
def test_reference_requantize_rounds_ties_up(mult, shift):
    x = WIDE_X if shift > 3 else X
    np.testing.assert_array_equal(ref.requantize(x, mult, shift), expected(x, mult, shift))


@pytest.mark.parametrize(("mult", "shift"), GRID + WIDE)
def test_isa_simulator_requantize_rounds_ties_up(mult, shift):
    x = WIDE_X if shift > 3 else X
    got = isa_machine.requantize(x, np.full(x.shape, mult), np.full(x.shape, shift))
    np.testing.assert_array_equal(got, expected(x, mult, shift))


@pytest.mark.parametrize("shift", [1, 2, 3])
@pytest.mark.parametrize(("lo", "hi"), CLAMPS)
def test_reference_saturates_ties_at_the_bounds(shift, lo, hi):
    """Ties just inside and outside -128, 127 and ReLU's 0 (e.g. 127.5 -> 128 -> 127,
    -128.5 -> -128, -0.5 -> 0 under ReLU)."""
    x = np.concatenate([np.arange(b * 2**shift - 20, b * 2**shift + 21) for b in (-128, 0, 127)])
    for mult in (1, -1):
        want = np.clip(expected(x, mult, shift), lo, hi).astype(np.int8)
        np.testing.assert_array_equal(ref.to_int8(ref.requantize(x, mult, shift), lo, hi), want)
        np.testing.assert_array_equal(
            ref.to_int8(ref.clamp(ref.requantize(x, mult, shift), lo, hi)), want
        )


@pytest.mark.parametrize("shift", [1, 2, 3])
def test_reference_add_rescale_rounds_each_operand_up(shift):
    a = np.arange(-20, 21)
    b = a[::-1].copy()
    for lo, hi in CLAMPS:
        got = ref.add_rescale(a, -1, shift, b, 1, shift, lo, hi, axis=0)
        exact = [
            exact_requant(int(u), -1, shift) + exact_requant(int(v), 1, shift)
            for u, v in zip(a, b, strict=True)
        ]
        np.testing.assert_array_equal(got, np.clip(exact, lo, hi).astype(np.int8))


@pytest.mark.parametrize("config_name", ["tiny", "default"])
def test_isa_simulator_programs_round_ties_up(config_name):
    """STORE and ACCUM's residual, through whole programs on the ISA simulator."""
    for program in tie_programs(PRESETS[config_name], seed=3):
        machine = program.builder.run_isa()
        for clamp in CLAMPS:
            got = program.read(machine.dram, clamp)
            assert_outputs(program.name, clamp, got, program.outputs[clamp][1])

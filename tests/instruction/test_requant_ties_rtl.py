"""The requantization tie rule on the RTL: STORE and ACCUM's residual round half up (-2.5 -> -2)
at shifts 1..3 and 62, multipliers +-1, around the clamp bounds -128 / 127 and ReLU's 0; outputs
checked against exact rational arithmetic (tests/tie_cases.py) and all of DRAM against the ISA
simulator."""

import pytest

from arch.config import PRESETS
from tests.instruction.rtl_compare import assert_same_dram, run_both
from tests.tie_cases import CLAMPS, assert_outputs, tie_programs


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", ["tiny", "default"])
def test_rtl_rounds_ties_up(config_name, tmp_path):
    config = PRESETS[config_name]
    programs = tie_programs(config, seed=4)
    outcomes = run_both(config, {p.name: p.builder for p in programs}, tmp_path)
    for program, outcome in zip(programs, outcomes, strict=True):
        assert outcome.rtl.done, f"{program.name}: RTL ended with {outcome.rtl.error_code}"
        for clamp in CLAMPS:
            assert_outputs(
                program.name,
                clamp,
                program.read(outcome.rtl.dram, clamp),
                program.outputs[clamp][1],
            )
        assert_same_dram(outcome)

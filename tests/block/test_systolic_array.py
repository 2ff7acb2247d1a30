"""Block test: the weight-stationary systolic array at several sizes."""

import pytest

from arch.config import PRESETS, AccelConfig
from hdl_gen.systolic_array import SystolicArray
from sim.verilate.build import run_cocotb
from tests.block.harness import build_block

CONFIGS = {
    "tiny": PRESETS["tiny"],
    "8x8": AccelConfig(rows=8, cols=8),
    "default": PRESETS["default"],
}


@pytest.mark.simulator
@pytest.mark.parametrize("name", list(CONFIGS))
def test_array_matches_numpy(name, tmp_path):
    array = SystolicArray(CONFIGS[name])
    model = build_block(array, "systolic_array")
    env = {
        "ARRAY_ROWS": str(array.config.rows),
        "ARRAY_COLS": str(array.config.cols),
        "ARRAY_LATENCY": str(array.latency),
        "ARRAY_SEED": str(len(name)),
    }
    run_cocotb(model, "tests.block.cocotb_systolic_array", tmp_path, extra_env=env)

"""Guard bands on the RTL: a store that writes one line past its output region - the same on
the RTL and the ISA simulator, so comparing the two cannot see it - fails the instruction-level
check, naming the address and the region; the same program stored correctly passes."""

import numpy as np
import pytest

from arch.config import PRESETS
from tests.instruction.rtl_compare import assert_same_dram, run_both
from tests.programs import Builder


def overrun(config, spill: int) -> Builder:
    """Copy ``lines`` random lines through POOL into an output region ``spill`` lines short."""
    d, lines = config.rows, 6
    rng = np.random.default_rng(spill + 17)
    b = Builder(config)
    ones = np.ones(d, dtype=np.int64)
    params = b.put_params(mult=rng.integers(1, 3, d) * ones, shift=np.zeros(d, np.int64))
    src = b.put(rng.integers(-128, 128, (lines, d), dtype=np.int8))
    b.load_params(params, 1)
    b.load_lines("ACT", 0, src, lines, d, deps="push_next")
    b.emit("pool", "pop_prev,push_next", act_addr=0, acc_addr=0, m=lines, window=1, n_iter=1)
    out = b.empty(lines - spill, 1, d)
    store = b.desc("ACC", 0, out.addr, [(lines, d, 1)])
    b.emit("store", "pop_prev", desc=store, param_addr=0, param_loop=0, clamp_lo=-128, clamp_hi=127)
    return b


@pytest.mark.simulator
def test_a_store_past_its_region_fails(tmp_path):
    config = PRESETS["tiny"]
    fits, spills = run_both(
        config, {"fits": overrun(config, 0), "spills": overrun(config, 1)}, tmp_path
    )
    assert fits.rtl.done and spills.rtl.done
    assert_same_dram(fits)
    assert np.array_equal(spills.rtl.dram, spills.isa.dram[: spills.image_size])  # both agree
    with pytest.raises(
        AssertionError,
        match=r"spills: rtl wrote outside the program's regions: "
        r"\d+ guard bytes changed; first at 0x[0-9a-f]+ .* 0 bytes past 'output\d+'",
    ):
        assert_same_dram(spills)

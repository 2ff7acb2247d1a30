"""Guard bands on the RTL: a store that writes one line past its output region - the same on
the RTL and the ISA simulator, so comparing the two cannot see it - fails the instruction-level
check, naming the address and the region; the same program stored correctly passes. A store of
zeros 1 MiB past the image - past every canary, and zeros on zeros - fails too: the DRAM models
of both simulators count every write past the bytes read back."""

import numpy as np
import pytest

from arch.config import PRESETS
from tests.instruction.rtl_compare import assert_guards, assert_same_dram, run_both
from tests.programs import Builder


def overrun(config, spill: int, far: int = 0) -> Builder:
    """Copy ``lines`` random lines through POOL into an output region ``spill`` lines short;
    ``far``: instead store them as zeros (multiplier 0) ``far`` bytes past the image."""
    d, lines = config.rows, 6
    rng = np.random.default_rng(spill + 17)
    b = Builder(config)
    ones = np.ones(d, dtype=np.int64)
    mult = np.zeros(d, np.int64) if far else rng.integers(1, 3, d) * ones
    params = b.put_params(mult=mult, shift=np.zeros(d, np.int64))
    src = b.put(rng.integers(-128, 128, (lines, d), dtype=np.int8))
    b.load_params(params, 1)
    b.load_lines("ACT", 0, src, lines, d, deps="push_next")
    b.emit("pool", "pop_prev,push_next", act_addr=0, acc_addr=0, m=lines, window=1, n_iter=1)
    out = b.top + far if far else b.empty(lines - spill, 1, d).addr
    store = b.desc("ACC", 0, out, [(lines, d, 1)])
    b.emit("store", "pop_prev", desc=store, param_addr=0, param_loop=0, clamp_lo=-128, clamp_hi=127)
    return b


@pytest.mark.simulator
def test_stores_outside_their_regions_fail(tmp_path):
    config = PRESETS["tiny"]
    programs = {
        "fits": overrun(config, 0),
        "spills": overrun(config, 1),
        "far": overrun(config, 0, far=1 << 20),
    }
    fits, spills, far = run_both(config, programs, tmp_path)  # one simulator process
    assert fits.rtl.done and spills.rtl.done
    assert_same_dram(fits)
    assert np.array_equal(spills.rtl.dram, spills.isa.dram[: spills.image_size])  # both agree
    with pytest.raises(
        AssertionError,
        match=r"spills: rtl wrote outside the program's regions: "
        r"\d+ guard bytes changed; first at 0x[0-9a-f]+ .* 0 bytes past 'output\d+'",
    ):
        assert_same_dram(spills)
    zeros_a_mib_past_the_image_fail(config, far)


def zeros_a_mib_past_the_image_fail(config, far) -> None:
    """Zeros stored 1 MiB past the image: every canary intact, both DRAM models saw them."""
    assert far.rtl.done and far.isa_error is None
    assert np.array_equal(far.rtl.dram, far.isa.dram[: far.image_size])
    assert far.guard.check(far.rtl.dram) is None
    lines, first = 6, far.guard.image_bytes + (1 << 20)  # the builder's top + 1 MiB
    expected = (
        rf"far: (rtl|isa) wrote outside the program's regions: {lines * config.cols} bytes "
        rf"written past the {far.image_size} bytes read back; first at 0x{first:x}, "
        r"\d+ bytes past '\w+' .*past the end of the image"
    )
    with pytest.raises(AssertionError, match=expected.replace("(rtl|isa)", "rtl")):
        assert_same_dram(far)
    with pytest.raises(AssertionError, match=expected.replace("(rtl|isa)", "isa")):
        assert_guards("far", far.guard, isa=far.isa)

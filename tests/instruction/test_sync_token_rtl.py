"""A SYNC in the LOAD queue that hands COMPUTE its token must come after the LOADs before it have
written the scratchpad. Found by the multi-kernel random programs: on the RTL, a GEMM that pops a
token pushed by such a SYNC read the ACT lines' old contents, while the ISA simulator and numpy
read the new ones. The cause: the load unit ran a LOAD-queue SYNC as a LOAD of the descriptor its
`queue` bits named (descriptor 0 here, the earlier fill of ACT), overwriting the new lines. The
load unit now retires a SYNC carrying only its tokens - once the lines of the LOADs before it
have landed: a LOAD retires when its lines are requested, so on a DRAM of 40 cycles' latency
(the DMA sweep's config) a SYNC that did not wait would hand its token over ~40 cycles before
the lines arrive."""

import dataclasses

import numpy as np
import pytest

from arch import reference_ops as ref
from arch.config import PRESETS
from tests.instruction.rtl_compare import run_both
from tests.programs import Builder, conv2d


def conv_over_stale_act(config, token_on_load: bool):
    """Fill ACT with random lines, barrier, then a 1x1 conv whose loads overwrite them."""
    d, rng = config.rows, np.random.default_rng(6)
    b = Builder(config)
    b.load_lines("ACT", 0, b.put(rng.integers(-128, 128, (16, d), dtype=np.int8)), 16, d)
    b.barrier()
    x = rng.integers(-128, 128, (d, 3, 3), dtype=np.int8)
    w = rng.integers(-128, 128, (d, d, 1, 1), dtype=np.int8)
    bias, mult, shift = rng.integers(-4000, 4000, d), rng.integers(1, 4, d), np.full(d, 8)
    params = b.put_params(bias=bias, mult=mult, shift=shift)
    out = conv2d(b, b.put_nchw(x), w, params, stride=1, pad=0, token_on_load=token_on_load)
    acc = ref.conv2d(x[None], w)[0] + bias[:, None, None]
    return b, out, ref.to_int8(ref.requantize(acc, mult, shift, axis=0))


def outputs(config, token_on_load, tmp_path):
    b, out, want = conv_over_stale_act(config, token_on_load)
    [outcome] = run_both(config, {"conv": b}, tmp_path)
    assert outcome.rtl.done and outcome.isa_error is None
    n = out.h * out.w * out.c
    read = [
        dram[out.addr : out.addr + n].view(np.int8) for dram in (outcome.rtl.dram, outcome.isa.dram)
    ]
    rtl, isa = (r.reshape(out.h, out.w, out.c).transpose(2, 0, 1) for r in read)
    np.testing.assert_array_equal(isa, want, err_msg="ISA simulator")
    return rtl, want


@pytest.mark.simulator
def test_token_on_the_last_load_orders_the_scratchpad(tmp_path):
    rtl, want = outputs(PRESETS["tiny"], True, tmp_path)
    np.testing.assert_array_equal(rtl, want, err_msg="RTL")


SLOW_DRAM = dataclasses.replace(PRESETS["tiny"], dram_latency=40, dram_bytes_per_cycle=16)


@pytest.mark.simulator
@pytest.mark.parametrize("config", [PRESETS["tiny"], SLOW_DRAM], ids=["tiny", "tiny_lat40_bus16"])
def test_sync_token_after_loads_orders_the_scratchpad(config, tmp_path):
    rtl, want = outputs(config, False, tmp_path)
    np.testing.assert_array_equal(rtl, want, err_msg="RTL")

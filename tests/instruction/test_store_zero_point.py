"""STORE's output zero point on the RTL: ``out = clamp(requant(acc) + out_zp, lo, hi)``.

Random accumulators (ACCUM of a bias and a requantized residual) are stored several times with
random per-channel rescales, random zero points (the extremes -128 and 127 among them) and
clamps whose lower bound is the zero point (a ReLU of an asymmetric output), once more through a
random table. Expected values come from ``arch.reference_ops`` (requantize, clamp, lookup), not
from the simulator; the RTL and the ISA simulator must also agree on every DRAM byte.
"""

import numpy as np
import pytest

from arch import isa
from arch import reference_ops as ref
from arch.config import PRESETS
from tests.instruction.rtl_compare import assert_cases_match
from tests.instruction.test_store_table import _put_table
from tests.programs import Builder, random_accumulators


def _zp_case(config, rng):
    d = config.rows
    a = random_accumulators(d, rng, 1 << 24)
    m, x, res_mult, res_shift, bias, acc = a.m, a.x, a.res_mult, a.res_shift, a.bias, a.acc
    mult = rng.integers(-(1 << 31), 1 << 31, d)
    # Per column the shift that brings the largest product to about +-256: most outputs land
    # inside int8 with or without the zero point, so its value and sign matter (shifts 30..40
    # saturated every output, and a zero point read as unsigned went unnoticed).
    largest = np.abs(acc.astype(np.int64) * mult).max(axis=0)
    shift = np.array([max(0, int(v).bit_length() - 8) for v in largest])
    table = rng.integers(-128, 128, isa.TABLE_ENTRIES, dtype=np.int8)
    table_addr = config.param_lines - isa.table_lines(d)

    b = Builder(config)
    src = b.put(x)
    params = b.put_params(bias=bias, mult=mult, shift=shift, res_mult=res_mult, res_shift=res_shift)
    b.load_params(params, 1)
    b.load_params(_put_table(b, table), isa.table_lines(d), local=table_addr)
    b.accumulate_lines(src, m)
    scaled = ref.requantize(acc, mult, shift, axis=1)
    zps = [-128, 127, *(int(z) for z in rng.integers(-128, 128, 2))]
    expected = []
    for i, zp in enumerate(zps):
        lo, hi = (zp, 127) if i % 2 else (-128, int(rng.integers(zp, 128)) if zp < 127 else 127)
        use_table = int(i == len(zps) - 1)
        out = b.alloc(m * d)
        b.emit(
            "store",
            "pop_prev" if i == 0 else "",
            desc=b.desc("ACC", 0, out, [(m, d, 1)]),
            param_addr=0,
            param_loop=0,
            clamp_lo=lo,
            clamp_hi=hi,
            out_zp=zp,
            use_table=use_table,
            table_addr=table_addr,
        )
        codes = ref.to_int8(ref.clamp(scaled + zp, lo, hi))
        expected.append((out, ref.lookup(codes, table) if use_table else codes))
    return b, expected


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", ["tiny", "default"])
def test_store_zero_point_matches_reference_ops(config_name, tmp_path):
    assert_cases_match(PRESETS[config_name], _zp_case, 41, tmp_path)

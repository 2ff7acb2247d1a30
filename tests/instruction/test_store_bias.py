"""STORE's bias on the RTL: with use_bias, ``out = clamp(requant(acc + bias) + out_zp, lo, hi)``,
the sum wrapping at 32 bits like every accumulator sum (the compiler folds a layer's bias into
its STORE instead of initialising ACC with an ACCUM).

Random accumulators (ACCUM of a bias and a requantized residual) are stored twice: with
use_bias, adding the same PARAM line's bias a second time - biases over the whole int32 range,
so about half the columns wrap - and without it. Expected values come from
``arch.reference_ops`` (add_wrap32, requantize, clamp), not from the simulator; the RTL and the
ISA simulator must also agree on every DRAM byte.
"""

import numpy as np
import pytest

from arch import reference_ops as ref
from arch.config import PRESETS
from tests.instruction.rtl_compare import assert_cases_match
from tests.programs import Builder, random_accumulators


def _shifts(values: np.ndarray, mult: np.ndarray) -> np.ndarray:
    """Per column, the shift that brings the largest product to about +-256."""
    largest = np.abs(values.astype(np.int64) * mult).max(axis=0)
    return np.array([max(0, int(v).bit_length() - 8) for v in largest])


def _bias_case(config, rng):
    d = config.rows
    a = random_accumulators(d, rng, 1 << 31)
    m, x, res_mult, res_shift, bias, acc = a.m, a.x, a.res_mult, a.res_shift, a.bias, a.acc
    mult = rng.integers(-(1 << 15), 1 << 15, d)
    biased = ref.add_wrap32(acc, np.broadcast_to(bias, (m, d)))
    shift = _shifts(np.concatenate([acc, biased]), mult)
    lo = int(rng.integers(-128, 0))
    hi = int(rng.integers(0, 128))

    b = Builder(config)
    src = b.put(x)
    params = b.put_params(bias=bias, mult=mult, shift=shift, res_mult=res_mult, res_shift=res_shift)
    b.load_params(params, 1)
    b.accumulate_lines(src, m)
    expected = []
    for use_bias, value in ((1, biased), (0, acc)):
        out = b.alloc(m * d)
        b.emit(
            "store",
            "pop_prev" if use_bias else "",
            desc=b.desc("ACC", 0, out, [(m, d, 1)]),
            param_addr=0,
            param_loop=0,
            clamp_lo=lo,
            clamp_hi=hi,
            use_bias=use_bias,
        )
        scaled = ref.requantize(value, mult, shift, axis=1)
        expected.append((out, ref.to_int8(ref.clamp(scaled, lo, hi))))
    assert not np.array_equal(*(want for _out, want in expected)), "the bias changed nothing"
    return b, expected


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", ["tiny", "default"])
def test_store_bias_matches_reference_ops(config_name, tmp_path):
    assert_cases_match(PRESETS[config_name], _bias_case, 43, tmp_path)

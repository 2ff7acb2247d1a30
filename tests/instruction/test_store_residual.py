"""STORE's residual on the RTL: with use_res, ``a = acc (+ bias) + requant(act[r], res_mult,
res_shift)`` (32-bit wrap) is requantized and stored, the residual's ACT line
``r = res_addr + l - local_base`` for ACC line ``l`` (the compiler's residual layers add their
residual this way, from an ACT slot kept until the tile's STORE, instead of an ACCUM before
the GEMMs).

Random accumulators (an ACCUM of a bias and a requantized input) are stored twice with a second
random residual tensor in ACT at a random line: all lines with use_bias, and the lines from a
random k on (a descriptor based at ACC line k, ``res_addr`` shifted by k) without it. Biases and
residuals span the int32 range, so lanes wrap. Expected values come from
``arch.reference_ops`` (requantize, add_wrap32, clamp), not from the simulator; the RTL and the
ISA simulator must also agree on every DRAM byte.
"""

import numpy as np
import pytest

from arch import isa
from arch import reference_ops as ref
from arch.config import PRESETS
from tests.instruction.rtl_compare import assert_cases_match, run_both
from tests.instruction.test_store_bias import _shifts
from tests.programs import Builder, random_accumulators


def _residual_case(config, rng):
    d = config.rows
    a = random_accumulators(d, rng, 1 << 31)
    m, bias, acc = a.m, a.bias, a.acc
    residual = rng.integers(-128, 128, (m, d), dtype=np.int8)
    res_line = m + int(rng.integers(0, 200))  # ACT lines 0..m-1 hold the ACCUM's input
    added = ref.requantize(residual, a.res_mult, a.res_shift, axis=1)
    k = int(rng.integers(0, m))
    mult = rng.integers(-(1 << 15), 1 << 15, d)
    with_bias = ref.add_wrap32(ref.add_wrap32(acc, np.broadcast_to(bias, (m, d))), added)
    without = ref.add_wrap32(acc, added)[k:]
    shift = _shifts(np.concatenate([with_bias, without]), mult)
    lo, hi = -128, 127  # the clamp is test_store_bias's; here few lanes saturate

    b = Builder(config)
    src, res = b.put(a.x), b.put(residual)
    params = b.put_params(
        bias=bias, mult=mult, shift=shift, res_mult=a.res_mult, res_shift=a.res_shift
    )
    b.load_params(params, 1)
    b.load_lines("ACT", res_line, res, m, d)  # before the ACCUM's load: done when it pops
    b.accumulate_lines(src, m)
    expected = []
    for use_bias, first, value in ((1, 0, with_bias), (0, k, without)):
        out = b.alloc((m - first) * d)
        b.emit(
            "store",
            "pop_prev" if use_bias else "",
            desc=b.desc("ACC", first, out, [(m - first, d, 1)]),
            param_addr=0,
            param_loop=0,
            clamp_lo=lo,
            clamp_hi=hi,
            use_bias=use_bias,
            use_res=1,
            res_addr=res_line + first,
        )
        scaled = ref.requantize(value, mult, shift, axis=1)
        expected.append((out, ref.to_int8(ref.clamp(scaled, lo, hi))))
    plain = ref.requantize(acc[k:], mult, shift, axis=1)
    assert not np.array_equal(expected[1][1], ref.to_int8(ref.clamp(plain, lo, hi))), (
        "the residual changed nothing"
    )
    return b, expected


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", ["tiny", "default"])
def test_store_residual_matches_reference_ops(config_name, tmp_path):
    assert_cases_match(PRESETS[config_name], _residual_case, 47, tmp_path)


@pytest.mark.simulator
def test_bad_residuals_stop_both_simulators_alike(tmp_path):
    """A residual ACT line past ACT (LOCAL_RANGE), or a PARAM res_shift above MAX_SHIFT with
    use_res (BAD_FIELD; ignored without it), stops the RTL with the ISA simulator's code at the
    STORE."""
    config = PRESETS["tiny"]
    d = config.rows
    programs = {}
    for name, res_addr, res_shift, use_res in (
        ("past_act", config.act_lines - 1, 0, 1),  # line 1 of 2 is past the end
        ("shift", 0, isa.MAX_SHIFT + 1, 1),
        ("shift_unused", 0, isa.MAX_SHIFT + 1, 0),
    ):
        b = Builder(config)
        zeros = np.zeros(d, np.int64)
        params = b.put_params(bias=zeros, mult=zeros + 1, shift=zeros, res_shift=zeros + res_shift)
        b.load_params(params, 1, deps="push_next")
        b.emit("sync", "pop_prev,push_next", queue="COMPUTE")
        b.emit(
            "store",
            "pop_prev",
            desc=b.desc("ACC", 0, b.alloc(2 * d), [(2, d, 1)]),
            param_addr=0,
            param_loop=0,
            clamp_lo=-128,
            clamp_hi=127,
            use_res=use_res,
            res_addr=res_addr,
        )
        programs[name] = b
    outcomes = {o.name: o for o in run_both(config, programs, tmp_path)}
    for name, code in (("past_act", "LOCAL_RANGE"), ("shift", "BAD_FIELD")):
        outcome = outcomes[name]
        assert outcome.isa_error is not None and outcome.isa_error.code.name == code, name
        assert outcome.rtl.error_code == code, (name, outcome.rtl.error_code)
        assert outcome.rtl.error_index == outcome.isa_error.insn_index == 2
    assert outcomes["shift_unused"].isa_error is None and outcomes["shift_unused"].rtl.done

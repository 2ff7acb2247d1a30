"""CONV (a GEMM over kernel taps of an input tile held once in ACT) on the ISA simulator and the
RTL, against the integer reference ops.

The cases are ``tests/instruction/conv_cases.py``'s. The expected values are
``arch.reference_ops.conv2d`` (dense, groups=1) over the image, then the reference requantize
and clamp; the RTL's whole DRAM must also equal the ISA simulator's. Zero sizes stop both with
BAD_FIELD, out-of-range lines with LOCAL_RANGE, at the same instruction.
"""

from __future__ import annotations

import numpy as np
import pytest

from arch import isa
from arch import reference_ops as ref
from arch.config import PRESETS
from tests.instruction.conv_cases import (
    CONFIGS,
    bad_conv_programs,
    conv_cases,
)
from tests.instruction.rtl_compare import (
    assert_rtl_stops_alike,
    assert_same_dram,
    run_both,
)


def test_the_reference_layout_matches_a_dense_matmul():
    """The test's own oracle, checked apart: im2col of the image times the flattened weights
    equals ``conv2d`` for one case (so a wrong ``conv2d`` call cannot make both sides agree)."""
    rng = np.random.default_rng(9)
    kh, kw, stride, c, o, out_w, out_h = 3, 2, 2, 8, 4, 3, 2
    pitch = isa.window_span(out_w, kw, stride)
    image = rng.integers(-128, 128, (c, (out_h - 1) * stride + kh, pitch), dtype=np.int8)
    w = rng.integers(-128, 128, (o, c, kh, kw), dtype=np.int8)
    cols = np.array(
        [
            image[:, y * stride : y * stride + kh, x * stride : x * stride + kw].ravel()
            for y in range(out_h)
            for x in range(out_w)
        ],
        np.int64,
    )
    dense = cols @ w.reshape(o, -1).astype(np.int64).T
    conv = ref.conv2d(image[None], w, stride=stride)[0].reshape(o, -1).T
    np.testing.assert_array_equal(conv, dense)


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", CONFIGS)
def test_conv_rtl_matches_reference_and_isa(config_name, tmp_path):
    config = PRESETS[config_name]
    programs, expected = conv_cases(config, seed=40 + len(config_name), count=12)
    if config_name == "default":
        assert any(name.startswith("k7x7") for name in programs)
    for outcome in run_both(config, programs, tmp_path):
        assert outcome.isa_error is None, f"{outcome.name}: {outcome.isa_error}"
        assert outcome.rtl.done, f"{outcome.name}: RTL ended with {outcome.rtl.error_code}"
        e = expected[outcome.name]
        got = outcome.rtl.dram[e.out : e.out + e.want.size].view(np.int8).reshape(e.want.shape)
        np.testing.assert_array_equal(got, e.want, err_msg=outcome.name)
        assert_same_dram(outcome)
        perf = outcome.rtl.perf
        assert perf["macs"] == e.macs == outcome.isa.stats.macs, outcome.name
        assert perf["array_active"] == e.rows_streamed, outcome.name
        assert perf["weight_load"] == e.weight_rows, outcome.name


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", CONFIGS)
def test_conv_runs_as_fast_as_the_gemm_over_its_im2col_copy(config_name, tmp_path):
    """CONV is timed as a GEMM of kh*kw*k_iter k blocks: on the RTL the compute unit is busy
    exactly as long as for the same cases run as GEMMs over im2col copies of the image (the
    walk adds no bubble at a row, tap or channel-block change), the array sees the same rows,
    and both give the reference output. The ISA simulator's model gives both the same cycles."""
    config = PRESETS[config_name]
    seed, count = 60 + len(config_name), 6
    programs, expected = conv_cases(config, seed, count)
    gemms, gemm_expected = conv_cases(config, seed, count, as_gemm=True)
    programs |= {f"{name}/gemm": builder for name, builder in gemms.items()}
    expected |= {f"{name}/gemm": e for name, e in gemm_expected.items()}
    outcomes = {o.name: o for o in run_both(config, programs, tmp_path)}
    for name in gemms:
        conv, gemm = outcomes[name], outcomes[f"{name}/gemm"]
        np.testing.assert_array_equal(expected[name].want, expected[f"{name}/gemm"].want)
        for outcome in (conv, gemm):
            e = expected[outcome.name]
            assert outcome.isa_error is None, f"{outcome.name}: {outcome.isa_error}"
            assert outcome.rtl.done, f"{outcome.name}: RTL ended with {outcome.rtl.error_code}"
            got = outcome.rtl.dram[e.out : e.out + e.want.size].view(np.int8)
            np.testing.assert_array_equal(got.reshape(e.want.shape), e.want, err_msg=outcome.name)
            assert_same_dram(outcome)
        for counter in ("compute_busy", "array_active", "weight_load", "macs"):
            assert conv.rtl.perf[counter] == gemm.rtl.perf[counter], f"{name}: {counter}"
        assert conv.isa.stats.busy["COMPUTE"] == gemm.isa.stats.busy["COMPUTE"], name


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", CONFIGS)
def test_bad_conv_stops_the_rtl_with_the_same_code(config_name, tmp_path):
    config = PRESETS[config_name]
    assert_rtl_stops_alike(config, bad_conv_programs(config), tmp_path)


def test_conv_fields_round_trip():
    fields = dict(m=4095, k_iter=1023, n_iter=5, act_k_stride=65535, out_w=4095, kh=7, kw=6)
    insn = isa.make("conv", **fields, stride=3, accumulate=1)
    assert isa.decode_insn(insn.encode()) == insn
    assert isa.window_span(outputs=4, kernel=3, stride=2) == 9

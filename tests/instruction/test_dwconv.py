"""DWCONV (the window unit) on the RTL, against the integer reference ops and the ISA simulator.

Random shapes, kernels 1..3 x 1..3, strides 1..3, a row pitch wider than the window reads (the
extra columns hold random data that must not leak in), random ACT/WGT/ACC/PARAM addresses, bias
on or off, and a second DWCONV with other weights accumulating onto the first. The expected
values are ``arch.reference_ops.conv2d`` with ``groups = channels`` plus the bias, requantized
by a STORE; the RTL's whole DRAM must also equal the ISA simulator's. Out-of-range addresses
stop both with LOCAL_RANGE, zero sizes with BAD_FIELD, at the same instruction.
"""

import numpy as np
import pytest

from arch import isa
from arch import reference_ops as ref
from arch.config import PRESETS
from tests.instruction.rtl_compare import (
    assert_isa_stops,
    assert_rtl_stops_alike,
    assert_same_dram,
    run_both,
)
from tests.programs import Builder

CONFIGS = ["tiny", "default"]


def _dw_case(config, rng, *, out_w, out_h, kh, kw, stride, use_bias, accumulate):
    """One channel block: load a pre-padded input image, its taps and PARAM, run DWCONV (and a
    second, accumulating one), store; return the builder and (DRAM address, expected int8,
    MACs)."""
    d = config.rows
    in_h, in_cols = (out_h - 1) * stride + kh, (out_w - 1) * stride + kw
    pitch = in_cols + int(rng.integers(0, 3))
    image = rng.integers(-128, 128, (d, in_h, pitch), dtype=np.int8)
    kernels = [rng.integers(-128, 128, (d, 1, kh, kw), dtype=np.int8)]
    if accumulate:
        kernels.append(rng.integers(-128, 128, (d, 1, kh, kw), dtype=np.int8))
    bias = rng.integers(-(1 << 20), 1 << 20, d)
    mult = rng.integers(1 << 30, 1 << 31, d)
    shift = rng.integers(38, 44, d)  # outputs spread over the int8 range
    m, taps = out_h * out_w, kh * kw

    b = Builder(config)
    src = b.put_nchw(image)
    params = b.put_params(bias=bias, mult=mult, shift=shift)
    act_addr = int(rng.integers(0, config.act_lines - in_h * pitch + 1))
    acc_addr = int(rng.integers(0, config.acc_lines - m + 1))
    param_addr = int(rng.integers(0, config.param_lines))
    wgt_addrs = [int(rng.integers(0, config.wgt_lines - taps + 1)) for _ in kernels]
    wgt_addrs[-1] = config.wgt_lines - taps  # one set of taps in the last WGT lines
    b.load_params(params, 1, local=param_addr)
    for kernel, addr in zip(kernels, wgt_addrs, strict=True):
        lines = kernel[:, 0].reshape(d, taps).T  # line i*kw + j holds tap (i, j) of each channel
        b.load_lines("WGT", addr, b.put(np.ascontiguousarray(lines)), taps, d)
    b.load_lines("ACT", act_addr, src.addr, in_h * pitch, d, deps="push_next")
    acc = np.zeros((d, out_h, out_w), np.int64)
    used = image[:, :, :in_cols].astype(np.int64)[None]
    for n, (kernel, addr) in enumerate(zip(kernels, wgt_addrs, strict=True)):
        last = n == len(kernels) - 1
        b.emit(
            "dwconv",
            ",".join(["pop_prev"] * (n == 0) + ["push_next"] * last),
            wgt_addr=addr,
            act_addr=act_addr,
            acc_addr=acc_addr,
            param_addr=param_addr,
            out_w=out_w,
            out_h=out_h,
            pitch=pitch,
            kh=kh,
            kw=kw,
            stride=stride,
            use_bias=int(use_bias and n == 0),
            accumulate=int(n > 0),
        )
        acc += ref.conv2d(used, kernel, stride=stride, groups=d)[0]
    if use_bias:
        acc += bias[:, None, None]
    out = b.alloc(m * d)
    b.emit(
        "store",
        "pop_prev",
        desc=b.desc("ACC", acc_addr, out, [(m, d, 1)]),
        param_addr=param_addr,
        param_loop=0,
        clamp_lo=-128,
        clamp_hi=127,
    )
    acc = ref.add_wrap32(acc, 0).astype(np.int64).reshape(d, m).T  # (pixel, channel)
    expected = ref.to_int8(ref.clamp(ref.requantize(acc, mult, shift, axis=1), -128, 127))
    return b, (out, expected, len(kernels) * m * taps * d)


def _cases(config, seed, count):
    rng = np.random.default_rng(seed)
    shapes = [(3, 3, 1), (3, 3, 2), (1, 1, 1), (1, 1, 2), (2, 3, 1), (3, 1, 2), (3, 2, 3)]
    shapes += [(1, 2, 2), (1, 3, 1), (2, 1, 3)]  # every kernel shape of 1..3 x 1..3
    programs, expected = {}, {}
    for n in range(count):
        kh, kw, stride = shapes[n % len(shapes)]
        out_w, out_h = int(rng.integers(1, 9)), int(rng.integers(1, 5))
        if n == 0:
            out_w, out_h = 1, 1  # a single output: warm-up and drain only
        name = f"k{kh}x{kw}_s{stride}_{out_h}x{out_w}_{n}"
        programs[name], expected[name] = _dw_case(
            config,
            rng,
            out_w=out_w,
            out_h=out_h,
            kh=kh,
            kw=kw,
            stride=stride,
            use_bias=n % 3 != 1,
            accumulate=n % 2 == 1,
        )
    return programs, expected


def test_dwconv_isa_simulator_matches_reference_ops():
    """The ISA simulator alone (no RTL), over more shapes than the RTL test runs."""
    for name in CONFIGS:
        config = PRESETS[name]
        programs, expected = _cases(config, seed=5, count=21)
        for case, builder in programs.items():
            machine = builder.run_isa()
            out, want, macs = expected[case]
            assert machine.stats.macs == macs, f"{name} {case}"
            got = machine.dram[out : out + want.size].view(np.int8).reshape(want.shape)
            np.testing.assert_array_equal(got, want, err_msg=f"{name} {case}")


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", CONFIGS)
def test_dwconv_rtl_matches_reference_and_isa(config_name, tmp_path):
    config = PRESETS[config_name]
    programs, expected = _cases(config, seed=17 + len(config_name), count=10)
    for outcome in run_both(config, programs, tmp_path):
        assert outcome.isa_error is None, f"{outcome.name}: {outcome.isa_error}"
        assert outcome.rtl.done, f"{outcome.name}: RTL ended with {outcome.rtl.error_code}"
        out, want, macs = expected[outcome.name]
        got = outcome.rtl.dram[out : out + want.size].view(np.int8).reshape(want.shape)
        np.testing.assert_array_equal(got, want, err_msg=outcome.name)
        assert_same_dram(outcome)
        assert outcome.rtl.perf["macs"] == macs, outcome.name  # the window unit's, counted
        assert outcome.rtl.perf["array_active"] == 0, outcome.name  # the array stayed idle


def _bad(config, **fields):
    b = Builder(config)
    good = dict(out_w=2, out_h=2, pitch=4, kh=3, kw=3, stride=1)
    b.emit("sync", queue="COMPUTE")
    b.emit("dwconv", **(good | fields))
    return b


def bad_dwconv_programs(config):
    a, w, c = config.act_lines, config.wgt_lines, config.acc_lines
    return {
        # the last ACT line read is act_addr + (1 + 2)*4 + 3 = act_addr + 15
        "act_past_end": (_bad(config, act_addr=a - 15), "LOCAL_RANGE"),
        "act_last_line_fits": (_bad(config, act_addr=a - 16), None),
        "wgt_past_end": (_bad(config, wgt_addr=w - 8), "LOCAL_RANGE"),
        "acc_past_end": (_bad(config, acc_addr=c - 3), "LOCAL_RANGE"),
        "param_past_end": (_bad(config, use_bias=1, param_addr=config.param_lines), "LOCAL_RANGE"),
        "param_unused": (_bad(config, use_bias=0, param_addr=config.param_lines), None),
        "zero_out_w": (_bad(config, out_w=0), "BAD_FIELD"),
        "zero_out_h": (_bad(config, out_h=0), "BAD_FIELD"),
        "zero_kh": (_bad(config, kh=0), "BAD_FIELD"),
        "zero_kw": (_bad(config, kw=0), "BAD_FIELD"),
        "zero_stride": (_bad(config, stride=0), "BAD_FIELD"),
        "max_with_bias": (_bad(config, use_bias=1, max=1), "BAD_FIELD"),
        "max_without_bias": (_bad(config, use_bias=0, max=1), None),
    }


def test_bad_dwconv_on_the_isa_simulator():
    for name in CONFIGS:
        assert_isa_stops(bad_dwconv_programs(PRESETS[name]), name)


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", CONFIGS)
def test_bad_dwconv_stops_the_rtl_with_the_same_code(config_name, tmp_path):
    config = PRESETS[config_name]
    assert_rtl_stops_alike(config, bad_dwconv_programs(config), tmp_path)


def test_dwconv_fields_round_trip():
    insn = isa.make("dwconv", out_w=4095, out_h=7, pitch=65535, kh=3, kw=2, stride=3, use_bias=1)
    assert isa.decode_insn(insn.encode()) == insn

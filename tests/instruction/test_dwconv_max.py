"""DWCONV in max mode (a max pool on the window unit) on the RTL, against the integer reference
ops and the ISA simulator.

Random images, kernels 1..3 x 1..3, strides 1..3, a row pitch wider than the window reads (the
extra columns hold random data that must not leak in), random weights in the WGT lines the
instruction reads (they must not count), and a second DWCONV over another image accumulating
onto the first (the larger of the two wins). Expected values are
``arch.reference_ops.max_pool2d``, stored through a STORE with random per-channel rescales; the
RTL's whole DRAM must also equal the ISA simulator's, and the window unit counts no MACs (max
with use_bias: a BAD_FIELD case of test_dwconv.py; the ISA simulator alone over more cases:
tests/unit/isa_sim/test_isa_machine.py).
"""

import numpy as np
import pytest

from arch import reference_ops as ref
from arch.config import PRESETS
from tests.instruction.rtl_compare import assert_same_dram, run_both
from tests.programs import Builder

CONFIGS = ["tiny", "default"]
SHAPES = [(3, 3, 2), (3, 3, 1), (2, 2, 2), (1, 1, 1), (2, 3, 1), (3, 1, 3), (1, 3, 2), (3, 2, 1)]


def _max_case(config, rng, *, out_w, out_h, kh, kw, stride, accumulate):
    """One channel block: load one or two pre-padded images and random WGT lines, run DWCONV
    in max mode (a second one accumulating), store; (DRAM address, expected int8)."""
    d = config.rows
    in_h, in_cols = (out_h - 1) * stride + kh, (out_w - 1) * stride + kw
    pitch = in_cols + int(rng.integers(0, 3))
    images = [rng.integers(-128, 128, (d, in_h, pitch), dtype=np.int8)]
    if accumulate:
        images.append(rng.integers(-128, 128, (d, in_h, pitch), dtype=np.int8))
    mult = rng.integers(1 << 30, 1 << 31, d)
    shift = rng.integers(30, 32, d)  # about x0.5..x2: some outputs saturate
    m, taps, lines = out_h * out_w, kh * kw, in_h * pitch

    b = Builder(config)
    params = b.put_params(bias=rng.integers(-100, 100, d), mult=mult, shift=shift)
    b.load_params(params, 1)
    wgt_addr = config.wgt_lines - taps  # random weights the max ignores
    junk = rng.integers(-128, 128, (taps, d), dtype=np.int8)
    b.load_lines("WGT", wgt_addr, b.put(junk), taps, d)
    act_addrs = [0, lines][: len(images)]
    for n, (image, addr) in enumerate(zip(images, act_addrs, strict=True)):
        last = n == len(images) - 1
        b.load_lines("ACT", addr, b.put_nchw(image).addr, lines, d, deps="push_next" * last)
    acc_addr = int(rng.integers(0, config.acc_lines - m + 1))
    pooled = np.full((d, out_h, out_w), -128, np.int64)
    for n, addr in enumerate(act_addrs):
        last = n == len(images) - 1
        b.emit(
            "dwconv",
            ",".join(["pop_prev"] * (n == 0) + ["push_next"] * last),
            wgt_addr=wgt_addr,
            act_addr=addr,
            acc_addr=acc_addr,
            out_w=out_w,
            out_h=out_h,
            pitch=pitch,
            kh=kh,
            kw=kw,
            stride=stride,
            accumulate=int(n > 0),
            max=1,
        )
        used = images[n][None, :, :, :in_cols]
        pooled = np.maximum(pooled, ref.max_pool2d(used, (kh, kw), stride=stride)[0])
    out = b.alloc(m * d)
    b.emit(
        "store",
        "pop_prev",
        desc=b.desc("ACC", acc_addr, out, [(m, d, 1)]),
        param_addr=0,
        param_loop=0,
        clamp_lo=-128,
        clamp_hi=127,
    )
    scaled = ref.requantize(pooled.reshape(d, m).T, mult, shift, axis=1)
    return b, (out, ref.to_int8(ref.clamp(scaled, -128, 127)))


def max_pool_cases(config, seed, count):
    rng = np.random.default_rng(seed)
    programs, expected = {}, {}
    for n in range(count):
        kh, kw, stride = SHAPES[n % len(SHAPES)]
        out_w, out_h = (1, 1) if n == 0 else (int(rng.integers(1, 9)), int(rng.integers(1, 5)))
        name = f"k{kh}x{kw}_s{stride}_{out_h}x{out_w}_{n}"
        programs[name], expected[name] = _max_case(
            config, rng, out_w=out_w, out_h=out_h, kh=kh, kw=kw, stride=stride,
            accumulate=n % 2 == 1,
        )  # fmt: skip
    return programs, expected


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", CONFIGS)
def test_dwconv_max_rtl_matches_reference_and_isa(config_name, tmp_path):
    config = PRESETS[config_name]
    programs, expected = max_pool_cases(config, seed=23 + len(config_name), count=8)
    for outcome in run_both(config, programs, tmp_path):
        assert outcome.isa_error is None, f"{outcome.name}: {outcome.isa_error}"
        assert outcome.rtl.done, f"{outcome.name}: RTL ended with {outcome.rtl.error_code}"
        out, want = expected[outcome.name]
        got = outcome.rtl.dram[out : out + want.size].view(np.int8).reshape(want.shape)
        np.testing.assert_array_equal(got, want, err_msg=outcome.name)
        assert_same_dram(outcome)
        assert outcome.rtl.perf["macs"] == 0, outcome.name

"""DMA and post-processing on the RTL.

DMA: loads sweep lengths x DRAM offsets x strides x padding, on configs with different DRAM
latency and bus width; each loaded line goes back out through POOL (window 1, a copy into ACC)
and an identity STORE to a guard-filled region. Expected: numpy's own gather of the input (with
padding), the guard bytes around every stored line unchanged - and the ISA simulator agreeing
on all of DRAM.

Post-processing: random accumulators (via ACCUM residuals with large multipliers) go through
STORE with random per-channel multipliers, shifts and clamps; expected values come from
``arch.reference_ops``, not from the simulator.
"""

import dataclasses

import numpy as np
import pytest

from arch import reference_ops as ref
from arch.config import PRESETS
from tests.instruction.rtl_compare import assert_same_dram, run_both
from tests.programs import Builder

TINY = PRESETS["tiny"]
DMA_CONFIGS = {
    "tiny": TINY,
    "tiny_lat1_bus4": dataclasses.replace(TINY, dram_latency=1, dram_bytes_per_cycle=4),
    "tiny_lat40_bus16": dataclasses.replace(TINY, dram_latency=40, dram_bytes_per_cycle=16),
}
GUARD = 0xA5


def dma_case(config, rng, lines, offset_lines, stride_lines, pad):
    """Gather `lines` lines starting `offset_lines` into a source with stride `stride_lines`
    (negative y coordinates of the first `pad` lines make them padding)."""
    d = config.rows
    b = Builder(config)
    source = rng.integers(-128, 128, ((offset_lines + lines * stride_lines + 4), d), dtype=np.int8)
    src = b.put(source)
    out = b.alloc((lines + 2) * d * 2, name="output")
    b.dram[out : out + (lines + 2) * d * 2] = GUARD
    ones = np.ones(d, dtype=np.int64)
    params = b.put_params(mult=ones, shift=0 * ones)
    b.load_params(params, 1)
    # Line i reads source line offset + i*stride; lines with y = i - pad < 0 are padding.
    load = b.desc(
        "ACT",
        0,
        src + (offset_lines - pad * stride_lines) * d,
        [(lines, stride_lines * d, 1, 1, 0)],
        y0=-pad,
        height=lines + 10,
        pad_value=-7,
    )
    b.emit("load", "push_next", desc=load)
    b.emit(
        "pool",
        "pop_prev,push_next",
        act_addr=0,
        acc_addr=0,
        m=lines,
        window=1,
        n_iter=1,
        mode="SUM",
    )
    # Store every other line slot so guard bytes sit between the written lines.
    store = b.desc("ACC", 0, out + d, [(lines, 2 * d, 1)])
    b.emit("store", "pop_prev", desc=store, param_addr=0, param_loop=0, clamp_lo=-128, clamp_hi=127)
    expected = np.full((lines, d), -7, dtype=np.int8)
    for i in range(pad, lines):
        expected[i] = source[offset_lines + (i - pad) * stride_lines]
    return b, (out, lines, expected)


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", list(DMA_CONFIGS))
def test_dma_sweep_with_guard_bytes(config_name, tmp_path):
    config = DMA_CONFIGS[config_name]
    rng = np.random.default_rng(len(config_name))
    programs, checks = {}, {}
    for lines in (1, 3, 17):
        for offset in (0, 1, 5):
            for stride in (1, 3):
                for pad in (0, min(2, lines - 1)):
                    name = f"l{lines}_o{offset}_s{stride}_p{pad}"
                    programs[name], checks[name] = dma_case(config, rng, lines, offset, stride, pad)
    d = config.rows
    for outcome in run_both(config, programs, tmp_path):
        assert outcome.rtl.done, f"{outcome.name}: {outcome.rtl.error_code}"
        assert_same_dram(outcome)
        out, lines, expected = checks[outcome.name]
        region = outcome.rtl.dram[out : out + (lines + 2) * d * 2].reshape(-1, d)
        stored = region[1 : 1 + 2 * lines : 2].view(np.int8)
        np.testing.assert_array_equal(stored, expected, err_msg=outcome.name)
        guards = np.concatenate(
            [
                region[0],
                region[2 : 2 * lines + 1 : 2].reshape(-1),
                region[2 * lines + 1 :].reshape(-1),
            ]
        )
        assert (guards == GUARD).all(), (
            f"{outcome.name}: a guard byte around the stored lines changed"
        )


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", ["tiny", "default"])
def test_postprocessing_matches_reference_ops(config_name, tmp_path):
    config = PRESETS[config_name]
    d, rng = config.rows, np.random.default_rng(9)
    programs, expected = {}, {}
    for case in range(6):
        m = int(rng.integers(1, 40))
        x = rng.integers(-128, 128, (m, d), dtype=np.int8)
        res_mult = rng.integers(1 << 28, 1 << 31, d)
        res_shift = rng.integers(0, 14, d)  # accumulators up to ~2**31
        bias = rng.integers(-(1 << 30), 1 << 30, d)
        mult = rng.integers(-(1 << 31), 1 << 31, d)
        shift = rng.integers(20, 63, d)
        lo = int(rng.integers(-128, 0))
        hi = int(rng.integers(0, 128))
        b = Builder(config)
        src = b.put(x)
        params = b.put_params(
            bias=bias, mult=mult, shift=shift, res_mult=res_mult, res_shift=res_shift
        )
        b.load_params(params, 1)
        b.accumulate_lines(src, m)
        out = b.alloc(m * d, name="output")
        b.emit(
            "store",
            "pop_prev",
            desc=b.desc("ACC", 0, out, [(m, d, 1)]),
            param_addr=0,
            param_loop=0,
            clamp_lo=lo,
            clamp_hi=hi,
        )
        acc = ref.add_wrap32(
            np.broadcast_to(bias, (m, d)), ref.requantize(x, res_mult, res_shift, axis=1)
        )
        want = ref.to_int8(ref.clamp(ref.requantize(acc, mult, shift, axis=1), lo, hi))
        programs[f"case{case}"], expected[f"case{case}"] = b, (out, want)
    for outcome in run_both(config, programs, tmp_path):
        assert outcome.rtl.done, f"{outcome.name}: {outcome.rtl.error_code}"
        out, want = expected[outcome.name]
        got = outcome.rtl.dram[out : out + want.size].view(np.int8).reshape(want.shape)
        np.testing.assert_array_equal(got, want, err_msg=outcome.name)
        assert_same_dram(outcome)

"""Instruction level: kernel programs and random valid programs (tests/random_programs.py) on the
RTL, compared bit for bit with the ISA simulator (and, for the GEMM, with numpy), guard bands
intact; bad programs stop with the right code."""

import numpy as np
import pytest

from arch import reference_ops as ref
from arch.config import PRESETS
from tests.instruction.rtl_compare import assert_guards, assert_same_dram, run_both
from tests.programs import Builder, conv2d, pool2d
from tests.random_programs import program_seeds, random_programs

CONFIGS = ["tiny", "default"]


def random_requant(rng, channels, lo=6, hi=10):
    return rng.integers(1 << 30, 1 << 31, channels), rng.integers(lo + 16, hi + 16, channels)


def conv_program(config, rng, *, cin, cout, size, kernel, stride, relu, residual=False):
    x = rng.integers(-128, 128, (cin, size, size), dtype=np.int8)
    w = rng.integers(-128, 128, (cout, cin, kernel, kernel), dtype=np.int8)
    mult, shift = random_requant(rng, cout)
    b = Builder(config)
    columns = {"bias": rng.integers(-4000, 4000, cout), "mult": mult, "shift": shift}
    res = None
    if residual:
        oh = (size + 2 * (kernel // 2) - kernel) // stride + 1
        columns |= {
            "res_mult": rng.integers(1 << 30, 1 << 31, cout),
            "res_shift": rng.integers(20, 26, cout),
        }
        res = b.put_nchw(rng.integers(-128, 128, (cout, oh, oh), dtype=np.int8))
    params = b.put_params(**columns)
    clamp = (0, 127) if relu else (-128, 127)
    conv2d(b, b.put_nchw(x), w, params, stride=stride, pad=kernel // 2, clamp=clamp, residual=res)
    return b


def pool_program(config, rng, *, channels, size, kernel, stride, pad, mode):
    x = rng.integers(-128, 128, (channels, size, size), dtype=np.int8)
    b = Builder(config)
    if mode == "MAX":
        params = b.put_params(mult=np.ones(channels, np.int64), shift=np.zeros(channels, np.int64))
    else:
        mult, shift = ref.quantize_multiplier(1 / (kernel * kernel))
        params = b.put_params(mult=np.full(channels, mult), shift=np.full(channels, shift))
    pool2d(b, b.put_nchw(x), params, kernel=kernel, stride=stride, pad=pad, mode=mode)
    return b


def kernel_programs(config, seed):
    rng, d = np.random.default_rng(seed), config.rows
    return {
        "conv3x3": conv_program(
            config, rng, cin=d, cout=2 * d, size=6, kernel=3, stride=1, relu=True
        ),
        "conv3x3_s2": conv_program(
            config, rng, cin=2 * d, cout=d, size=7, kernel=3, stride=2, relu=False
        ),
        "conv1x1_residual": conv_program(
            config, rng, cin=d, cout=2 * d, size=5, kernel=1, stride=1, relu=True, residual=True
        ),
        "maxpool3x3_s2": pool_program(
            config, rng, channels=2 * d, size=9, kernel=3, stride=2, pad=1, mode="MAX"
        ),
        "global_avgpool": pool_program(
            config, rng, channels=d, size=7, kernel=7, stride=7, pad=0, mode="SUM"
        ),
    }


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", CONFIGS)
def test_kernels_match_isa_simulator(config_name, tmp_path):
    config = PRESETS[config_name]
    for outcome in run_both(config, kernel_programs(config, seed=11), tmp_path):
        assert outcome.isa_error is None, f"{outcome.name}: {outcome.isa_error}"
        assert outcome.rtl.done, f"{outcome.name}: RTL ended with {outcome.rtl.error_code}"
        assert_same_dram(outcome)
        assert outcome.rtl.perf["macs"] == outcome.isa.stats.macs


@pytest.mark.simulator
def test_multi_tile_gemm_matches_numpy_on_16x16(tmp_path):
    """A (96 x 80) @ (80 x 48) GEMM: 5 k blocks x 3 n blocks of 16x16 tiles, through
    load -> compute -> post-process -> store, checked against numpy (not the simulator)."""
    config, rng = PRESETS["default"], np.random.default_rng(5)
    m, k, n = 96, 80, 48
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    w = rng.integers(-128, 128, (n, k), dtype=np.int8)
    bias = rng.integers(-20000, 20000, n)
    mult, shift = random_requant(rng, n, 8, 11)
    b = Builder(config)
    params = b.put_params(bias=bias, mult=mult, shift=shift)
    # A GEMM is a 1x1 convolution over an M x 1 "image".
    x = b.put_nchw(np.ascontiguousarray(a.T).reshape(k, m, 1))
    out = conv2d(b, x, w.reshape(n, k, 1, 1), params, stride=1, pad=0)
    [outcome] = run_both(config, {"gemm": b}, tmp_path)
    assert outcome.rtl.done
    got = outcome.rtl.dram[out.addr : out.addr + m * n].view(np.int8).reshape(m, n)
    acc = a.astype(np.int64) @ w.astype(np.int64).T + bias
    expected = np.clip((acc * mult + (1 << (shift - 1))) >> shift, -128, 127)
    np.testing.assert_array_equal(got, expected)
    assert outcome.rtl.perf["macs"] == m * k * n


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", CONFIGS)
def test_random_programs_match_isa_simulator(config_name, tmp_path):
    config = PRESETS[config_name]
    seeds = program_seeds(6, base=100 + len(config_name))
    for outcome in run_both(config, random_programs(config, seeds), tmp_path):
        assert outcome.isa_error is None, f"{outcome.name}: {outcome.isa_error}"
        assert outcome.rtl.done, f"{outcome.name}: RTL ended with {outcome.rtl.error_code}"
        assert_same_dram(outcome)


def bad_programs(config):
    d, programs = config.rows, {}
    b = Builder(config)
    b.emit("sync", queue="LOAD")
    b.program.insns.append(b.program.insns[-1])
    programs["illegal_opcode"] = b  # patched below: the second instruction's opcode becomes 13
    b = Builder(config)
    b.emit("load", desc=7)
    programs["descriptor_out_of_range"] = b
    b = Builder(config)
    b.emit("sync", "pop_prev", queue="COMPUTE")
    programs["token_deadlock"] = b
    b = Builder(config)
    b.emit("load", desc=b.desc("ACT", config.act_lines - 2, 0x10000, [(4, d, 1)]))
    programs["local_out_of_range"] = b
    b = Builder(config)
    b.emit("load", desc=b.desc("ACT", 0, config.dram_bytes - d, [(4, d, 1)]))
    programs["dram_out_of_range"] = b
    b = Builder(config)
    b.emit("gemm", m=0, k_iter=1, n_iter=1)
    programs["zero_count"] = b
    return programs


EXPECTED_CODES = {
    "illegal_opcode": "ILLEGAL_OPCODE",
    "descriptor_out_of_range": "BAD_DESCRIPTOR",
    "token_deadlock": "DEADLOCK",
    "local_out_of_range": "LOCAL_RANGE",
    "dram_out_of_range": "DRAM_RANGE",
    "zero_count": "BAD_FIELD",
}


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", CONFIGS)
def test_bad_programs_stop_with_the_right_code(config_name, tmp_path):
    config = PRESETS[config_name]
    programs = bad_programs(config)
    builder = programs["illegal_opcode"]
    launch = builder.finish()
    second = launch.insn_base + 16
    builder.dram[second] = (builder.dram[second] & 0xF0) | 13
    builder.finish = lambda: launch  # already placed
    outcomes = run_both(config, programs, tmp_path, max_cycles=200_000)
    for outcome in outcomes:
        expected = EXPECTED_CODES[outcome.name]
        assert outcome.isa_error is not None and outcome.isa_error.code.name == expected, (
            outcome.name
        )
        assert outcome.rtl.error and not outcome.rtl.timeout, f"{outcome.name}: RTL did not stop"
        assert outcome.rtl.error_code == expected, (
            f"{outcome.name}: RTL says {outcome.rtl.error_code}"
        )
        assert outcome.rtl.perf["cycles"] < 1000, (
            f"{outcome.name}: took {outcome.rtl.perf['cycles']} cycles"
        )
        assert_guards(outcome.name, outcome.guard, rtl=outcome.rtl, isa=outcome.isa)

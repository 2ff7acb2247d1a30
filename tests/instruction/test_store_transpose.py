"""STORE with ``transpose`` on the RTL: every run of ``cols`` lines is written as the columns of
its block, as a producer writes k^T for ``q @ k^T``.

Random accumulators in J channel blocks of m token lines (m not a multiple of cols, so the last
run of each block has lines past the height bound: rows of zeros) are stored transposed into
a feature-major tensor, with random per-channel rescales, a random output zero point, once
through a random table; then the same accumulators are stored plainly, so a block left half
drained would show. Expected values come from ``arch.reference_ops`` and numpy's transpose,
not from the simulator; the RTL and the ISA simulator must also agree on every DRAM byte.
"""

import numpy as np
import pytest

from arch import isa
from arch import reference_ops as ref
from arch.config import PRESETS
from tests.instruction.rtl_compare import assert_cases_match
from tests.instruction.test_store_table import _put_table
from tests.programs import Builder


def _transpose_case(config, rng):
    d = config.cols
    blocks = int(rng.integers(1, 4))
    m = int(rng.integers(1, 3 * d + 1))
    if m % d == 0:
        m += 1  # a run with lines past the bound
    runs = -(-m // d)
    stride = runs * d  # ACC lines per block: every run's lines are inside ACC
    x = rng.integers(-128, 128, (blocks * m, d), dtype=np.int8)
    channels = blocks * d
    res_mult = rng.integers(1 << 20, 1 << 24, channels)
    res_shift = rng.integers(0, 6, channels)
    bias = rng.integers(-(1 << 22), 1 << 22, channels)
    mult = rng.integers(1 << 10, 1 << 20, channels) * rng.choice([-1, 1], channels)
    acc = np.stack(
        [
            ref.add_wrap32(
                np.broadcast_to(bias[j * d : (j + 1) * d], (m, d)),
                ref.requantize(
                    x[j * m : (j + 1) * m],
                    res_mult[j * d : (j + 1) * d],
                    res_shift[j * d : (j + 1) * d],
                    axis=1,
                ),
            )
            for j in range(blocks)
        ]
    )  # (blocks, m, d)
    largest = np.abs(acc.astype(np.int64) * mult.reshape(blocks, 1, d)).max(axis=1).ravel()
    shift = np.array([max(0, int(v).bit_length() - 8) for v in largest])
    table = rng.integers(-128, 128, isa.TABLE_ENTRIES, dtype=np.int8)
    table_addr = config.param_lines - isa.table_lines(d)

    b = Builder(config)
    src = b.put(x)
    params = b.put_params(bias=bias, mult=mult, shift=shift, res_mult=res_mult, res_shift=res_shift)
    b.load_params(params, blocks)
    b.load_params(_put_table(b, table), isa.table_lines(d), local=table_addr)
    b.accumulate_lines(src, m, blocks, strides=(stride, m))
    scaled = np.stack(
        [
            ref.requantize(acc[j], mult[j * d : (j + 1) * d], shift[j * d : (j + 1) * d], axis=1)
            for j in range(blocks)
        ]
    )
    zp = int(rng.integers(-20, 21))
    expected = []
    for i, use_table in enumerate((0, 1)):
        pitch = stride + d * int(rng.integers(0, 2))  # bytes per feature row of the output
        out = b.alloc(channels * pitch)
        desc = b.desc(
            "ACC",
            0,
            out,
            [(runs, d, d, d), (blocks, d * pitch, stride), (d, pitch, 1, 1)],
            height=m,
        )
        b.emit(
            "store",
            "pop_prev" if i == 0 else "",
            desc=desc,
            param_addr=0,
            param_loop=isa.DESC_LOOPS - 2,
            clamp_lo=-128,
            clamp_hi=127,
            out_zp=zp,
            use_table=use_table,
            table_addr=table_addr,
            transpose=1,
        )
        codes = ref.to_int8(ref.clamp(scaled + zp, -128, 127))
        if use_table:
            codes = ref.lookup(codes, table)
        block = np.zeros((blocks, stride, d), dtype=np.int8)
        block[:, :m] = codes
        feature_major = block.transpose(0, 2, 1).reshape(channels, stride)
        want = np.zeros((channels, pitch), dtype=np.int8)
        want[:, :stride] = feature_major
        expected.append((out, want))
    plain = b.alloc(blocks * m * d)
    b.emit(
        "store",
        desc=b.desc("ACC", 0, plain, [(blocks, m * d, stride), (m, d, 1)]),
        param_addr=0,
        param_loop=isa.DESC_LOOPS - 2,
        clamp_lo=-128,
        clamp_hi=127,
        out_zp=zp,
    )
    expected.append((plain, ref.to_int8(ref.clamp(scaled + zp, -128, 127)).reshape(-1, d)))
    return b, expected


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", ["tiny", "default"])
def test_transposing_store_matches_reference_ops(config_name, tmp_path):
    assert_cases_match(PRESETS[config_name], _transpose_case, 57, tmp_path)


def test_transposing_store_on_the_isa_simulator():
    """The same cases on the ISA simulator alone, over more seeds (fast)."""
    for seed in range(8):
        rng = np.random.default_rng(seed)
        b, expected = _transpose_case(PRESETS["tiny"], rng)
        machine = b.run_isa()
        for out, want in expected:
            got = machine.dram[out : out + want.size].view(np.int8).reshape(want.shape)
            np.testing.assert_array_equal(got, want, err_msg=f"seed {seed}")

"""STORE's lookup table on the RTL: ``out = table[clamp(requant(acc)) + 128]``.

Random accumulators (ACCUM of a bias and a requantized residual) go through STORE with random
per-channel rescales and clamps and random 256-entry tables placed in PARAM (one at a random
line, one in its last lines); the expected values come from ``arch.reference_ops`` (requantize,
clamp, lookup), not from the simulator. Each program stores the same lines with two different
tables and once without one, so a table that is not read per STORE, or applied when use_table
is 0, shows. A table that runs
past PARAM stops both the RTL and the ISA simulator with LOCAL_RANGE at that STORE.
"""

import numpy as np
import pytest

from arch import isa
from arch import reference_ops as ref
from arch.config import PRESETS
from tests.instruction.rtl_compare import assert_cases_match, run_both
from tests.programs import Builder, random_accumulators


def _put_table(b: Builder, table: np.ndarray) -> int:
    """The table's bytes padded to whole PARAM lines, in DRAM."""
    line = b.dim * isa.PARAM_ENTRY_BYTES
    lines = isa.table_lines(b.dim)
    raw = np.zeros(lines * line, np.uint8)
    raw[: isa.TABLE_ENTRIES] = table.view(np.uint8)
    return b.put(raw)


def _table_case(config, rng):
    d = config.rows
    a = random_accumulators(d, rng, 1 << 24)
    m, x, res_mult, res_shift, bias, acc = a.m, a.x, a.res_mult, a.res_shift, a.bias, a.acc
    mult = rng.integers(-(1 << 31), 1 << 31, d)
    shift = rng.integers(30, 40, d)  # outputs spread over the whole int8 range
    lo, hi = int(rng.integers(-128, -60)), int(rng.integers(60, 128))
    tables = [rng.integers(-128, 128, isa.TABLE_ENTRIES, dtype=np.int8) for _ in range(2)]
    n_lines = isa.table_lines(d)
    table_addrs = [
        int(rng.integers(1, config.param_lines - 2 * n_lines + 1)),
        config.param_lines - n_lines,  # the last lines of PARAM
    ]

    b = Builder(config)
    src = b.put(x)
    params = b.put_params(bias=bias, mult=mult, shift=shift, res_mult=res_mult, res_shift=res_shift)
    b.load_params(params, 1)
    for table, addr in zip(tables, table_addrs, strict=True):
        b.load_params(_put_table(b, table), n_lines, local=addr)
    b.accumulate_lines(src, m)
    codes = ref.to_int8(ref.clamp(ref.requantize(acc, mult, shift, axis=1), lo, hi))
    expected = []
    for i, (table, addr) in enumerate(zip(tables, table_addrs, strict=True)):
        out = b.alloc(m * d)
        b.emit(
            "store",
            "pop_prev" if i == 0 else "",
            desc=b.desc("ACC", 0, out, [(m, d, 1)]),
            param_addr=0,
            param_loop=0,
            clamp_lo=lo,
            clamp_hi=hi,
            use_table=1,
            table_addr=addr,
        )
        expected.append((out, ref.lookup(codes, table)))
    plain = b.alloc(m * d)
    b.emit(
        "store",
        "",
        desc=b.desc("ACC", 0, plain, [(m, d, 1)]),
        param_addr=0,
        param_loop=0,
        clamp_lo=lo,
        clamp_hi=hi,
        table_addr=table_addrs[0],
    )
    expected.append((plain, codes))
    return b, expected


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", ["tiny", "default"])
def test_store_table_matches_reference_ops(config_name, tmp_path):
    assert_cases_match(PRESETS[config_name], _table_case, 23, tmp_path)


@pytest.mark.simulator
def test_table_past_param_is_local_range(tmp_path):
    config = PRESETS["tiny"]
    d = config.rows
    b = Builder(config)
    b.emit("sync", "push_next", queue="COMPUTE")
    b.emit(
        "store",
        "pop_prev",
        desc=b.desc("ACC", 0, b.alloc(d), [(1, d, 1)]),
        clamp_lo=-128,
        clamp_hi=127,
        use_table=1,
        table_addr=config.param_lines - isa.table_lines(d) + 1,
    )
    (outcome,) = run_both(config, {"past": b}, tmp_path)
    assert outcome.isa_error is not None
    assert outcome.isa_error.code is isa.ErrorCode.LOCAL_RANGE
    assert outcome.rtl.error_code == isa.ErrorCode.LOCAL_RANGE.name
    assert outcome.rtl.error_index == outcome.isa_error.insn_index == 1

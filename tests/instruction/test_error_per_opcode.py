"""Error codes raised by the instructions functional coverage found never failing in the
regression (docs/coverage.md: POOL, PERF and STORE had no error of their own, GEMM no
LOCAL_RANGE, LOAD no BAD_FIELD), and CONV's (added later): each case puts a seeded random
out-of-range value in one field and must stop the RTL and the ISA simulator alike, at that
instruction with the intended code."""

from __future__ import annotations

import numpy as np
import pytest

from arch import isa
from arch.config import PRESETS
from sim.backends.rtl import run_programs
from tests.instruction.bad_programs import (
    DATA_AT,
    END,
    Case,
    device_run,
    isa_outcome,
    rtl_outcome,
    word,
)

TINY = PRESETS["tiny"]
SEED = 7


def acc_desc(dram: int = DATA_AT) -> dict:
    return isa.descriptor("ACC", 0, dram, [(2, TINY.cols, 1)])


def cases(rng: np.random.Generator) -> dict[str, tuple[Case, tuple[str, int]]]:
    r = lambda lo, hi: int(rng.integers(lo, hi))  # noqa: E731
    pool = dict(act_addr=0, acc_addr=0, m=1, window=1, n_iter=1, mode="MAX")
    store = dict(desc=0, param_addr=0, param_loop=0, clamp_lo=-128, clamp_hi=127)
    conv = dict(m=1, k_iter=1, n_iter=1, out_w=1, kh=1, kw=1, stride=1)
    return {
        "pool_m_0": (Case("pool_m_0", [word("pool", **{**pool, "m": 0}), END]), ("BAD_FIELD", 0)),
        "pool_window_0": (
            Case("pool_window_0", [word("pool", **{**pool, "window": 0}), END]),
            ("BAD_FIELD", 0),
        ),
        "pool_act_past": (
            Case(
                "pool_act_past",
                [word("pool", **{**pool, "act_addr": TINY.act_lines + r(0, 64)}), END],
            ),
            ("LOCAL_RANGE", 0),
        ),
        "gemm_acc_past": (
            Case(
                "gemm_acc_past",
                [
                    word("gemm", m=1, k_iter=1, n_iter=1, acc_addr=TINY.acc_lines + r(0, 64)),
                    END,
                ],
            ),
            ("LOCAL_RANGE", 0),
        ),
        "perf_misaligned": (
            Case(
                "perf_misaligned", [word("perf", tag=r(0, 99), dram_addr=DATA_AT + r(1, 128)), END]
            ),
            ("DRAM_RANGE", 0),
        ),
        "perf_past_dram": (
            Case("perf_past_dram", [word("perf", dram_addr=TINY.dram_bytes + 128 * r(0, 8)), END]),
            ("DRAM_RANGE", 0),
        ),
        "store_no_descriptor": (
            Case("store_no_descriptor", [word("store", **{**store, "desc": r(1, 50)}), END]),
            ("BAD_DESCRIPTOR", 0),
        ),
        "store_clamp_inverted": (
            Case(
                "store_clamp_inverted",
                [word("store", **{**store, "clamp_lo": r(1, 127), "clamp_hi": r(-128, 0)}), END],
                descs=[acc_desc()],
            ),
            ("BAD_FIELD", 0),
        ),
        "store_past_dram": (
            Case(
                "store_past_dram",
                [word("store", **store), END],
                descs=[acc_desc(TINY.dram_bytes + 64 * r(0, 16))],
            ),
            ("DRAM_RANGE", 0),
        ),
        "store_transpose_short_run": (
            Case(
                "store_transpose_short_run",
                [word("store", **store, transpose=1), END],
                descs=[isa.descriptor("ACC", 0, DATA_AT, [(TINY.cols + r(1, 4), TINY.cols, 1)])],
            ),
            ("BAD_FIELD", 0),
        ),
        # A line past the height bound is still written when transposed: its DRAM is checked.
        "store_transpose_bounded_line_past_dram": (
            Case(
                "store_transpose_bounded_line_past_dram",
                [word("store", **store, transpose=1), END],
                descs=[
                    isa.descriptor(
                        "ACC",
                        0,
                        TINY.dram_bytes - TINY.cols * r(1, TINY.cols),
                        [(TINY.cols, TINY.cols, 1, 1)],
                        height=1,
                    )
                ],
            ),
            ("DRAM_RANGE", 0),
        ),
        "load_into_acc": (
            Case(
                "load_into_acc",
                [word("sync", queue="STORE"), word("load", desc=0), END],
                descs=[acc_desc()],
            ),
            ("BAD_FIELD", 1),
        ),
        # CONV (added after the rest: their draws come last, the others' values stay)
        "conv_kw_0": (
            Case("conv_kw_0", [word("conv", **{**conv, "kw": 0}), END]),
            ("BAD_FIELD", 0),
        ),
        # channel block 1's tile starts past ACT (block 0's is in range)
        "conv_channel_block_past": (
            Case(
                "conv_channel_block_past",
                [
                    word(
                        "conv", **{**conv, "k_iter": 2, "act_k_stride": TINY.act_lines + r(0, 64)}
                    ),
                    END,
                ],
            ),
            ("LOCAL_RANGE", 0),
        ),
        "conv_wgt_past": (
            Case(
                "conv_wgt_past",
                [word("conv", **{**conv, "wgt_addr": TINY.wgt_lines - TINY.rows + r(1, 64)}), END],
            ),
            ("LOCAL_RANGE", 0),
        ),
    }


@pytest.mark.simulator
def test_each_opcode_stops_with_its_own_codes(tmp_path):
    drawn = cases(np.random.default_rng(SEED))
    results = run_programs(TINY, [device_run(case) for case, _ in drawn.values()], tmp_path)
    for (name, (case, expected)), result in zip(drawn.items(), results, strict=True):
        assert isa_outcome(TINY, case) == expected, f"{name}: ISA simulator"
        assert rtl_outcome(result) == expected, f"{name}: RTL"

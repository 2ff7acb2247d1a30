"""The ISA simulator's GEMM and CONV timing (``isa.gemm_cycles``) against the RTL, cycle for cycle.

One GEMM (or CONV) per program, after a SYNC: the RTL's ``compute_busy`` counter must equal the
cycles the ISA simulator charges the compute queue. Row counts ``m`` on both sides of
``rows + cols + 2`` - below it, a weight bank cannot reload behind two tiles' rows and small
tiles go in pairs - and 1 to 8 weight tiles, on the tiny (4x4) and default (16x16) arrays.
"""

from __future__ import annotations

import pytest

from arch.config import PRESETS
from tests.instruction.rtl_compare import run_both
from tests.programs import Builder


def _programs(config):
    rows, cols = config.rows, config.cols
    programs = {}
    for m in sorted({1, 2, rows - 1, rows + 3, rows + cols + 1, rows + cols + 2, 3 * rows}):
        for k_iter, n_iter in [(1, 1), (2, 1), (1, 3), (4, 2)]:
            b = Builder(config)
            b.emit("sync", queue="COMPUTE")
            b.emit(
                "gemm",
                m=m,
                k_iter=k_iter,
                n_iter=n_iter,
                act_k_stride=m,
                acc_n_stride=m,
                accumulate=k_iter % 2,
            )
            programs[f"gemm_m{m}_k{k_iter}_n{n_iter}"] = b
        b = Builder(config)
        b.emit("sync", queue="COMPUTE")
        b.emit("conv", m=m, k_iter=1, n_iter=2, act_k_stride=1, out_w=2, kh=3, kw=1, stride=1)
        programs[f"conv_m{m}"] = b
    return programs


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", ["tiny", "default"])
def test_isa_gemm_timing_is_the_rtls(config_name, tmp_path):
    config = PRESETS[config_name]
    for outcome in run_both(config, _programs(config), tmp_path):
        assert outcome.isa_error is None and outcome.rtl.done, outcome.name
        busy = outcome.isa.stats.busy["COMPUTE"]
        assert outcome.rtl.perf["compute_busy"] == busy, (outcome.name, busy)

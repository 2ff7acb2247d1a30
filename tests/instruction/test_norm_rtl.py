"""NORM on the norm unit's RTL (hdl_gen/norm_engine.py) against arch/norm_ops.py and the ISA
simulator.

LayerNorm, RMSNorm (with an input zero point) and Softmax (no mask, one shared mask row, a
mask row per token, causal) on rows of 1..3 lines and a partial last line, with all-equal rows,
rows of -128/127, all-negative rows, fully masked rows and rows with one position left. Each
program loads rows, masks and PARAM, runs NORM and STOREs the Q8 lines rounded to int8: the
stored rows must equal :func:`arch.norm_ops.norm_rows` / :func:`~arch.norm_ops.softmax_rows`,
the whole DRAM the ISA simulator's, and ``compute_busy`` the ISA cycle model
(:func:`arch.isa.norm_cycles`) exactly. Bad fields, scalars, shifts and ranges stop the RTL
as they stop the ISA simulator.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from arch import isa
from arch.config import PRESETS, VARIANTS
from arch.isa import NormMode
from tests.instruction.norm_cases import (
    ACC,
    ACT,
    PARAM,
    NormCase,
    norm_program,
    stored_rows,
)
from tests.instruction.rtl_compare import (
    assert_isa_stops,
    assert_same_dram,
    assert_stopped_alike,
    run_both,
)
from tests.programs import Builder

TINY = replace(PRESETS["tiny"], norm_unit=True)
LN, RMS, SOFTMAX = NormMode.LAYERNORM, NormMode.RMSNORM, NormMode.SOFTMAX
TINY_CASES = [
    NormCase(LN, 5, 4),
    NormCase(LN, 12, 3),
    NormCase(LN, 3, 2),
    NormCase(RMS, 7, 4),
    NormCase(RMS, 4, 1),
    NormCase(SOFTMAX, 10, 4),
    NormCase(SOFTMAX, 3, 3),
    NormCase(SOFTMAX, 9, 4, "shared"),
    NormCase(SOFTMAX, 6, 5, "per_row"),
    NormCase(SOFTMAX, 8, 4, "causal"),
]


# 16x16 (the default_norm variant): vit's row lengths (768 channels, 197 tokens), BERT-like 64,
# a partial last line; every masking. Its cold build takes minutes: `make test-long` runs it.
DEFAULT_NORM = VARIANTS["default_norm"]
DEFAULT_CASES = [
    NormCase(LN, 768, 4),
    NormCase(LN, 64, 5),
    NormCase(RMS, 100, 3),
    NormCase(SOFTMAX, 197, 4, "shared"),
    NormCase(SOFTMAX, 64, 3, "per_row"),
    NormCase(SOFTMAX, 50, 6, "causal"),
    NormCase(SOFTMAX, 37, 3),
]


@pytest.mark.parametrize(
    ("config", "cases", "seed"), [(TINY, TINY_CASES, 39), (DEFAULT_NORM, DEFAULT_CASES, 16)]
)
def test_norm_program_on_the_isa_simulator_matches_norm_ops(config, cases, seed):
    """The programs themselves (no RTL): the ISA simulator stores norm_ops' rows."""
    builder, expected = norm_program(config, np.random.default_rng(seed), cases)
    machine = builder.run_isa()
    for case, out, want in expected:
        got = stored_rows(machine.dram, out, config, case.m, case.c)
        np.testing.assert_array_equal(got, want, err_msg=case.name)


def check_norm_outcome(config, outcome, expected):
    """Every case's rows equal norm_ops', DRAM the ISA simulator's, and ``compute_busy`` the
    sum of the cases' ``isa.norm_cycles`` (NORM is the compute queue's only instruction)."""
    assert outcome.isa_error is None, f"{outcome.name}: {outcome.isa_error}"
    assert outcome.rtl.done, f"{outcome.name}: RTL ended with {outcome.rtl.error_code}"
    busy = 0
    for case, out, want in expected:
        got = stored_rows(outcome.rtl.dram, out, config, case.m, case.c)
        np.testing.assert_array_equal(got, want, err_msg=case.name)
        busy += isa.norm_cycles(case.mode, case.m, -(-case.c // config.rows))
    assert_same_dram(outcome)
    assert outcome.rtl.perf["compute_busy"] == busy + len(expected) - 1  # a SYNC per barrier


@pytest.mark.simulator
def test_norm_rtl_matches_norm_ops_and_isa_on_tiny(tmp_path):
    """All cases in one program, and the bad programs, in one simulator run."""
    builder, expected = norm_program(TINY, np.random.default_rng(39), TINY_CASES)
    bad = bad_norm_programs(TINY)
    programs = {"cases": builder, **{name: b for name, (b, _) in bad.items()}}
    outcomes = run_both(TINY, programs, tmp_path, 200_000)
    check_norm_outcome(TINY, outcomes[0], expected)
    for outcome in outcomes[1:]:
        assert_stopped_alike(outcome, bad[outcome.name][1])


def _bad(config, eps=100, shift=12, **fields):
    """LOAD PARAM lines (res_mult ``eps``, shifts ``shift``), then NORM (instruction 1)."""
    b = Builder(config)
    d = config.rows
    where = fields.get("param_addr", PARAM)
    local = where if where < config.param_lines else PARAM
    lines = min(2, config.param_lines - local)  # PARAM lines for k_iter <= 2
    scalar = np.array([eps] + [0] * (lines * d - 1))
    params = b.put_params(res_mult=scalar, shift=np.full(lines * d, shift))
    b.load_params(params, lines, local=local, deps="push_next")
    good = dict(act_addr=ACT, acc_addr=ACC, param_addr=PARAM, m=2, k_iter=1)
    b.emit("norm", "pop_prev", **(good | {"mode": LN} | fields))
    return b


def bad_norm_programs(config):
    a, c, p = config.act_lines, config.acc_lines, config.param_lines
    softmax = dict(mode=SOFTMAX, mask_lines=1, m=2, k_iter=2)
    return {
        "zero_m": (_bad(config, m=0), "BAD_FIELD"),
        "zero_k_iter": (_bad(config, k_iter=0), "BAD_FIELD"),
        "too_many_lanes": (_bad(config, last_lanes=config.rows + 1), "BAD_FIELD"),
        "mask_on_layernorm": (_bad(config, mask_lines=1), "BAD_FIELD"),
        "causal_on_rmsnorm": (_bad(config, mode=RMS, causal=1), "BAD_FIELD"),
        "eps_0": (_bad(config, eps=0), "BAD_FIELD"),
        "softmax_k_0": (_bad(config, eps=0, mode=SOFTMAX), "BAD_FIELD"),
        "softmax_k_2_24": (_bad(config, eps=1 << 24, mode=SOFTMAX), "BAD_FIELD"),
        "shift_below_8": (_bad(config, shift=7), "BAD_FIELD"),
        "shift_above_62": (_bad(config, shift=63), "BAD_FIELD"),
        "act_past_end": (_bad(config, act_addr=a - 5, m=5, k_iter=2), "LOCAL_RANGE"),
        "act_last_line_fits": (_bad(config, act_addr=a - 10, m=5, k_iter=2), None),
        "acc_past_end": (_bad(config, acc_addr=c - 1), "LOCAL_RANGE"),
        "param_past_end": (_bad(config, param_addr=p), "LOCAL_RANGE"),
        "param_lines_past_end": (_bad(config, param_addr=p - 1, k_iter=2), "LOCAL_RANGE"),
        "mask_past_end": (_bad(config, **softmax, mask_per_row=1, mask_addr=a - 3), "LOCAL_RANGE"),
        "shared_mask_fits": (_bad(config, **softmax, mask_addr=a - 2), None),
    }


def test_bad_norm_on_the_isa_simulator():
    assert_isa_stops(bad_norm_programs(TINY), "tiny")


@pytest.mark.long
@pytest.mark.simulator
def test_norm_rtl_matches_norm_ops_and_isa_on_16x16(tmp_path):
    """The 16-lane engine: rows of up to 48 lines, every mode and masking, in one run."""
    builder, expected = norm_program(DEFAULT_NORM, np.random.default_rng(16), DEFAULT_CASES)
    outcomes = run_both(DEFAULT_NORM, {"cases": builder}, tmp_path, 400_000)
    check_norm_outcome(DEFAULT_NORM, outcomes[0], expected)

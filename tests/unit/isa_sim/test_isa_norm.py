"""NORM on the ISA simulator against the integer reference rows of arch/norm_ops.py.

Token rows are laid out in ACT as NORM reads them (line ``act_addr + k*m + i`` holds channel
block k of row i), the program NORM + END runs through the decoder and the queue scheduler, and
the ACC lines are rounded as the STORE that follows NORM does (mult=1, shift=8, out_zp). The
expected codes come from :func:`norm_rows` / :func:`softmax_rows`, whose error against float64
``tests/unit/arch/test_norm_ops.py`` bounds.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from arch import isa
from arch import norm_ops as no
from arch.asm import Program
from arch.config import PRESETS, AccelConfig
from arch.isa import ErrorCode, Launch, NormMode
from sim.backends.isa_machine import IsaSimError, Machine

CONFIGS = {
    "tiny": replace(PRESETS["tiny"], norm_unit=True),
    "default": replace(PRESETS["default"], norm_unit=True),
}
ACT, ACC, PARAM, MASK = 8, 4, 2, 600


def lay_rows(machine: Machine, first: int, rows: np.ndarray) -> None:
    """Write (m, C) int8 rows into ACT lines ``first + k*m + i`` (lanes past C stay 0)."""
    m, c = rows.shape
    d = machine.config.rows
    k_iter = -(-c // d)
    padded = np.zeros((m, k_iter * d), dtype=np.int8)
    padded[:, :c] = rows
    blocks = padded.reshape(m, k_iter, d).transpose(1, 0, 2).reshape(-1, d)
    machine.act[first : first + k_iter * m] = blocks


def run_norm(machine: Machine, **fields: object) -> Machine:
    program = Program([isa.make("norm", **fields), isa.make("end")])
    blob = np.frombuffer(program.insn_bytes(), dtype=np.uint8)
    machine.dram[: blob.size] = blob
    machine.run(Launch(0, 4096, 0))
    return machine


def stored(machine: Machine, m: int, c: int, out_zp: int) -> np.ndarray:
    """The ACC rows as STORE writes them with mult=1, shift=8, out_zp, clamp -128..127."""
    d = machine.config.cols
    k_iter = -(-c // d)
    acc = machine.acc[ACC : ACC + k_iter * m].astype(np.int64)
    rows = acc.reshape(k_iter, m, d).transpose(1, 0, 2).reshape(m, -1)[:, :c]
    return np.clip(((rows + 128) >> 8) + out_zp, -128, 127)


def norm_fields(c: int, d: int, m: int, mode: NormMode, **more: object) -> dict[str, object]:
    k_iter = -(-c // d)
    return dict(
        act_addr=ACT, acc_addr=ACC, param_addr=PARAM, m=m, k_iter=k_iter,
        last_lanes=c - (k_iter - 1) * d if c % d else 0, mode=mode, **more,
    )  # fmt: skip


def put_norm_params(machine: Machine, p: no.NormParams) -> None:
    d, c = machine.config.cols, p.mult.size
    for name, values in (("mult", p.mult), ("shift", p.shift), ("bias", p.bias)):
        padded = np.zeros(-(-c // d) * d, dtype=np.int64)
        padded[:c] = values
        machine.param[name][PARAM : PARAM + padded.size // d] = padded.reshape(-1, d)
    machine.param["res_mult"][PARAM, 0] = p.eps_codes


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("mode", [NormMode.LAYERNORM, NormMode.RMSNORM])
@pytest.mark.parametrize("c", [5, 16, 37, 100])
def test_norm_rows_bit_exact(config: str, mode: NormMode, c: int) -> None:
    cfg = CONFIGS[config]
    rng = np.random.default_rng(c)
    m = 6
    x = rng.integers(-128, 128, (m, c)).astype(np.int8)
    x[1] = 77  # an all-equal row
    x[2] = rng.choice([-128, 127], c)  # the extremes
    rms, zp_in = mode is NormMode.RMSNORM, -7 if mode is NormMode.RMSNORM else 0
    p = no.norm_params(
        rng.normal(1, 0.4, c), rng.normal(0, 0.3, c), eps=1e-5, s_in=0.04, s_out=0.03,
        zp_out=2, zp_in=zp_in, rms=rms,
    )  # fmt: skip
    machine = Machine(cfg)
    lay_rows(machine, ACT, x)
    put_norm_params(machine, p)
    run_norm(machine, **norm_fields(c, cfg.rows, m, mode, zp_in=zp_in))
    np.testing.assert_array_equal(stored(machine, m, c, 0), no.norm_rows(x, p))
    k_iter = -(-c // cfg.rows)
    assert machine.stats.insns["norm"] == 1
    # (the documented model: two passes of a line a cycle and the 16-cycle row scalar)
    assert isa.norm_cycles(mode, m, k_iter) == m * (2 * k_iter + 16) + 4


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("c", [3, 16, 50])
@pytest.mark.parametrize("masking", ["none", "shared", "per_row", "causal"])
def test_softmax_rows_bit_exact(config: str, c: int, masking: str) -> None:
    cfg = CONFIGS[config]
    rng = np.random.default_rng(c + len(masking))
    m = 5
    x = rng.integers(-128, 128, (m, c)).astype(np.int8)
    x[0] = -128  # all equal and negative
    k = no.softmax_params(0.07)
    machine = Machine(cfg)
    lay_rows(machine, ACT, x)
    machine.param["res_mult"][PARAM, 0] = k
    more: dict[str, object] = {}
    mask_codes = rng.integers(-20, 20, (m, c)).astype(np.int8)
    mask_codes[rng.random((m, c)) < 0.3] = -128
    mask_codes[3, 1:] = -128  # all masked but one
    mask_codes[4, :] = -128  # all masked
    if masking == "shared":
        lay_rows(machine, MASK, mask_codes[3:4])
        more = dict(mask_lines=1, mask_addr=MASK)
        mask_codes = np.broadcast_to(mask_codes[3], (m, c))
    elif masking == "per_row":
        lay_rows(machine, MASK, mask_codes)
        more = dict(mask_lines=1, mask_addr=MASK, mask_per_row=1)
    elif masking == "causal":
        more = dict(causal=1, row0=1)
        mask_codes = np.where(np.arange(c)[None] > 1 + np.arange(m)[:, None], -128, 0)
    else:
        mask_codes = np.zeros((m, c), dtype=np.int64)
    run_norm(machine, **norm_fields(c, cfg.rows, m, NormMode.SOFTMAX, **more))
    masked = mask_codes == -128
    want = no.softmax_rows(x, k, np.where(masked, 0, mask_codes), masked)
    got = stored(machine, m, c, no.SOFTMAX_ZERO_POINT)
    np.testing.assert_array_equal(got, want)
    assert (got[masked] == -128).all()


def test_norm_without_the_unit_is_an_illegal_opcode() -> None:
    machine = Machine(PRESETS["tiny"])
    message = "illegal opcode 11: NORM needs a config with norm_unit"
    with pytest.raises(IsaSimError, match=message) as exc:
        run_norm(machine, **norm_fields(8, 8, 1, NormMode.SOFTMAX))
    assert exc.value.code is ErrorCode.ILLEGAL_OPCODE


@pytest.mark.parametrize(
    ("fields", "param", "message"),
    [
        (dict(last_lanes=40), 1, "norm.last_lanes 40 exceeds the line's 4 lanes"),
        (dict(mode=NormMode.LAYERNORM, causal=1), 1, "mask_lines and causal are for SOFTMAX"),
        ({}, 0, "softmax K \\(PARAM res_mult\\) 0 is outside"),
        (dict(mode=NormMode.RMSNORM), 0, "eps_codes \\(PARAM res_mult\\) 0 is below 1"),
        (dict(mode=NormMode.RMSNORM), 5, "PARAM shift 0 is below 8"),
        (dict(m=0), 1, "norm.m is 0"),
    ],
)
def test_bad_norm_fields_stop_with_bad_field(fields: dict, param: int, message: str) -> None:
    machine = Machine(CONFIGS["tiny"])
    machine.param["res_mult"][PARAM, 0] = param
    with pytest.raises(IsaSimError, match=message) as exc:
        run_norm(machine, **{**norm_fields(8, 4, 2, NormMode.SOFTMAX), **fields})
    assert exc.value.code is ErrorCode.BAD_FIELD


def test_norm_rows_past_act_stop_with_local_range() -> None:
    cfg = AccelConfig(rows=8, cols=8, norm_unit=True)
    machine = Machine(cfg)
    machine.param["res_mult"][PARAM, 0] = 100
    fields = {**norm_fields(16, 8, 4000, NormMode.SOFTMAX), "act_addr": cfg.act_lines - 10}
    with pytest.raises(IsaSimError, match="ACT lines") as exc:
        run_norm(machine, **fields)
    assert exc.value.code is ErrorCode.LOCAL_RANGE

"""NORM programs for the RTL tests: token rows, masks and PARAM loaded from DRAM, NORM, and a
STORE (mult=1, shift=8, out_zp) rounding its Q8 ACC lines, with the expected int8 rows from
:mod:`arch.norm_ops` (the integer reference, not the ISA simulator)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arch import norm_ops as no
from arch.config import AccelConfig
from arch.isa import NormMode
from tests.programs import Builder

ACT, MASK, ACC, PARAM, STORE_PARAM = 3, 200, 5, 1, 0


@dataclass(frozen=True)
class NormCase:
    """One NORM: ``mode`` on rows of ``c`` channels; ``masking`` for SOFTMAX (none, shared,
    per_row, causal)."""

    mode: NormMode
    c: int
    m: int
    masking: str = "none"

    @property
    def name(self) -> str:
        return f"{self.mode.name.lower()}_c{self.c}_m{self.m}_{self.masking}"


def lines_of(rows: np.ndarray, d: int) -> np.ndarray:
    """(m, C) rows as NORM reads them: line ``k*m + i`` holds channel block k of row i."""
    m, c = rows.shape
    k_iter = -(-c // d)
    padded = np.zeros((m, k_iter * d), dtype=rows.dtype)
    padded[:, :c] = rows
    return np.ascontiguousarray(padded.reshape(m, k_iter, d).transpose(1, 0, 2).reshape(-1, d))


def token_rows(rng: np.random.Generator, m: int, c: int) -> np.ndarray:
    """Random int8 rows with an all-equal row, a row of the extremes and a negative row."""
    x = rng.integers(-128, 128, (m, c)).astype(np.int8)
    x[0] = rng.integers(-128, 128)  # all equal
    if m > 1:
        x[1] = rng.choice([-128, 127], c)  # large values of both signs
    if m > 2:
        x[2] = rng.integers(-128, -90, c)  # all large and negative
    return x


def _masks(rng: np.random.Generator, case: NormCase) -> tuple[np.ndarray, np.ndarray]:
    """(mask codes of every row, masked) for the case's masking."""
    m, c = case.m, case.c
    codes = rng.integers(-40, 40, (m, c)).astype(np.int8)
    codes[rng.random((m, c)) < 0.3] = -128
    codes[m - 1, :] = -128  # a row with every position masked
    if m > 2:
        codes[m - 2, 1:] = -128  # all masked but one
    if case.masking == "shared":
        codes = np.broadcast_to(codes[m - 2 if m > 2 else 0], (m, c))
    elif case.masking == "causal":
        codes = np.where(np.arange(c)[None] > 1 + np.arange(m)[:, None], -128, 0).astype(np.int8)
    elif case.masking == "none":
        codes = np.zeros((m, c), dtype=np.int8)
    return codes, codes == -128


def norm_program(
    config: AccelConfig, rng: np.random.Generator, cases: list[NormCase]
) -> tuple[Builder, list[tuple[NormCase, int, np.ndarray]]]:
    """One program running ``cases`` one after the other (a barrier between them), with each
    case's (case, DRAM address of its stored rows, expected (m, C) int8 rows)."""
    b = Builder(config)
    expected = []
    for n, case in enumerate(cases):
        if n:
            b.barrier()
        out, want = emit_case(b, rng, case)
        expected.append((case, out, want))
    return b, expected


def emit_case(b: Builder, rng: np.random.Generator, case: NormCase) -> tuple[int, np.ndarray]:
    """LOADs, NORM and STORE of ``case`` into ``b``: (DRAM address of the rows, expected)."""
    d, m, c = b.config.rows, case.m, case.c
    k_iter = -(-c // d)
    x = token_rows(rng, m, c)
    fields: dict[str, object] = {}
    softmax = case.mode is NormMode.SOFTMAX
    if softmax:
        k = no.softmax_params(float(rng.uniform(0.03, 0.12)))
        codes, masked = _masks(rng, case)
        want = no.softmax_rows(x, k, np.where(masked, 0, codes), masked)
        params = dict(res_mult=np.array([k] + [0] * (k_iter * d - 1)))
        out_zp = no.SOFTMAX_ZERO_POINT
        if case.masking in ("shared", "per_row"):
            shown = codes[:1] if case.masking == "shared" else codes
            b.load_lines("ACT", MASK, b.put(lines_of(shown, d)), k_iter * len(shown), d)
            fields = dict(mask_lines=1, mask_addr=MASK, mask_per_row=int(len(shown) > 1))
        elif case.masking == "causal":
            fields = dict(causal=1, row0=1)
    else:
        rms = case.mode is NormMode.RMSNORM
        zp_in = int(rng.integers(-20, 20)) if rms else 0
        p = no.norm_params(
            rng.normal(1, 0.4, c), rng.normal(0, 0.3, c), eps=1e-5, s_in=0.04, s_out=0.03,
            zp_out=int(rng.integers(-5, 5)), zp_in=zp_in, rms=rms,
        )  # fmt: skip
        want = no.norm_rows(x, p)
        pad = k_iter * d - c
        filler = {"mult": [0] * pad, "shift": rng.integers(8, 40, pad), "bias": [0] * pad}
        params = {
            name: np.concatenate([values, filler[name]])
            for name, values in (("mult", p.mult), ("shift", p.shift), ("bias", p.bias))
        }
        params["res_mult"] = np.array([p.eps_codes] + [0] * (k_iter * d - 1))
        out_zp, fields = 0, dict(zp_in=zp_in)
    b.load_params(b.put_params(**params), k_iter, local=PARAM)
    store = b.put_params(mult=np.ones(d, np.int64), shift=np.full(d, 8))
    b.load_params(store, 1, local=STORE_PARAM)
    b.load_lines("ACT", ACT, b.put(lines_of(x, d)), k_iter * m, d, deps="push_next")
    b.emit(
        "norm", "pop_prev,push_next", act_addr=ACT, acc_addr=ACC, param_addr=PARAM, m=m,
        k_iter=k_iter, last_lanes=c % d, mode=case.mode, **fields,
    )  # fmt: skip
    out = b.alloc(k_iter * m * d)
    b.emit(
        "store", "pop_prev", desc=b.desc("ACC", ACC, out, [(k_iter * m, d, 1)]),
        param_addr=STORE_PARAM, param_loop=0, clamp_lo=-128, clamp_hi=127, out_zp=out_zp,
    )  # fmt: skip
    return out, want


def stored_rows(dram: np.ndarray, out: int, config: AccelConfig, m: int, c: int) -> np.ndarray:
    """The (m, C) int8 rows a NORM program's STORE wrote at ``out``."""
    d = config.rows
    k_iter = -(-c // d)
    lines = dram[out : out + k_iter * m * d].view(np.int8).reshape(k_iter, m, d)
    return lines.transpose(1, 0, 2).reshape(m, -1)[:, :c]

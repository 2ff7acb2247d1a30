"""Strides the other RTL tests never set apart (`make mutate`'s survivors):

- ACCUM with a residual over several n blocks whose ACT and ACC n strides differ (every other
  program uses one stride for both, so reading block j's residuals at the ACC stride went
  unseen): random lines in the gaps between blocks, values from ``arch.reference_ops``, the
  RTL's DRAM equal to the ISA simulator's.
- DWCONV with stride 2 and 3 whose last input column is the last ACT line runs, and one line
  further stops with LOCAL_RANGE - on the RTL and the ISA simulator alike (a window engine that
  streamed ``stride - 1`` columns past the last window of a row read past ACT there).
"""

from __future__ import annotations

import numpy as np
import pytest

from arch import reference_ops as ref
from arch.config import PRESETS
from tests.instruction.rtl_compare import assert_cases_match, assert_same_dram, run_both
from tests.programs import Builder

pytestmark = pytest.mark.simulator

TINY = PRESETS["tiny"]


def _accum_strides_case(config, rng):
    d = config.rows
    n_iter, m = int(rng.integers(2, 5)), int(rng.integers(1, 6))
    act_stride = int(rng.integers(m, m + 6))
    acc_stride = int(rng.choice([s for s in range(m, m + 6) if s != act_stride]))
    act_lines = (n_iter - 1) * act_stride + m
    x = rng.integers(-128, 128, (act_lines, d), dtype=np.int8)  # gaps hold random lines too
    channels = n_iter * d
    bias = rng.integers(-(1 << 20), 1 << 20, channels)
    res_mult = rng.integers(1, 1 << 12, channels)
    res_shift = rng.integers(0, 4, channels)
    mult = rng.integers(1 << 20, 1 << 24, channels)
    shift = rng.integers(28, 34, channels)

    b = Builder(config)
    params = b.put_params(bias=bias, mult=mult, shift=shift, res_mult=res_mult, res_shift=res_shift)
    b.load_params(params, n_iter)
    b.accumulate_lines(b.put(x), m, n_iter, strides=(acc_stride, act_stride), act_lines=act_lines)
    out = b.alloc(n_iter * m * d)
    desc = b.desc("ACC", 0, out, [(n_iter, m * d, acc_stride), (m, d, 1)])
    b.emit("store", "pop_prev", desc=desc, param_addr=0, param_loop=2, clamp_lo=-128, clamp_hi=127)

    want = []
    for j in range(n_iter):
        cols = slice(j * d, (j + 1) * d)  # block j's channels
        lines = x[j * act_stride : j * act_stride + m]
        residual = ref.requantize(lines, res_mult[cols], res_shift[cols], axis=1)
        acc = ref.add_wrap32(np.broadcast_to(bias[cols], (m, d)), residual)
        scaled = ref.requantize(acc, mult[cols], shift[cols], axis=1)
        want.append(ref.to_int8(ref.clamp(scaled, -128, 127)))
    return b, [(out, np.stack(want))]


def test_accum_act_and_acc_n_strides_apart(tmp_path):
    assert_cases_match(TINY, _accum_strides_case, 41, tmp_path, cases=4)


# stride, out_w, out_h, kh, kw, pitch: the last ACT line read is
# act_addr + ((out_h - 1) * stride + kh - 1) * pitch + (out_w - 1) * stride + kw - 1.
WINDOWS = [(2, 3, 2, 3, 3, 8), (3, 2, 2, 2, 2, 6), (2, 1, 3, 3, 2, 4)]


def _window(config, act_addr: int, stride, out_w, out_h, kh, kw, pitch) -> Builder:
    b = Builder(config)
    b.emit("sync", queue="COMPUTE")
    b.emit(
        "dwconv",
        act_addr=act_addr,
        out_w=out_w,
        out_h=out_h,
        kh=kh,
        kw=kw,
        stride=stride,
        pitch=pitch,
    )
    return b


def test_strided_dwconv_ending_act_runs_and_one_past_stops(tmp_path):
    programs, codes = {}, {}
    for stride, out_w, out_h, kh, kw, pitch in WINDOWS:
        span = ((out_h - 1) * stride + kh - 1) * pitch + (out_w - 1) * stride + kw
        at = TINY.act_lines - span  # the last line read is the last ACT line
        for past in (0, 1):
            name = f"stride{stride}_{out_w}x{out_h}_k{kh}x{kw}" + ("_past" if past else "_ends")
            programs[name] = _window(TINY, at + past, stride, out_w, out_h, kh, kw, pitch)
            codes[name] = "LOCAL_RANGE" if past else None
    for outcome in run_both(TINY, programs, tmp_path, 200_000):
        code = codes[outcome.name]
        if code is None:
            assert outcome.isa_error is None, f"{outcome.name}: {outcome.isa_error}"
            assert outcome.rtl.done, f"{outcome.name}: RTL ended with {outcome.rtl.error_code}"
            assert_same_dram(outcome)
            continue
        assert outcome.isa_error is not None and outcome.isa_error.code.name == code
        assert outcome.isa_error.insn_index == 1, outcome.name
        assert outcome.rtl.error_code == code, f"{outcome.name}: RTL says {outcome.rtl.error_code}"
        assert outcome.rtl.error_index == 1, outcome.name

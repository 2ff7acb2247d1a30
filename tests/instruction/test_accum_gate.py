"""ACCUM's gate on the RTL: ``acc += requant(act * gate, res_mult, res_shift)`` per column, the
gate being ACT line ``gate_addr + j`` of n block j (the squeeze-excitation product).

Random lines, gates, residual rescales and biases over several n blocks (gates at a random ACT
line after the residual, so a gate read from the wrong line or block shows), stored through a
random requantization; the expected values come from ``arch.reference_ops``, not from the
simulators, and the RTL's DRAM must equal the ISA simulator's. A second ungated ACCUM in the same
program checks that the gate does not stick. bias + gated residual is built three ways (every
ACCUM mode): bias, then a gated add; stale lines, a clear (no bias, no residual), then bias and
gated residual added at once; stale lines overwritten by that one ACCUM. An ACCUM that adds
nothing leaves its lines as they are. Bad fields stop both simulators with the same error
at the same instruction.
"""

import numpy as np
import pytest

from arch import isa
from arch import reference_ops as ref
from arch.config import PRESETS
from tests.instruction.rtl_compare import assert_cases_match, run_both
from tests.programs import Builder


def _gate_case(config, rng, variant):
    d = config.rows
    n_iter, m = int(rng.integers(1, 4)), int(rng.integers(1, 24))
    x = rng.integers(-128, 128, (n_iter, m, d), dtype=np.int8)
    gates = rng.integers(-128, 128, (n_iter, d), dtype=np.int8)
    channels = n_iter * d
    bias = rng.integers(-(1 << 20), 1 << 20, channels)
    res_mult = rng.integers(1, 1 << 12, channels)
    res_shift = rng.integers(0, 4, channels)
    mult = rng.integers(1 << 20, 1 << 24, channels)
    shift = rng.integers(28, 34, channels)
    gate_addr = int(rng.integers(n_iter * m, min(config.act_lines, 1 << isa.GATE_ADDR_BITS) - 8))

    b = Builder(config)
    params = b.put_params(bias=bias, mult=mult, shift=shift, res_mult=res_mult, res_shift=res_shift)
    b.load_params(params, n_iter)
    b.load_lines("ACT", gate_addr, b.put(gates), n_iter, d)
    b.load_lines("ACT", 0, b.put(x), n_iter * m, d, deps="push_next")
    first = {"acc_addr": 0, "act_addr": 0, "param_addr": 0, "m": m, "n_iter": n_iter}
    first |= {"acc_n_stride": m, "act_n_stride": m}
    gated = {"use_res": 1, "use_gate": 1, "gate_addr": gate_addr}
    garbage = first | {"use_res": 1}  # ungated lines the next ACCUM must clear or overwrite
    # The first half of ACC gets bias + gated residual in one of three ways (ACCUM modes)...
    accums = [
        [first | {"use_bias": 1}, first | gated | {"accumulate": 1}],
        [garbage, first, first | gated | {"use_bias": 1, "accumulate": 1}],  # a clear, then add
        [garbage, first | gated | {"use_bias": 1}],  # one ACCUM overwrites
    ][variant]
    # ... the second half the same lines without the gate, then nothing added to them.
    second = first | {"acc_addr": n_iter * m}
    accums += [second | {"use_res": 1}, second | {"accumulate": 1}]
    for n, fields in enumerate(accums):
        b.emit(
            "accum", "pop_prev" if n == 0 else "push_next" if n == len(accums) - 1 else "", **fields
        )
    outs = []
    for half, deps in enumerate(("pop_prev", "")):
        outs.append(b.alloc(n_iter * m * d))
        desc = b.desc("ACC", half * n_iter * m, outs[-1], [(n_iter, m * d, m), (m, d, 1)])
        b.emit("store", deps, desc=desc, param_addr=0, param_loop=2, clamp_lo=-128, clamp_hi=127)

    wants: list[list[np.ndarray]] = [[], []]
    for j in range(n_iter):
        cols = slice(j * d, (j + 1) * d)  # block j's channels
        gated = x[j].astype(np.int64) * gates[j]
        residual = ref.requantize(gated, res_mult[cols], res_shift[cols], axis=1)
        acc = ref.add_wrap32(np.broadcast_to(bias[cols], (m, d)), residual)
        plain = ref.requantize(x[j], res_mult[cols], res_shift[cols], axis=1)
        for want, a in zip(wants, (acc, plain), strict=True):
            scaled = ref.requantize(a, mult[cols], shift[cols], axis=1)
            want.append(ref.to_int8(ref.clamp(scaled, -128, 127)))
    return b, [(out, np.stack(want)) for out, want in zip(outs, wants, strict=True)]


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", ["tiny", "default"])
def test_accum_gate_matches_reference_ops(config_name, tmp_path):
    variants = iter(range(3))
    make_case = lambda config, rng: _gate_case(config, rng, next(variants))  # noqa: E731
    assert_cases_match(PRESETS[config_name], make_case, 31, tmp_path)


def _bad_gate(config, **fields):
    b = Builder(config)
    b.desc("ACT", 0, b.alloc(config.rows), [(1, config.rows, 1)])  # a launch needs one
    b.emit("sync", "push_next", queue="LOAD")
    common = {"acc_addr": 0, "act_addr": 0, "param_addr": 0, "m": 2, "n_iter": 2}
    b.emit("accum", "pop_prev", **common, acc_n_stride=2, act_n_stride=2, **fields)
    return b


@pytest.mark.simulator
def test_bad_gates_stop_both_simulators(tmp_path):
    """use_gate without use_res is BAD_FIELD; a gate line past ACT (block 1's, here) is
    LOCAL_RANGE - on the RTL and the ISA simulator, at the ACCUM."""
    config = PRESETS["tiny"]
    programs = {
        "no_res": _bad_gate(config, use_gate=1, gate_addr=0),
        "past_act": _bad_gate(config, use_res=1, use_gate=1, gate_addr=config.act_lines - 1),
    }
    codes = {"no_res": isa.ErrorCode.BAD_FIELD, "past_act": isa.ErrorCode.LOCAL_RANGE}
    for outcome in run_both(config, programs, tmp_path):
        code = codes[outcome.name]
        assert outcome.isa_error is not None and outcome.isa_error.code is code, outcome.name
        assert outcome.rtl.error_code == code.name, outcome.name
        assert outcome.rtl.error_index == outcome.isa_error.insn_index == 1

"""GEMMs back to back on the RTL: a GEMM retires once its rows are read, and the next GEMM
starts while they drain into ACC (``isa.gemm_drain_cycles``) - in the weight bank after the one
before's last tile; a GEMM's token to STORE leaves with its last row into ACC, and any other
compute instruction waits for the drain.

Each case chains 2 to 4 GEMMs of random int8 rows and weights (m on both sides of the pair
limit ``rows + cols + 2``, 1 to 3 k blocks, tile counts odd and even) into the same ACC lines -
the first overwriting, the rest accumulating onto lines the one before is still writing - and
ends in one of three ways: the last GEMM tells STORE; an ACCUM adds a bias to the lines (it
must read them drained) and tells STORE; or a SYNC tells STORE. A fourth kind of case has each
GEMM write lines of its own and tell a STORE of its own: several tokens owed at once, each
leaving with its GEMM's last row, none before. The expected codes are numpy
products requantized by ``arch.reference_ops``, not the simulator's; the RTL and the ISA
simulator must agree on every DRAM byte and on the compute queue's busy cycles (the ISA
model of the overlap, cycle for cycle; with the ACCUM ending, up to what an ACCUM alone with the
same fields already differs by - the ideal model does not time ACCUM to the cycle).
"""

import dataclasses

import numpy as np
import pytest

from arch import reference_ops as ref
from arch.config import PRESETS
from tests.instruction.rtl_compare import assert_same_dram, run_both
from tests.programs import Builder

ENDINGS = ("gemm", "accum", "sync", "stores")


def _chain_case(config, rng, ending):
    d = config.cols
    m = int(rng.choice([1, 2, d + 3, 2 * d + 3]))
    n_iter = int(rng.integers(1, 3))
    n = n_iter * d
    gemms = int(rng.integers(2, 5))
    bias = rng.integers(-3000, 3000, n) if ending == "accum" else np.zeros(n, np.int64)
    mult = rng.integers(1 << 8, 1 << 12, n) * rng.choice([-1, 1], n)
    shift = rng.integers(20, 23, n)

    b = Builder(config)
    b.load_params(b.put_params(bias=bias, mult=mult, shift=shift), n_iter)
    if ending == "stores":
        return _stores_case(config, rng, b, m, n_iter, gemms, mult, shift)
    acc = np.zeros((m, n), np.int64)
    wgt_addr, act_addr, steps = 0, 0, []
    for g in range(gemms):
        k_iter = int(rng.integers(1, 4))
        a = rng.integers(-128, 128, (m, k_iter * d), dtype=np.int8)
        w = rng.integers(-128, 128, (k_iter * d, n), dtype=np.int8)
        tiles = w.reshape(k_iter, d, n_iter, d).transpose(0, 2, 1, 3)  # (k, j) tiles of d lines
        b.load_lines("WGT", wgt_addr, b.put(np.ascontiguousarray(tiles)), k_iter * n_iter * d, d)
        act = np.ascontiguousarray(a.reshape(m, k_iter, d).transpose(1, 0, 2))
        last_load = g == gemms - 1
        b.load_lines("ACT", act_addr, b.put(act), k_iter * m, d, "push_next" if last_load else "")
        steps.append({"wgt_addr": wgt_addr, "act_addr": act_addr, "k_iter": k_iter})
        acc = (acc if g else 0) + a.astype(np.int64) @ w.astype(np.int64)
        wgt_addr += k_iter * n_iter * d
        act_addr += k_iter * m
    for g, step in enumerate(steps):
        deps = ["pop_prev"] if g == 0 else []
        if g == gemms - 1 and ending == "gemm":
            deps.append("push_next")
        b.emit("gemm", ",".join(deps), acc_addr=0, m=m, n_iter=n_iter, act_k_stride=m,
               acc_n_stride=m, accumulate=int(g > 0), **step)  # fmt: skip
    accum = {
        "acc_addr": 0,
        "act_addr": 0,
        "param_addr": 0,
        "m": m,
        "n_iter": n_iter,
        "acc_n_stride": m,
        "act_n_stride": 0,
        "use_bias": 1,
        "use_res": 0,
        "accumulate": 1,
    }
    alone = None
    if ending == "accum":
        b.emit("accum", "push_next", **accum)
        acc = acc + bias
        alone = Builder(config)  # the same ACCUM with no GEMM before it
        alone.load_params(
            alone.put_params(bias=bias, mult=mult, shift=shift), n_iter, deps="push_next"
        )
        alone.emit("accum", "pop_prev", **accum)
    elif ending == "sync":
        b.emit("sync", "push_next", queue="COMPUTE")
    out = b.alloc(m * n)
    desc = b.desc("ACC", 0, out, [(n_iter, d, m), (m, n, 1)])
    b.emit("store", "pop_prev", desc=desc, param_addr=0, param_loop=2, clamp_lo=-128,
           clamp_hi=127)  # fmt: skip
    want = ref.to_int8(ref.clamp(ref.requantize(acc, mult, shift, axis=1), -128, 127))
    return b, ([out], [want]), alone


def _stores_case(config, rng, b, m, n_iter, gemms, mult, shift):
    """Each GEMM into ACC lines of its own, telling STORE; a STORE each, popping in turn."""
    d, n = config.cols, n_iter * config.cols
    lines, wants, wgt_addr, act_addr = n_iter * m, [], 0, 0
    for g in range(gemms):
        a = rng.integers(-128, 128, (m, d), dtype=np.int8)
        w = rng.integers(-128, 128, (d, n), dtype=np.int8)
        tiles = w.reshape(1, d, n_iter, d).transpose(0, 2, 1, 3)
        b.load_lines("WGT", wgt_addr, b.put(np.ascontiguousarray(tiles)), n_iter * d, d)
        b.load_lines("ACT", act_addr, b.put(a), m, d, "push_next")
        b.emit("gemm", "pop_prev,push_next", wgt_addr=wgt_addr, act_addr=act_addr,
               acc_addr=g * lines, m=m, k_iter=1, n_iter=n_iter, act_k_stride=m,
               acc_n_stride=m, accumulate=0)  # fmt: skip
        acc = a.astype(np.int64) @ w.astype(np.int64)
        wants.append(ref.to_int8(ref.clamp(ref.requantize(acc, mult, shift, axis=1), -128, 127)))
        wgt_addr, act_addr = wgt_addr + n_iter * d, act_addr + m
    outs = []
    for g in range(gemms):
        outs.append(b.alloc(m * n))
        desc = b.desc("ACC", g * lines, outs[-1], [(n_iter, d, m), (m, n, 1)])
        b.emit("store", "pop_prev", desc=desc, param_addr=0, param_loop=2, clamp_lo=-128,
               clamp_hi=127)  # fmt: skip
    return b, (outs, wants), None


# On 8x8 with a DRAM of 1 cycle's latency a STORE reads ACC sooner after its token than a
# GEMM's rows take to drain (18 cycles): a token that left with its GEMM's retirement instead
# of its last row shows there (wrong codes); on tiny and 16x16 the STORE's own start-up hides it.
CONFIGS = {
    "tiny": PRESETS["tiny"],
    "small_lat1": dataclasses.replace(PRESETS["tiny"], rows=8, cols=8, dram_latency=1),
    "default": PRESETS["default"],
}


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", list(CONFIGS))
def test_back_to_back_gemms_overlap_their_drain_exactly(config_name, tmp_path):
    config = CONFIGS[config_name]
    rng = np.random.default_rng(2027)
    programs, expected = {}, {}
    for case in range(8):
        name = f"{ENDINGS[case % len(ENDINGS)]}{case}"
        programs[name], expected[name], alone = _chain_case(config, rng, name[:-1])
        if alone is not None:
            programs[f"alone_{name}"] = alone
    outcomes = {o.name: o for o in run_both(config, programs, tmp_path)}

    def offset(name: str) -> int:  # the RTL's busy cycles over the ISA model's
        outcome = outcomes[name]
        return outcome.rtl.perf["compute_busy"] - outcome.isa.stats.busy["COMPUTE"]

    for name, (outs, wants) in expected.items():
        outcome = outcomes[name]
        assert outcome.rtl.done and outcome.isa_error is None, name
        for out, want in zip(outs, wants, strict=True):
            got = outcome.rtl.dram[out : out + want.size].view(np.int8).reshape(want.shape)
            np.testing.assert_array_equal(got, want, err_msg=name)
        assert_same_dram(outcome)
        accum_own = offset(f"alone_{name}") if f"alone_{name}" in outcomes else 0
        assert offset(name) == accum_own, (name, offset(name), accum_own)

"""GEMM with ``transpose_w`` on the RTL: a tile's line r is column r of its weights, so
``q @ k^T`` reads the key rows as they are stored (one position a line), with no transposing
copy.

Each case multiplies random int8 rows A (m x K) by the transpose of random key rows Kr
(N x K): the WGT lines are Kr's rows cut in d-wide pieces, tile (k, j) line r = Kr[j*d + r,
k*d .. k*d + d]. Then a plain GEMM reads the same lines as ordinary weight rows (W[k*d + r,
j*d ..] = line r), into other ACC lines, so a flag that leaks from one GEMM into the next, or
is ignored, shows; its k blocks overwrite, then accumulate. The expected codes come from numpy
products and ``arch.reference_ops``' requantization, not from the simulator; the RTL and the
ISA simulator must also agree on every DRAM byte.
"""

import numpy as np
import pytest

from arch import reference_ops as ref
from arch.config import PRESETS
from tests.instruction.rtl_compare import assert_cases_match
from tests.programs import Builder


def _requantized(acc, mult, shift):
    return ref.to_int8(ref.clamp(ref.requantize(acc, mult, shift, axis=1), -128, 127))


def _transposed_case(config, rng):
    d = config.cols
    m = int(rng.choice([1, 2, int(rng.integers(3, 3 * d))]))
    k_iter, n_iter = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    k, n = k_iter * d, n_iter * d
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    key_rows = rng.integers(-128, 128, (n, k), dtype=np.int8)
    # WGT tile (kb, j): lines j*d .. j*d + d - 1 of the key rows, features kb*d .. kb*d + d - 1.
    tiles = key_rows.reshape(n_iter, d, k_iter, d).transpose(2, 0, 1, 3)
    mult = rng.integers(1 << 8, 1 << 12, n) * rng.choice([-1, 1], n)
    shift = rng.integers(19, 22, n) + (k_iter > 1)  # codes mostly inside the int8 range

    b = Builder(config)
    params = b.put_params(bias=np.zeros(n, np.int64), mult=mult, shift=shift)
    b.load_params(params, n_iter)
    b.load_lines("WGT", 0, b.put(np.ascontiguousarray(tiles)), k_iter * n_iter * d, d)
    act = np.ascontiguousarray(a.reshape(m, k_iter, d).transpose(1, 0, 2))  # k block-major
    b.load_lines("ACT", 0, b.put(act), k_iter * m, d, deps="push_next")
    second = n_iter * m  # the plain GEMM's ACC lines
    common = {"wgt_addr": 0, "act_addr": 0, "m": m, "k_iter": k_iter, "n_iter": n_iter}
    common |= {"act_k_stride": m, "acc_n_stride": m}
    b.emit("gemm", "pop_prev", acc_addr=0, accumulate=0, transpose_w=1, **common)
    b.emit("gemm", "push_next", acc_addr=second, accumulate=0, **common)
    expected = []
    plain = tiles.transpose(0, 2, 1, 3).reshape(k, n)  # line r of tile (kb, j) as W's row
    for i, (acc_addr, w) in enumerate(((0, key_rows.T), (second, plain))):
        out = b.alloc(m * n)
        desc = b.desc("ACC", acc_addr, out, [(n_iter, d, m), (m, n, 1)])
        b.emit(
            "store",
            "pop_prev" if i == 0 else "",
            desc=desc,
            param_addr=0,
            param_loop=2,
            clamp_lo=-128,
            clamp_hi=127,
        )
        acc = a.astype(np.int64) @ w.astype(np.int64)
        expected.append((out, _requantized(acc, mult, shift)))
    return b, expected


@pytest.mark.simulator
@pytest.mark.parametrize("config_name", ["tiny", "default"])
def test_transposed_weights_read_key_rows_as_columns(config_name, tmp_path):
    assert_cases_match(PRESETS[config_name], _transposed_case, 2026, tmp_path)

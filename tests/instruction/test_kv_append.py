"""A decode step's KV-cache append (tests/instruction/kv_append.py) on the ISA simulator and
the RTL: the design check that one instruction stream serves every position, with the
position in the descriptors only.

Expected values are numpy's: the key rows and value rows cached at their positions, the k^T
cache the transpose of the key rows. Over a whole decode (from a 3-token prompt to the end of
the context, crossing lines and ``cols``-position blocks) the host only writes the new rows
and picks the step's descriptor table; every other DRAM byte is checked.
"""

from __future__ import annotations

import numpy as np
import pytest

from arch.config import PRESETS
from sim.backends.isa_machine import Machine
from tests.instruction import kv_append
from tests.instruction.rtl_compare import assert_cases_match

#: The block-rewrite append is not the compiler's yet (its decode copies the key rows whole):
#: kept as the design check of the cheaper append, under make test-long.
pytestmark = pytest.mark.long


def _geometry(config) -> kv_append.Geometry:
    """Two heads of two lines each; a context of three blocks (tiny: 12, default: 48)."""
    return kv_append.Geometry(config.cols, heads=2, head_lines=2, context=3 * config.cols)


def _expected(geo, at, keys, values, dram) -> np.ndarray:
    """``dram`` with the caches holding ``keys`` and ``values`` (context x F, int8)."""
    want = dram.copy()
    size = geo.context * geo.features
    key_t = np.zeros(size, np.int8)
    for h in range(geo.heads):
        for j in range(geo.head_dim):
            at_hj = kv_append.key_t_address(geo, h, j, 0)
            key_t[at_hj : at_hj + geo.context] = keys[:, h * geo.head_dim + j]
    for base, blob in ((at.key_rows, keys.ravel()), (at.key_t, key_t), (at.values, values.ravel())):
        want[base : base + size] = blob.view(np.uint8)
    return want


@pytest.mark.parametrize("config_name", ["tiny", "default"])
def test_one_program_appends_every_position_on_the_isa(config_name) -> None:
    config = PRESETS[config_name]
    geo = _geometry(config)
    b, at, launches = kv_append.tables(config, geo)
    rng = np.random.default_rng(40)
    keys = np.zeros((geo.context, geo.features), np.int8)
    values = np.zeros_like(keys)
    prompt = 3
    keys[:prompt] = rng.integers(-128, 128, (prompt, geo.features))
    values[:prompt] = rng.integers(-128, 128, (prompt, geo.features))
    b.dram[:] = _expected(geo, at, keys, values, b.dram)  # what prefill leaves
    end = b.top + 4096  # (the rest of DRAM is zero and checked once at the end)
    for p in range(prompt, geo.context):
        keys[p] = rng.integers(-128, 128, geo.features)
        values[p] = rng.integers(-128, 128, geo.features)
        new = np.concatenate([keys[p], values[p]])
        b.dram[at.new_rows : at.new_rows + new.size] = new.view(np.uint8)
        before = b.dram[:end].copy()
        Machine(config, b.dram).run(launches[p])
        diff = np.flatnonzero(b.dram[:end] != _expected(geo, at, keys, values, before))
        assert diff.size == 0, f"position {p}: {diff.size} bytes differ from {diff[0]:#x}"
    assert not b.dram[end:].any()


def _step_case(config, rng):
    """One step at a random position after a random prompt: the caches hold random rows
    before it (the block's earlier positions included)."""
    geo = _geometry(config)
    p = int(rng.choice([geo.cols - 1, geo.cols, 2 * geo.cols + 1, geo.context - 1]))
    b, at = kv_append.build(config, geo, p)
    keys = rng.integers(-128, 128, (geo.context, geo.features)).astype(np.int8)
    values = rng.integers(-128, 128, (geo.context, geo.features)).astype(np.int8)
    keys[p + 1 :] = values[p + 1 :] = 0
    before_k, before_v = keys.copy(), values.copy()
    before_k[p] = before_v[p] = 0
    b.dram[:] = _expected(geo, at, before_k, before_v, b.dram)
    new = np.concatenate([keys[p], values[p]])
    b.dram[at.new_rows : at.new_rows + new.size] = new.view(np.uint8)
    want = _expected(geo, at, keys, values, b.dram)
    size = geo.context * geo.features
    return b, [
        (base, want[base : base + size].view(np.int8))
        for base in (at.key_rows, at.key_t, at.values)
    ]


@pytest.mark.simulator
def test_append_steps_on_the_tiny_rtl(tmp_path) -> None:
    assert_cases_match(PRESETS["tiny"], _step_case, 40, tmp_path, cases=2)

"""The PERF counters are 64 bits wide all the way to DRAM: preset near 2**64 by a hook
(tests/instruction/perf_preset.py), every counter wraps inside the program and each PERF record
holds the preset plus the plain run's count, modulo 2**64, in all 64 bits and in place.

A regression run counts at most a few million cycles, so without the preset no counter bit above
~21 ever changes (docs/coverage.md): a counter, snapshot or record path cut to 32 or 48 bits, or
a record beat written at the wrong place, would pass every other test. Tags with high bits set
check the tag's 32 bits the same way."""

from __future__ import annotations

import numpy as np
import pytest

from arch import isa
from arch.config import PRESETS
from sim.backends import hooks
from tests.instruction import perf_preset
from tests.instruction.rtl_compare import assert_guards, run_both
from tests.programs import Builder, conv2d

pytestmark = pytest.mark.simulator

CONFIG = PRESETS["tiny"]
COUNTERS = [name for name, _ in isa.PERF_COUNTERS]
TAGS = (0xFFFF_FFFF, 0x5A5A_A5A5, 0x8000_0001)
WRAP = 1 << 64


def _program(seed: int) -> tuple[Builder, list[int]]:
    """PERF, a 3x3 convolution, PERF, a 1x1 convolution, PERF (each PERF after a barrier)."""
    rng = np.random.default_rng(seed)
    b, d = Builder(CONFIG), CONFIG.rows
    records = [b.alloc(isa.PERF_RECORD.nbytes, align=isa.PERF_RECORD.nbytes, name="perf")]
    b.emit("perf", tag=TAGS[0], dram_addr=records[0])
    for kernel, tag in zip((3, 1), TAGS[1:], strict=True):
        b.barrier()
        x = b.put_nchw(rng.integers(-128, 128, (d, 6, 6), dtype=np.int8))
        w = rng.integers(-128, 128, (2 * d, d, kernel, kernel), dtype=np.int8)
        params = b.put_params(
            bias=rng.integers(-4000, 4000, 2 * d),
            mult=rng.integers(1 << 30, 1 << 31, 2 * d),
            shift=rng.integers(22, 26, 2 * d),
        )
        conv2d(b, x, w, params, stride=1, pad=kernel // 2)
        b.barrier()
        records.append(b.alloc(isa.PERF_RECORD.nbytes, align=isa.PERF_RECORD.nbytes, name="perf"))
        b.emit("perf", tag=tag, dram_addr=records[-1])
    return b, records


def _records(dram: np.ndarray, addresses: list[int]) -> list[dict[str, int]]:
    size = isa.PERF_RECORD.nbytes
    return [
        {k: int(v) for k, v in isa.decode_record(isa.PERF_RECORD, word).items()}
        for word in (int.from_bytes(dram[a : a + size].tobytes(), "little") for a in addresses)
    ]


def _outside_records(size: int, addresses: list[int]) -> np.ndarray:
    mask = np.ones(size, bool)
    for a in addresses:
        mask[a : a + isa.PERF_RECORD.nbytes] = False
    return mask


def test_counters_wrap_at_64_bits_into_the_records(monkeypatch, tmp_path):
    builder, addresses = _program(seed=21)
    [plain] = run_both(CONFIG, {"plain": builder}, tmp_path / "plain")
    assert plain.rtl.done, plain.rtl.error_code
    outside = _outside_records(plain.rtl.dram.size, addresses)
    assert_guards("plain", plain.guard, rtl=plain.rtl, isa=plain.isa)
    # the records hold cycle counts (the ISA simulator's are a model); everything else is exact
    np.testing.assert_array_equal(
        plain.rtl.dram[outside], plain.isa.dram[: plain.rtl.dram.size][outside]
    )
    assert plain.rtl.perf["macs"] == plain.isa.stats.macs
    counts = _records(plain.rtl.dram, addresses)
    assert [r["tag"] for r in counts] == list(TAGS)
    moved = [k for k in COUNTERS if counts[1][k] > counts[0][k]]
    assert moved == COUNTERS, f"counters that stood still between PERF 0 and 1: {moved}"

    # Preset so that every counter reads 2**64 - 1 at the first PERF and wraps before the second.
    preset = {k: WRAP - counts[0][k] - 1 for k in COUNTERS}
    word = isa.encode_record(isa.PERF_RECORD, {"tag": 0, "reserved": 0, **preset})
    builder, _ = _program(seed=21)
    monkeypatch.setenv(hooks.ENV, perf_preset.__name__)
    monkeypatch.setenv(perf_preset.ENV, f"{word:x}")
    [wrapped] = run_both(CONFIG, {"wrapped": builder}, tmp_path / "wrapped")
    assert wrapped.rtl.done, wrapped.rtl.error_code

    assert wrapped.rtl.hooks, wrapped.rtl
    got = _records(wrapped.rtl.dram, addresses)
    for n, (record, count) in enumerate(zip(got, counts, strict=True)):
        expected = {k: (preset[k] + count[k]) % WRAP for k in COUNTERS}
        assert record == {"tag": TAGS[n], "reserved": 0, **expected}, f"record {n}"
    assert all(v == WRAP - 1 for k, v in got[0].items() if k in COUNTERS)
    assert all(got[1][k] < counts[1][k] for k in COUNTERS)  # wrapped between PERF 0 and 1
    assert wrapped.rtl.perf == {k: (preset[k] + plain.rtl.perf[k]) % WRAP for k in COUNTERS}
    # Nothing else changed: every byte but the records equals the plain run's.
    np.testing.assert_array_equal(wrapped.rtl.dram[outside], plain.rtl.dram[outside])

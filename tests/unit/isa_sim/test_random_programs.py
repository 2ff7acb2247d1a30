"""The random program generator (tests/random_programs.py): one variable reruns one seed, a seed
gives the same program every time, and the seeds the RTL tests use together cover every pooling
mode, both accumulate modes of POOL / ACCUM / GEMM, residuals, the bias in ACCUM or STORE, every
clamp kind, signed multipliers, shifts across 0..62, the edge sizes and both ways a conv's loads
hand COMPUTE its token (the last LOAD, a LOAD-queue SYNC) - read back from the emitted program."""

import numpy as np
import pytest

from arch import isa
from arch.config import PRESETS
from tests.random_programs import SEED_VARIABLE, program_seeds, random_program, random_programs


def test_one_variable_reruns_one_seed(monkeypatch, capsys):
    monkeypatch.delenv(SEED_VARIABLE, raising=False)
    seeds = program_seeds(4, base=1)
    assert len(set(seeds)) == 4 and seeds == program_seeds(4, base=1)
    assert f"seeds {seeds}" in capsys.readouterr().out
    monkeypatch.setenv(SEED_VARIABLE, str(seeds[2]))
    assert program_seeds(4, base=1) == [seeds[2]]
    monkeypatch.setenv(SEED_VARIABLE, "random")
    assert program_seeds(3, base=1) != seeds[:3]


def test_a_seed_gives_the_same_program():
    (name, a), (again, b) = (random_program(PRESETS["tiny"], 77) for _ in range(2))
    assert name == again and a.finish() == b.finish()
    np.testing.assert_array_equal(a.dram, b.dram)


def params(builder):
    """Every PARAM entry the program placed in DRAM, decoded."""
    entries = []
    for insn in builder.program.insns:
        if insn.opcode is isa.Opcode.LOAD:
            desc = builder.program.descs[insn["desc"]]
            if desc["mem"] is isa.Mem.PARAM:
                start = desc["dram_base"]
                count = desc[f"loops[{isa.DESC_LOOPS - 1}].count"] * builder.dim
                for at in range(
                    start, start + count * isa.PARAM_ENTRY_BYTES, isa.PARAM_ENTRY_BYTES
                ):
                    word = int.from_bytes(builder.dram[at : at + isa.PARAM_ENTRY_BYTES], "little")
                    entries.append(isa.decode_record(isa.PARAM_ENTRY, word))
    return entries


@pytest.mark.parametrize(("config_name", "count", "base"), [("tiny", 6, 104), ("default", 6, 107)])
def test_the_rtl_tests_seeds_cover_the_isa(config_name, count, base, monkeypatch):
    """The seeds of test_rtl_vs_isa.py, per config (a check of the generator, not the RTL)."""
    monkeypatch.delenv(SEED_VARIABLE, raising=False)
    config = PRESETS[config_name]
    d = config.rows
    seen: set = set()
    mults, shifts = [], []
    for builder in random_programs(config, program_seeds(count, base)).values():
        builder.finish()
        for insn in builder.program.insns:
            op = insn.opcode.name
            if op == "POOL":
                seen |= {("pool", insn["mode"].name), ("pool_acc", insn["accumulate"])}
            elif op == "ACCUM":
                seen |= {("accum_acc", insn["accumulate"]), ("res", insn["use_res"])}
            elif op == "STORE":
                lo, hi = insn["clamp_lo"], insn["clamp_hi"]
                kind = {(-128, 127): "none", (0, 127): "relu"}.get(
                    (lo, hi), "relu6" if lo == 0 else "other"
                )
                seen |= {("clamp", kind), ("store_bias", insn["use_bias"])}
                seen.add(("store_res", insn["use_res"]))
            elif op == "SYNC" and insn["queue"].name == "LOAD" and insn["deps.push_next"]:
                seen.add(("compute_token", "load_queue_sync"))
            elif op == "LOAD":
                if insn["deps.push_next"]:
                    seen.add(("compute_token", "last_load"))
                desc = builder.program.descs[insn["desc"]]
                if desc["height"]:
                    seen.add(("size", desc["height"]))
        entries = params(builder)
        mults += [e["mult"] for e in entries]
        shifts += [e["shift"] for e in entries]
    want = {
        ("pool", "MAX"),
        ("pool", "SUM"),
        ("pool_acc", 0),
        ("pool_acc", 1),
        ("accum_acc", 0),
        ("accum_acc", 1),
        ("res", 0),
        ("res", 1),
        ("clamp", "none"),
        ("clamp", "relu"),
        ("clamp", "relu6"),
        ("clamp", "other"),
        ("store_bias", 0),
        ("store_bias", 1),
        ("store_res", 0),
        ("store_res", 1),
        ("compute_token", "last_load"),
        ("compute_token", "load_queue_sync"),  # once excluded: an RTL bug, test_sync_token_rtl
    }
    assert want <= seen, f"not covered: {sorted(want - seen)}"
    sizes = {v for k, v in seen if k == "size"}
    assert len({1, d - 1, d, d + 1} & sizes) >= 2, sizes
    assert min(mults) < 0 < max(mults)
    assert min(shifts) <= 4 and max(shifts) >= 58

"""Decoding with a KV cache on the ISA simulator: the prefill and decode programs of
``compiler/kv_decode.py`` linked into one image (``compiler/kv_link.py``) and run launch after
launch (``sim/runtime/kv_run.py``).

A chargpt variant of context 20 compiled for tiny with the norm unit: from a 12-token prompt
every decode step to the end of the context (positions across the tiny config's 4-byte lines
and a 16-position tile) must give exactly row p of the integer reference of the full pass over
the final window (:func:`arch.reference.evaluate`, not the decode path), and the caches in DRAM
must end equal to the full pass's key rows and values. Greedy text (and seeded top-k, under
``make test-long``) must be the recomputation's character for character. Refusals name what
is wrong.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import onnx
import pytest

from arch.config import PRESETS
from arch.reference import evaluate, quantize_input
from compiler import kv_link
from compiler.compile import compile_model
from compiler.errors import CompileError
from compiler.kv_link import compile_kv
from compiler.onnx.token_inputs import token_inputs_of
from sim.app.generate import Generation, _pick, generate, generate_in_run
from sim.app.generate_kv import generate_kv
from sim.app.language import LanguageModel
from sim.runtime.host import read_tensor
from sim.runtime.kv_run import KvRun
from sim.runtime.results import RunError
from sim.runtime.run import backend_of
from zoo import chargpt as chargpt_module
from zoo.chargpt import chargpt
from zoo.chargpt_train import TINY

TINY_NORM = dataclasses.replace(PRESETS["tiny"], norm_unit=True)
WIDE = dataclasses.replace(TINY, context=20, layers=2, steps=3)


@pytest.fixture(scope="module")
def wide_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("kv") / "chargpt20.onnx"
    onnx.save(chargpt(shape=WIDE), path)
    return path


@pytest.fixture(scope="module")
def wide(wide_path):
    calibration = chargpt_module.calibration_set(4, WIDE)
    compiled = compile_model(wide_path, TINY_NORM, calibration=calibration)
    kv = compile_kv(wide_path, TINY_NORM, calibration=calibration)
    return compiled, kv


@pytest.fixture(scope="module")
def batch3(wide_path):
    """Three sequences decoded together."""
    calibration = chargpt_module.calibration_set(4, WIDE)
    return compile_kv(wide_path, TINY_NORM, calibration=calibration, batch=3)


def _pack(spec, ids, context):
    window = np.asarray(list(ids) + [0] * (context - len(ids)), np.int64)
    return spec.pack({spec.inputs[0].name: window}, "window")


def test_every_decode_step_is_row_p_of_the_full_pass(wide) -> None:
    compiled, kv = wide
    spec = token_inputs_of(compiled.source)
    ids = list(np.random.default_rng(20).integers(0, WIDE.vocab, 12))
    run = KvRun(kv, backend_of("isa"))
    first = run.prefill(_pack(spec, ids, WIDE.context), len(ids))
    rows = [first.logits[len(ids) - 1]]
    assert first.first_mismatch is None
    while len(ids) < WIDE.context:
        ids.append(int(np.argmax(rows[-1])))
        step = run.step(_pack(spec, ids, WIDE.context))
        assert step.first_mismatch is None
        rows.append(step.logits[0])
    ref = kv.prefill.reference
    x = quantize_input(_pack(spec, ids, WIDE.context), kv.prefill.input.scale or 1.0)
    full = evaluate(ref, x.reshape(kv.prefill.input.shape))
    logits = full[ref.outputs[0]].reshape(WIDE.context, -1)
    for p, row in enumerate(rows, 11):
        np.testing.assert_array_equal(row, logits[p], err_msg=f"position {p}")
    # the caches the launches left in DRAM: the full pass's keys and values
    shape = (1, WIDE.context, 1, WIDE.width)
    for cache in kv.caches:
        for tensor, name in zip((cache.keys, cache.values), cache.prefilled, strict=True):
            np.testing.assert_array_equal(read_tensor(tensor, run.dram, shape), full[name])
    assert len({la.insn_base for la in kv.launches}) == 1  # one program
    assert len({la.desc_base for la in kv.launches}) == WIDE.context  # a table per position


def test_a_batch_decodes_each_sequence_as_its_own_full_pass(wide, batch3) -> None:
    """Three prompts of 12 tokens, greedy to the end of the context: every step's row b is
    row p of the full pass over sequence b alone, and block b of each cache in DRAM ends as
    that full pass's keys and values."""
    compiled, kv = wide[0], batch3
    spec = token_inputs_of(compiled.source)
    texts = [list(np.random.default_rng(b + 40).integers(0, WIDE.vocab, 12)) for b in range(3)]
    run = KvRun(kv, backend_of("isa"))
    rows: list[list[np.ndarray]] = []
    for b, ids in enumerate(texts):
        first = run.prefill(_pack(spec, ids, WIDE.context), len(ids), b)
        assert first.first_mismatch is None
        rows.append([first.logits[len(ids) - 1]])
    while len(texts[0]) < WIDE.context:
        for ids, seen in zip(texts, rows, strict=True):
            ids.append(int(np.argmax(seen[-1])))
        step = run.step(*(_pack(spec, ids, WIDE.context) for ids in texts))
        assert step.first_mismatch is None and step.logits.shape == (3, WIDE.vocab)
        for b, seen in enumerate(rows):
            seen.append(step.logits[b])
    ref = kv.prefill.reference
    shape = (1, WIDE.context, 1, WIDE.width)
    for b, (ids, seen) in enumerate(zip(texts, rows, strict=True)):
        x = quantize_input(_pack(spec, ids, WIDE.context), kv.prefill.input.scale or 1.0)
        full = evaluate(ref, x.reshape(kv.prefill.input.shape))
        logits = full[ref.outputs[0]].reshape(WIDE.context, -1)
        for p, row in enumerate(seen, 11):
            np.testing.assert_array_equal(row, logits[p], err_msg=f"sequence {b}, position {p}")
        for cache in kv.caches:
            for tensor, name in zip((cache.keys, cache.values), cache.prefilled, strict=True):
                block = dataclasses.replace(
                    tensor, addr=tensor.addr + b * WIDE.context * tensor.pixel_stride,
                    h=WIDE.context,
                )  # fmt: skip
                np.testing.assert_array_equal(read_tensor(block, run.dram, shape), full[name])
    assert len({la.desc_base for la in kv.launches}) == WIDE.context
    assert len({la.desc_base for la in kv.prefill_launches}) == 3  # a table per sequence
    assert len({la.insn_base for la in kv.prefill_launches}) == 1  # one prefill program


def test_a_batch_gives_each_sequence_the_text_of_its_own_run(wide, batch3, tmp_path) -> None:
    """Top-k with seed 3: sequence b's text is that of a BATCH=1 run with seed 3 + b (whose text
    the tests above check against recomputation); the sequences differ; a step does the MACs
    of 3 single steps (no row against another sequence's cache), and its utilization counts
    them."""
    compiled, single = wide

    def pick(logits, rng):
        return _pick(logits, 5, rng)

    lm, spec = LanguageModel.of(compiled.source), token_inputs_of(compiled.source)
    assert lm is not None and spec is not None
    want = Generation("np.", 4, 5, seed=3, batch=3)
    printed: list[str] = []
    cached, failure = generate_in_run(
        compiled.executable, compiled.source, want, "isa", printed.append, tmp_path, batch3
    )
    assert failure is None and cached is not None and cached["batch"] == 3
    alone = [
        generate_kv(single, lm, spec, Generation("np.", 4, 5, 3 + b), "isa", pick)["text"]
        for b in range(3)
    ]
    assert cached["texts"] == alone and cached["text"] == alone[0] and len(set(alone)) > 1
    assert "".join(printed).splitlines()[1:] == [
        f"[{b}] {'np.' + text!r}" for b, text in enumerate(alone)
    ]
    steps = [s for s in cached["steps"] if s["launch"] == "decode"]
    assert [len(s["ids"]) for s in steps] == [3] * 3
    # Each row attends to its own sequence's cache only: the step's MACs are 3 single steps'.
    macs = [sum(la.macs for la in kv.decode.programs[0].layers) for kv in (batch3, single)]
    assert macs[0] == 3 * macs[1] > 0
    rows_cols = TINY_NORM.rows * TINY_NORM.cols
    assert all(s["utilization"] * rows_cols * s["cycles"] == pytest.approx(macs[0]) for s in steps)


def test_a_prompt_longer_than_the_context_slides_like_recomputation(wide, tmp_path) -> None:
    compiled, kv = wide
    lm, spec = LanguageModel.of(compiled.source), token_inputs_of(compiled.source)
    assert lm is not None and spec is not None
    want = Generation("Return the array of the", 2)  # 23 characters: its last 20
    again = generate(compiled.executable, lm, spec, dataclasses.replace(want, decode="recompute"),
                     "isa")  # fmt: skip
    cached, failure = generate_in_run(
        compiled.executable, compiled.source, want, "isa", lambda text: None, tmp_path, kv
    )
    assert failure is None and cached is not None and cached["text"] == again["text"]
    assert cached["prefill"]["tokens"] == WIDE.context
    assert [s["launch"] for s in cached["steps"]] == ["prefill"]


@pytest.mark.parametrize(
    ("top_k", "count"), [(None, 4), pytest.param(5, 24, marks=pytest.mark.long)]
)
def test_the_text_is_the_recomputations(wide, top_k, count, tmp_path) -> None:
    compiled, kv = wide
    lm, spec = LanguageModel.of(compiled.source), token_inputs_of(compiled.source)
    assert lm is not None and spec is not None
    want = Generation("np.", count, top_k, seed=3)
    again = generate(compiled.executable, lm, spec, dataclasses.replace(want, decode="recompute"),
                     "isa")  # fmt: skip
    cached, failure = generate_in_run(
        compiled.executable, compiled.source, want, "isa", lambda text: None, tmp_path, kv
    )
    assert failure is None and cached is not None
    assert cached["text"] == again["text"] and len(cached["text"]) == count
    assert cached["mode"] == "kv_cache" and cached["prefill"]["tokens"] == 3
    steps = [s for s in cached["steps"] if s["launch"] == "decode"]
    assert [s["position"] for s in steps] == list(range(3, min(2 + count, WIDE.context)))
    slid = [s for s in cached["steps"] if s["launch"] == "prefill"]  # past the context
    assert len(slid) == max(0, 3 + count - 1 - WIDE.context)
    assert all(s["tokens"] == WIDE.context for s in slid)
    assert all(s["cycles"] > 0 and s["dram_bound_cycles"] > 0 for s in steps)
    ratio = steps[0]["cycles"] / steps[0]["dram_bound_cycles"]
    assert steps[0]["of_dram_bound"] == pytest.approx(ratio, rel=1e-3)
    assert cached["decode_cycles_per_token"] < again["cycles_per_token"]


def test_a_write_outside_the_step_is_refused(wide) -> None:
    compiled, kv = wide
    spec = token_inputs_of(compiled.source)
    run = KvRun(kv, backend_of("isa"))
    run.prefill(_pack(spec, [1, 2], WIDE.context), 2)
    before = run.dram.copy()
    after = before.copy()
    after[kv.caches[0].keys.addr] ^= 1  # row 0 of a cache, at position 2
    with pytest.raises(RunError, match="position 2 wrote 1 bytes outside its tensors"):
        run._check_writes(before, after, run._at(2), 2)


def test_a_batch_too_large_is_refused(wide_path, monkeypatch) -> None:
    """A decode of B sequences that does not compile, or whose caches do not fit DRAM, is
    refused naming B, the caches' positions and why (the compiler's own message kept)."""
    real = kv_link.compile_graph

    def tight(graph, config):  # the decode graph of a batch: its attention products grouped
        if any(node.attrs.get("groups") for node in graph.nodes):
            raise CompileError("attn/scores", "batch_matmul", "no tiling fits", "fewer rows")
        return real(graph, config)

    monkeypatch.setattr(kv_link, "compile_graph", tight)
    with pytest.raises(
        CompileError, match=r"^--batch 4: a decode of 4 sequences \(caches of 80 positions: 4 x "
        r"context 20\) does not compile for this config: node 'attn/scores' \(batch_matmul\): "
        r"no tiling fits; supported: fewer rows; supported: a smaller --batch$",
    ):  # fmt: skip
        compile_kv(wide_path, TINY_NORM, batch=4)
    monkeypatch.setattr(kv_link, "compile_graph", real)
    monkeypatch.setattr(kv_link, "link", lambda *args: SimpleNamespace(dram_end=1 << 40))
    too_much = r"^--batch 2: .* needs 1,099,511,627,776 bytes of DRAM, more than the config's "
    with pytest.raises(CompileError, match=too_much + r"67,108,864; supported: a smaller"):
        compile_kv(wide_path, TINY_NORM, batch=2)


def test_refusals(tmp_path, monkeypatch) -> None:
    with pytest.raises(CompileError, match="no KV-cache decode: .*DECODE=recompute generates"):
        compile_kv("mlp", PRESETS["tiny"])
    seen = {}
    real = kv_link.link

    def spy(prefill, decode, graphs):
        seen.update(decode=decode.programs[0], graphs=graphs)
        return real(prefill, decode, graphs)

    monkeypatch.setattr(kv_link, "link", spy)
    path = tmp_path / "chargpt8.onnx"
    onnx.save(chargpt(shape=TINY), path)
    compile_kv(path, TINY_NORM)
    program, names = seen["decode"], seen["graphs"].caches[0]
    table = kv_link._descriptors(program)
    kv_link._check_order(program, table, names.key_new, names)  # as compiled: in order
    late = [
        dataclasses.replace(la, insn_range=(la.insn_range[0], 10**6))
        if la.output == names.key_new
        else la
        for la in program.layers
    ]
    early = dataclasses.replace(program, layers=late)
    with pytest.raises(CompileError, match=r"instruction \d+ loads the cache before layer"):
        kv_link._check_order(early, table, names.key_new, names)


def test_decode_reads_the_key_cache_as_stored(wide) -> None:
    """No copy of the keys: each ``q @ k^T`` loads its weights from the key cache itself (the
    rows the prefill and the steps write) and its GEMMs read each tile transposed; the product
    with v reads its rows as weight rows, untransposed. (The bit-exact steps above check the
    values; this checks that they come from the cache with no copy between.)"""
    from arch.listing import program_of

    _, kv = wide
    program = kv.decode.programs[0]
    code = program_of(program)
    keys = [(c.keys.addr, c.keys.addr + c.keys.h * c.keys.channels) for c in kv.caches]
    assert len(keys) == WIDE.layers
    products = [layer for layer in program.layers if layer.op == "batch_matmul"]
    assert len(products) == 2 * WIDE.layers
    assert [layer.name for layer in program.layers if layer.name.endswith("#keys")] == []
    transposed = []
    for layer in products:
        insns = code.insns[layer.insn_range[0] : layer.insn_range[1]]
        gemms = [i for i in insns if i.opcode.name == "GEMM"]
        assert gemms, layer.name
        flags = {g["transpose_w"] for g in gemms}
        assert len(flags) == 1, layer.name
        if flags == {1}:
            loads = [code.descs[i["desc"]] for i in insns if i.opcode.name == "LOAD"]
            wgt = [d for d in loads if d["mem"].name == "WGT"]
            assert wgt and all(any(lo <= d["dram_base"] < hi for lo, hi in keys) for d in wgt), (
                layer.name
            )
            transposed.append(layer.name)
    assert len(transposed) == WIDE.layers  # the key products, not the value products

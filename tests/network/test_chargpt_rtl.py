"""The language model on the norm unit's RTL: the tiny ``chargpt`` (one block, 8 characters of
context) compiled for tiny with ``norm_unit`` generates characters by recomputation on the
RTL - each step one device program after the input stage, bit-exact - and they are the ISA
simulator's; a variant of context 20 decodes with the KV cache on the RTL - the prefill launch of 16
positions, then a decode launch at position 16 (the cache crossing a 16-position tile and the
tiny config's 4-byte lines), each launch checked layer by layer and the text the ISA
simulator's; and two sequences decoded together (``BATCH=2``: two prefill launches, one
decode launch). (The same tiny+norm_unit build as test_norm_unit_rtl.py: no build of its
own.)"""

from __future__ import annotations

import dataclasses

import onnx
import pytest

from arch.config import PRESETS
from compiler.compile import compile_model
from compiler.kv_link import compile_kv
from compiler.onnx.token_inputs import token_inputs_of
from sim.app.generate import Generation, generate, generate_in_run
from sim.app.language import LanguageModel
from zoo import chargpt as chargpt_module
from zoo.chargpt import chargpt
from zoo.chargpt_train import TINY

pytestmark = pytest.mark.simulator


def test_tiny_chargpt_generates_on_the_norm_unit_rtl(tmp_path):
    path = tmp_path / "chargpt_tiny.onnx"
    onnx.save(chargpt(shape=TINY), path)
    compiled = compile_model(path, dataclasses.replace(PRESETS["tiny"], norm_unit=True))
    exe, source = compiled.executable, compiled.source
    lm, spec = LanguageModel.of(source), token_inputs_of(source)
    assert lm is not None and spec is not None
    want = Generation("np.arr", 2)
    rtl = generate(exe, lm, spec, want, "rtl", workdir=tmp_path / "rtl")
    isa = generate(exe, lm, spec, want, "isa")
    assert rtl["bit_exact"] and isa["bit_exact"]
    assert rtl["text"] == isa["text"] and len(rtl["text"]) == 2
    assert all(step["cycles"] > 0 for step in rtl["steps"])


def _decoded_on_both(tmp_path, want: Generation, key: str) -> dict:
    """A context-20 chargpt on the tiny norm-unit RTL and the ISA simulator generating
    ``want`` with the KV cache: every launch bit-exact, one decode launch at position 16 (the
    cache across a 4-byte line and a 16-position tile); each backend's ``key`` of the report."""
    shape = dataclasses.replace(TINY, context=20, layers=2, steps=3)
    config = dataclasses.replace(PRESETS["tiny"], norm_unit=True)
    path = tmp_path / "chargpt20.onnx"
    onnx.save(chargpt(shape=shape), path)
    calibration = chargpt_module.calibration_set(4, shape)
    compiled = compile_model(path, config, calibration=calibration)
    kv = compile_kv(path, config, calibration=calibration, batch=want.batch)
    texts = {}
    for backend in ("rtl", "isa"):
        generated, failure = generate_in_run(
            compiled.executable, compiled.source, want, backend, lambda t: None, tmp_path, kv
        )
        assert failure is None and generated is not None and generated["bit_exact"]
        assert [s["position"] for s in generated["steps"]] == [16]
        texts[backend] = generated[key]
    return texts


def test_kv_cache_decode_steps_on_the_norm_unit_rtl(tmp_path):
    texts = _decoded_on_both(tmp_path, Generation("np.ndarray.resha", 2), "text")
    assert texts["rtl"] == texts["isa"] and len(texts["rtl"]) == 2


def test_a_batch_of_two_decodes_on_the_norm_unit_rtl(tmp_path):
    """``BATCH=2`` on the RTL: two prefill launches (a descriptor table each), a decode launch
    of both sequences at position 16 over their caches one after the other - every launch
    checked layer by layer - and each sequence's seeded text the ISA simulator's."""
    want = Generation("np.ndarray.resha", 2, top_k=4, seed=1, batch=2)
    texts = _decoded_on_both(tmp_path, want, "texts")
    assert texts["rtl"] == texts["isa"] and [len(t) for t in texts["rtl"]] == [2, 2]

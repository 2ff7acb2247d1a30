"""The language model on the norm unit's RTL: the tiny ``chargpt`` (one block, 8 characters of
context) compiled for tiny with ``norm_unit`` generates characters by recomputation on the
RTL - each step one device program after the input stage, bit-exact - and they are the ISA
simulator's. (The same tiny+norm_unit build as test_norm_unit_rtl.py: no build of its own.)"""

from __future__ import annotations

import dataclasses

import onnx
import pytest

from arch.config import PRESETS
from compiler.compile import compile_model
from compiler.onnx.token_inputs import token_inputs_of
from sim.app.generate import Generation, generate
from sim.app.language import LanguageModel
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
    want = Generation("np.arr", 3)
    rtl = generate(exe, lm, spec, want, "rtl", workdir=tmp_path / "rtl")
    isa = generate(exe, lm, spec, want, "isa")
    assert rtl["bit_exact"] and isa["bit_exact"]
    assert rtl["text"] == isa["text"] and len(rtl["text"]) == 3
    assert all(step["cycles"] > 0 for step in rtl["steps"])

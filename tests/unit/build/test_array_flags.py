"""Which Verilator settings an array size gets (sim/backends/array_flags.py); the builds they
make are measured in `make bench-scaling`, not here."""

import dataclasses

import pytest

from arch.config import PRESETS
from sim.backends import accelerator, array_flags
from sim.bench.scaling import scaled_config
from sim.verilate.build import _vlt_text, cache_key
from sim.verilate.pyverilator_build import pyverilator_spec

SPLIT_LANES = 'split_var -module "sim_top.accel.store" -var "lanes"'
SPLIT_FUNCTIONS = ("--output-split-cfuncs", "3000")


@pytest.mark.parametrize("size", [2, 4, 8, 16])
def test_arrays_up_to_16x16_keep_the_plain_build(size):
    config = scaled_config(size)
    assert array_flags.control_lines(config) == ()
    assert array_flags.verilator_args(config) == ()


@pytest.mark.parametrize("size", [32, 64])
def test_arrays_from_32x32_on_split_the_store_line_and_the_functions(size):
    config = scaled_config(size)
    assert array_flags.control_lines(config) == (SPLIT_LANES,)
    assert array_flags.verilator_args(config) == SPLIT_FUNCTIONS


def test_the_presets_build_as_before():
    for name in ("tiny", "default"):
        spec = accelerator.accelerator_spec(PRESETS[name])
        assert spec.extra_args and all(arg.startswith("-G") for arg in spec.extra_args), name
        assert spec.control == (), name


def test_a_64x64_build_carries_them_after_its_own(monkeypatch, tmp_path):
    rtl = tmp_path / "sim_top.v"
    rtl.write_text("module sim_top; endmodule\n")
    monkeypatch.setattr(accelerator, "rtl_source", lambda config: rtl)  # not 3 min of Amaranth
    spec = accelerator.accelerator_spec(scaled_config(64))
    assert spec.extra_args[-2:] == SPLIT_FUNCTIONS
    assert any(arg.startswith("-GPERF_BITS=") for arg in spec.extra_args)
    assert spec.control == (SPLIT_LANES,)
    assert SPLIT_LANES in _vlt_text(spec) and SPLIT_LANES in _vlt_text(pyverilator_spec(spec))
    assert spec.sources[1] == rtl


def test_the_control_lines_enter_the_cache_key(monkeypatch, tmp_path):
    rtl = tmp_path / "sim_top.v"
    rtl.write_text("module sim_top; endmodule\n")
    monkeypatch.setattr(accelerator, "rtl_source", lambda config: rtl)
    spec = accelerator.accelerator_spec(scaled_config(64))
    assert cache_key(spec) != cache_key(dataclasses.replace(spec, control=()))

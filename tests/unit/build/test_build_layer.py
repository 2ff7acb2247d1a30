"""The Verilator build layer without running Verilator: what enters the cache key, which C++ main
a build gets, and how the shared runtime objects are found."""

import dataclasses
import os

import pytest

from arch.config import PRESETS
from sim.backends.accelerator import accelerator_spec
from sim.bench.speed import raw_spec
from sim.verilate import build as vb
from sim.verilate.runtime import runtime_objects


def test_accelerator_build_generates_its_clock_and_the_raw_build_is_the_same_model():
    spec = accelerator_spec(PRESETS["tiny"])
    assert spec.clock == "clk" and spec.main is None
    assert vb.harness(spec) == vb.CLOCKED_HARNESS
    raw = raw_spec(spec)
    assert vb.harness(raw).name == "bench_main.cpp" and not vb.uses_cocotb(raw)
    # Same RTL, public signals, flags and DPI sources: only the main differs.
    for name in ("sources", "public", "extra_args", "cpp_sources", "waves", "timing"):
        assert getattr(raw, name) == getattr(spec, name), name
    keys = {vb.cache_key(s) for s in (spec, raw, dataclasses.replace(spec, clock=None))}
    assert len(keys) == 3


def test_clock_fields_are_checked_and_enter_the_key():
    spec = accelerator_spec(PRESETS["tiny"])
    with pytest.raises(ValueError, match="clock"):
        dataclasses.replace(spec, clock="clk; rm")
    with pytest.raises(ValueError, match="clock_period_ns"):
        dataclasses.replace(spec, clock_period_ns=0)
    assert vb.cache_key(spec) != vb.cache_key(dataclasses.replace(spec, clock_period_ns=8))


def test_runtime_objects_are_read_from_the_generated_classes_makefile(tmp_path):
    (tmp_path / "Vtop_classes.mk").write_text(
        "VM_SUPPORT_SLOW += \\\n  Vtop__Syms__Slow \\\n\n"
        "VM_GLOBAL_FAST += \\\n  verilated \\\n  verilated_dpi \\\n  verilated_vpi \\\n\n"
        "VM_GLOBAL_SLOW += \\\n\n"
    )
    assert runtime_objects(tmp_path) == ["verilated.o", "verilated_dpi.o", "verilated_vpi.o"]


def test_generic_cocotb_variables_do_not_reach_the_runner(monkeypatch):
    from cocotb_tools import _env

    from sim.verilate.build import cocotb_environ

    monkeypatch.setenv("WAVES", "vcd")  # what `make sim WAVES=vcd` exported
    monkeypatch.setenv("MAKEFLAGS", " -- WAVES=vcd CONFIG=tiny")
    with pytest.raises(ValueError, match="WAVES"):
        _env.get_bool("WAVES")
    with cocotb_environ():
        assert not _env.get_bool("WAVES") and "MAKEFLAGS" not in os.environ
    assert os.environ["WAVES"] == "vcd"  # restored for the rest of the process


def test_a_file_where_the_build_directory_belongs(tmp_path):
    blocker = tmp_path / "verilator"
    blocker.write_text("not a directory")
    with pytest.raises(vb.BuildError, match=f"{blocker} is a file, not a directory"):
        vb.build(accelerator_spec(PRESETS["tiny"]), root=blocker)


def test_a_cache_hit_is_reported_once_per_process(tmp_path, caplog, monkeypatch):
    """A generation launches the same build once per character: its cache hit is one line, not
    one line in the middle of the text per character."""
    spec = vb.instrumented(accelerator_spec(PRESETS["tiny"]))
    built = tmp_path / f"{spec.design}-{spec.config_name}-{vb.cache_key(spec)}"
    built.mkdir()
    (built / "cosim-build.json").write_text("{}")
    (built / spec.toplevel).write_text("")
    monkeypatch.setattr(vb, "_ANNOUNCED", set())
    with caplog.at_level("INFO", logger="cosim.build"):
        models = [vb.build(spec, root=tmp_path) for _ in range(3)]
    assert all(m.cached and m.build_dir == built for m in models)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["verilator build cached"]

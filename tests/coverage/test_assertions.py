"""RTL assertions (hdl_gen/checks.py, Verilator --assert): a deliberately broken handshake in a
test-only component stops the simulation with the assertion's name, cycle and a waveform
window; the same component with a correct source runs clean; the checks are absent from the
committed RTL and from plain builds."""

from __future__ import annotations

import pytest

from arch.config import PRESETS
from hdl_gen.emit import write_by_content
from hdl_gen.generate import render
from sim.backends.accelerator import accelerator_spec
from sim.verilate import assertions
from sim.verilate.build import BUILD_ROOT, BuildSpec, SimulationFailed, build, run_cocotb
from sim.verilate.instrument import ASSERT_ENV
from tests.block.harness import port_names
from tests.coverage.broken_stream import BrokenSource


def build_source(broken: bool):
    component = BrokenSource(broken)
    name = "broken_source" if broken else "good_source"
    path, digest = write_by_content(component, name, BUILD_ROOT / "gen")
    public = tuple(f'public_flat_rw -module "{name}" -var "{p}"' for p in port_names(component))
    return build(BuildSpec(name, digest, (path,), name, public, assertions=True))


@pytest.mark.simulator
def test_broken_handshake_fires_the_assertion_by_name(tmp_path):
    model = build_source(broken=True)
    with pytest.raises(SimulationFailed) as failed:
        run_cocotb(model, "tests.coverage.cocotb_broken_stream", tmp_path, clock_period_ns=10)
    message = str(failed.value)
    first = message.splitlines()[1].strip()
    assert first.startswith("assertion link.valid_held failed at cycle "), message
    found = assertions.find((tmp_path / "sim.log").read_text(), 10)
    assert found is not None and found.name == "link.valid_held"
    assert found.cycle is not None and 3 <= found.cycle <= 12  # the first withdrawn offer
    assert f"WAVE_CYCLES={max(0, found.cycle - 200)}:{found.cycle + 2}" in first


@pytest.mark.simulator
def test_correct_handshake_passes_the_same_assertions(tmp_path):
    run_cocotb(build_source(broken=False), "tests.coverage.cocotb_broken_stream", tmp_path)


def test_checks_only_in_the_assertion_variant(monkeypatch):
    config = PRESETS["tiny"]
    committed = (BUILD_ROOT.parent.parent / "rtl" / "tiny" / "sim_top.v").read_text()
    assert "assert (" not in committed and "assertion " not in committed, "checks leaked"
    assert "assertion tokens_l2c.no_overflow" in render(config, checks=True)["sim_top.v"]
    monkeypatch.delenv(ASSERT_ENV, raising=False)
    plain = accelerator_spec(config)
    assert not plain.assertions and "--assert" not in " ".join(plain.extra_args)
    monkeypatch.setenv(ASSERT_ENV, "1")
    checked = accelerator_spec(config)
    assert checked.assertions and checked.sources[1] != plain.sources[1]
    # By name (the tests' default, tests/conftest.py): the named configs only.
    monkeypatch.setenv(ASSERT_ENV, "tiny")
    assert accelerator_spec(config) == checked
    assert not accelerator_spec(PRESETS["default"]).assertions
    monkeypatch.setenv(ASSERT_ENV, "default,other")
    assert accelerator_spec(config) == plain

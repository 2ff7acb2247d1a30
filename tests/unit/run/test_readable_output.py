"""Output readable where people read it: the summary table whole in a CI log or a pipe (no
cell cut to ``…`` at 80 columns), and a build's progress computed from its real files."""

from __future__ import annotations

import io
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim.app import report as reports
from sim.app import terminal
from sim.verilate import build_progress

REPO = Path(__file__).resolve().parents[3]


def _report(rng: np.random.Generator) -> dict:
    layers = []
    for index in range(6):
        macs, cycles = int(rng.integers(10**8, 10**9)), int(rng.integers(10**6, 10**7))
        layers.append(
            {
                "name": f"features.block{index}.depthwise_separable.conv_pointwise_{index}",
                "op": "conv",
                "macs": macs,
                "cycles": cycles,
                "ideal_cycles": cycles - int(rng.integers(1, 1000)),
                "utilization": float(rng.random()),
                "bit_exact": True,
                "limiter": f"fill/drain+post {int(rng.integers(10, 99))}%",
            }
        )
    total = {
        "macs": sum(layer["macs"] for layer in layers),
        "cycles": sum(layer["cycles"] for layer in layers),
        "ideal_cycles": sum(layer["ideal_cycles"] for layer in layers),
        "utilization": 0.5,
        "bit_exact": True,
        "sim_wall_s": 123.4,
        "sim_cycles_per_s": 987_654,
    }
    config = {"name": "16x16_i8w8a32_s256k_w128k_c64k_b64_c1a16"}
    return {"model": "mobilenetv2", "config": config, "backend": "rtl", "layers": layers,
            "total": total}  # fmt: skip


def test_table_is_whole_when_output_is_not_a_terminal():
    report = _report(np.random.default_rng(19))
    out = io.StringIO()  # not a terminal, as a CI log or `| tee`
    terminal.show(reports.summary_table(report), out)
    text = out.getvalue()
    assert "…" not in text
    rows = text.splitlines()
    for layer in report["layers"]:
        [row] = [r for r in rows if layer["name"] in r]  # one line each, nothing wrapped
        for value in (f"{layer['macs']:,}", f"{layer['cycles']:,}", layer["limiter"]):
            assert value in row
    assert any("123.4 s, 987,654 cycles/s" in r for r in rows)


def test_cli_table_in_a_pipe_is_whole(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "sim.app.cli", "--model", "mlp", "--config", "tiny"]
        + ["--backend", "isa", "--out", str(tmp_path / "o")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "60"},
    )
    assert done.returncode == 0, done.stderr
    [total] = [line for line in done.stdout.splitlines() if "total" in line]
    assert "cycles/s" in total and "…" not in done.stdout


@pytest.mark.simulator
def test_build_progress_counts_the_units_the_makefiles_compile(tmp_path):
    """On the real tiny build: all units done is ``linking``; with object files removed, the
    fraction is their sources' share, computed here independently."""
    from arch.config import PRESETS
    from sim.backends.accelerator import build_accelerator

    built = build_accelerator(PRESETS["tiny"]).build_dir
    copy = tmp_path / "b"
    shutil.copytree(built, copy, ignore=shutil.ignore_patterns("tb_top", "*.a"))
    assert build_progress.state(copy) == ("linking", 1.0)
    model = sorted(copy.glob("Vtop___024root__*.cpp"))
    rng = np.random.default_rng(7)
    removed = [model[int(i)] for i in rng.choice(len(model), size=len(model) // 2, replace=False)]
    for source in removed:
        source.with_suffix(".o").unlink()
    phase, fraction = build_progress.state(copy)
    sizes = build_progress.units(copy)
    assert set(sizes) >= {p.stem for p in copy.glob("*.cpp")}  # model and harness
    assert {"verilated", "verilated_vpi"} <= set(sizes)  # and the Verilator runtime
    missing = sum(source.stat().st_size for source in removed)
    assert phase == "compiling C++"
    assert abs(fraction - (1 - missing / sum(sizes.values()))) < 1e-9
    (copy / "Vtop.mk").unlink()
    assert build_progress.state(copy) == ("verilating", 0.0)


def test_progress_line_has_percent_and_eta():
    assert build_progress.line("compiling C++", 0.25, 12.0, 10.0) == (
        "  compiling C++ 25%, ETA 30 s (12 s so far)"
    )
    assert build_progress.line("compiling C++", 0.1, 3.0, 2.0) == "  compiling C++ 10% (3 s so far)"
    assert build_progress.line("linking", 1.0, 40.0, 30.0) == "  linking (40 s so far)"


def test_cli_shows_the_build_log_on_stderr(capsys):
    terminal.log_to_stderr()
    terminal.log_to_stderr()  # once, however often called
    logging.getLogger("cosim.build").info("verilator build cached: x (0.01 s)")
    assert capsys.readouterr().err == "verilator build cached: x (0.01 s)\n"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _progress_exe(rng: np.random.Generator):
    from types import SimpleNamespace

    macs = [int(m) for m in rng.integers(10**5, 10**7, size=5)]
    macs[2] = 0  # a pool: no MACs
    layers = [SimpleNamespace(name=f"block{i}.conv", macs=m) for i, m in enumerate(macs)]
    return SimpleNamespace(layers=layers), macs


def test_progress_in_a_log_is_one_whole_line_per_layer_with_an_eta():
    from sim.app.progress import Progress

    exe, macs = _progress_exe(np.random.default_rng(5))
    log = io.StringIO()
    progress = Progress(exe, every_s=30.0)
    states = [(0, 1000, 0.5), (0, 2000, 1.0), (1, 5000, 2.0), (1, 6000, 2.5), (3, 9000, 40.0)]
    for done, cycles, wall in states:
        progress({"layers_done": done, "cycles": cycles, "wall_s": wall}, file=log)
    progress({"layers_done": 3, "cycles": 9500, "wall_s": 71.0}, file=log)  # 31 s: a line again
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    # the first state, each new layer count, and a quiet stretch of 30 s: 4 lines, not 6
    assert [line.split()[1] for line in lines] == ["1/5", "2/5", "4/5", "4/5"]
    assert lines[0].endswith("ETA --")  # nothing done yet: no ETA
    # after 3 layers at 40 s: the MACs still to run at the MAC rate so far
    remaining = 40.0 * (sum(macs) - sum(macs[:3])) / sum(macs[:3])
    minutes, seconds = divmod(int(np.ceil(remaining)), 60)
    assert lines[2].endswith(f"ETA {minutes}m{seconds:02d}s"), lines[2]
    assert "9,000 cycles" in lines[2] and "225 cycles/s" in lines[2]
    progress.close(file=log)
    assert log.getvalue().splitlines() == lines  # nothing to end in a log


def test_progress_on_a_terminal_redraws_one_line_and_the_next_note_starts_fresh(monkeypatch):
    from sim.app import cli

    exe, _ = _progress_exe(np.random.default_rng(6))
    err, out = _Terminal(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", out)
    notes = cli.Printed()
    progress = notes.progress(exe)
    for done in range(3):
        progress({"layers_done": done, "cycles": 100 * (done + 1), "wall_s": 1.0 + done})
    assert err.getvalue().count("\r") == 3 and "\n" not in err.getvalue()
    notes.warn("a warning")
    drawn, warned = err.getvalue().rsplit("\r", 1)[1].split("\n")[:2]
    assert drawn.startswith("  layer 3/5") and "ETA --" not in drawn and warned == "a warning"
    notes.say("done")  # the line was ended once, not twice
    assert err.getvalue().count("\n") == 2 and out.getvalue() == "done\n"

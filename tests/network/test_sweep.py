"""``make sweep``: 2 models x 2 configs on the ISA simulator, on a Dask LocalCluster; every row
against a direct run of its cell, the cache by content, the plot, bad grids
(sim/scaleout/sweep.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from arch.config import PRESETS, ConfigError
from compiler.compile import compile_model
from sim.runtime.run import run
from sim.scaleout import sweep


def direct(model, config, seed):
    exe = compile_model(model, PRESETS[config], seed=seed).executable
    x = np.random.default_rng(seed).standard_normal(exe.input.shape).astype(np.float32)
    return run(exe, x, "isa")


def test_sweep_two_models_two_configs(tmp_path):
    logged = []
    data = sweep.sweep(["cnn", "mlp"], ["tiny", "default"], "isa", 4, tmp_path, logged.append)
    rows = data["rows"]
    assert [(r["model"], r["config"]) for r in rows] == [
        ("cnn", "tiny"),
        ("cnn", "default"),
        ("mlp", "tiny"),
        ("mlp", "default"),
    ]
    for row in rows:
        result = direct(row["model"], row["config"], 4)
        config = PRESETS[row["config"]]
        assert row["bit_exact"] and not row["cached"]
        assert row["cycles"] == result.cycles
        assert row["dram_read_bytes"] == sum(layer.dram_read_bytes for layer in result.layers)
        macs = sum(layer.macs for layer in result.layers)
        assert row["utilization"] == round(macs / (config.macs_per_cycle * result.cycles), 4)
        area = json.loads((sweep.REPO_ROOT / "rtl" / row["config"] / "area.json").read_text())
        assert row["area"]["cells"] == area["components"]["Accelerator_flat"]["cells"] > 0
        assert isinstance(row["wall_s"], float)  # recorded; its size is make bench's business
    assert json.loads((tmp_path / "sweep.json").read_text())["rows"] == rows
    assert (tmp_path / "pareto.png").stat().st_size > 10_000

    again = sweep.sweep(["cnn", "mlp"], ["tiny", "default"], "isa", 4, tmp_path, logged.append)
    assert all(row["cached"] for row in again["rows"])
    strip = [{k: v for k, v in row.items() if k != "cached"} for row in again["rows"]]
    assert strip == [{k: v for k, v in row.items() if k != "cached"} for row in rows]
    assert "4 cached, 0 to run" in logged[-1]


def test_parse_config():
    assert sweep.parse_config("tiny") == PRESETS["tiny"]
    eight = sweep.parse_config("rows=8")
    assert (eight.rows, eight.cols, eight.act_kib) == (8, 8, PRESETS["default"].act_kib)
    narrow = sweep.parse_config("tiny+dram_bytes_per_cycle=4")
    assert narrow.dram_bytes_per_cycle == 4 and narrow.rows == 4
    for bad, message in [
        ("rows=7", "rows must be a power of two"),
        ("nope=1", "unknown field 'nope'"),
        ("rows=x", "rows must be an integer"),
        ("huge", "unknown config 'huge'"),
    ]:
        with pytest.raises(ConfigError, match=message):
            sweep.parse_config(bad)


def test_pareto_front():
    points = [(1, 9), (2, 5), (3, 6), (4, 1), (4, 2)]
    assert sweep.pareto(points) == [0, 1, 3]


def test_bad_grid_is_one_line_exit_2(capsys, tmp_path):
    assert sweep.main(["--models", "cnn,nonet", "--configs", "tiny", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: model 'nonet' is neither a zoo model") and "\n" not in err
    assert sweep.main(["--models", "cnn", "--configs", "rows=3", "--out", str(tmp_path)]) == 2

"""A config with too little PARAM memory is refused for what it is: the message names
``param_lines`` and the lines a layer needs (not "no tiling fits ... ACC half holds 512 lines",
and never a ZeroDivisionError), and the size it says suffices does."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from arch.config import PRESETS
from arch.executable import HostStep
from compiler.compile import compile_model
from compiler.errors import CompileError
from sim.runtime.run import run
from tests.unit.back.test_table_ops import _saved, act_model
from tests.unit.run.test_cli_errors import assert_usage_error, in_process

TINY = PRESETS["tiny"]


def _config(tmp_path, param_lines: int):
    path = tmp_path / f"p{param_lines}.json"
    path.write_text(json.dumps({**TINY.to_dict(), "param_lines": param_lines}))
    return path


@pytest.mark.parametrize("model", ["mlp", "cnn"])
@pytest.mark.parametrize("param_lines", [1, 2])
def test_too_few_param_lines_is_named(model, param_lines, tmp_path, capsys):
    config = str(_config(tmp_path, param_lines))
    line = assert_usage_error(
        in_process(capsys, "--model", model, "--config", config, "--out", str(tmp_path / "o")),
        f"param_lines={param_lines}",
    )
    assert "needs 4: 4 slots of 1 line" in line and "use param_lines >= 4" in line
    assert "no tiling fits" not in line


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_the_size_the_message_names_is_enough(model, tmp_path, capsys):
    args = ("--model", model, "--config", str(_config(tmp_path, 4)), "--out", str(tmp_path / "o"))
    result = in_process(capsys, *args)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "o" / "report.json").read_text())["total"]["bit_exact"]


def test_a_table_layer_counts_its_table(tmp_path):
    """On tiny a lookup table takes 4 PARAM lines: with 4 lines the model is refused with that
    reason; with 8 (the size the reason names) its table layers run on the array."""
    model = _saved(act_model("Sigmoid", {}, 17, seed=5), tmp_path)
    with pytest.raises(CompileError, match=r"plus 4 for its lookup table \(use param_lines >= 8"):
        compile_model(model, dataclasses.replace(TINY, param_lines=4))
    enough = compile_model(model, dataclasses.replace(TINY, param_lines=8)).executable
    assert not [s for s in enough.steps if isinstance(s, HostStep)]
    x = np.random.default_rng(2).standard_normal((1, 3, 10, 10)).astype(np.float32)
    assert run(enough, x, "isa").bit_exact


def test_the_size_named_is_the_next_power_of_two(tmp_path):
    """On the 16-column default config a lookup table takes 1 PARAM line: a table layer needs
    4 slots + 1 = 5 lines, and the size named is the next power of two, 8 (not 5, not 4)."""
    model = _saved(act_model("Sigmoid", {}, 17, seed=5), tmp_path)
    small = dataclasses.replace(PRESETS["default"], param_lines=4)
    with pytest.raises(CompileError) as info:
        compile_model(model, small)
    assert (
        "c1 (Conv): PARAM has 4 lines (config param_lines=4); this layer needs 5: 4 slots of 1 "
        "line plus 1 for its lookup table (use param_lines >= 8);" in str(info.value)
    )

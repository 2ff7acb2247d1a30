"""The norm unit's config gate: ``norm_unit`` is off by default and the RTL refuses it (stage 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arch.config import PRESETS, AccelConfig, ConfigError
from hdl_gen.accelerator import Accelerator
from sim.app.cli import main


def test_default_config_keeps_its_name_and_json() -> None:
    assert "norm_unit" not in AccelConfig().to_json()
    assert AccelConfig().name == AccelConfig(norm_unit=False).name


def test_norm_unit_round_trips_through_json_and_changes_the_name() -> None:
    config = AccelConfig(norm_unit=True)
    assert AccelConfig.from_json(config.to_json()) == config
    assert config.name != AccelConfig().name


def test_norm_unit_must_be_a_bool() -> None:
    with pytest.raises(ConfigError, match="norm_unit must be true or false, not 1"):
        AccelConfig(norm_unit=1)  # type: ignore[arg-type]


def test_rtl_generation_refuses_the_norm_unit_until_stage_2() -> None:
    with pytest.raises(ConfigError, match="the norm unit's RTL is not generated yet"):
        Accelerator(AccelConfig(norm_unit=True))


def test_make_sim_on_the_rtl_with_the_norm_unit_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "norm.json"
    config.write_text(json.dumps({**PRESETS["tiny"].to_dict(), "norm_unit": True}))
    args = ["--model", "mlp", "--config", str(config), "--backend", "rtl"]
    code = main([*args, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1] == (
        "error: the norm unit's RTL is not generated yet: norm_unit=true runs on the ISA "
        "backend only (issue 39, stage 2 builds it)"
    )

"""The norm unit's config gate: ``norm_unit`` is off by default and the RTL refuses it (stage 1)."""

from __future__ import annotations

import pytest

from arch.config import AccelConfig, ConfigError
from hdl_gen.accelerator import Accelerator


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

"""The norm unit's config gate: ``norm_unit`` is off by default; only with it has the RTL a norm
engine."""

from __future__ import annotations

from dataclasses import replace

import pytest
from amaranth.hdl import Fragment

from arch.config import PRESETS, AccelConfig, ConfigError
from hdl_gen.compute_unit import ComputeUnit


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


def _engines(config: AccelConfig) -> set[str]:
    fragment = Fragment.get(ComputeUnit(config), None)
    return {name for _, name, _ in fragment.subfragments}


def test_the_norm_engine_is_generated_only_with_the_unit() -> None:
    tiny = PRESETS["tiny"]
    assert "norm" in _engines(replace(tiny, norm_unit=True))
    assert "norm" not in _engines(tiny) and "window" in _engines(tiny)

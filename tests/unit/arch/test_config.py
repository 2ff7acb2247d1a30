"""The accelerator config: validation messages, JSON round trip, canonical names."""

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arch.config import PRESETS, VARIANTS, AccelConfig, ConfigError, load_config


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_round_trip_through_json(name, tmp_path):
    config = PRESETS[name]
    path = tmp_path / f"{name}.json"
    config.save(path)
    assert AccelConfig.from_json(path.read_text()) == config
    assert load_config(path) == config
    assert load_config(name) is config


def test_default_norm_is_default_with_the_norm_unit_only():
    """The variant differs from its preset in norm_unit alone, and the preset keeps it off."""
    variant, default = load_config("default_norm"), PRESETS["default"]
    assert variant is VARIANTS["default_norm"]
    differ = {k for k, v in variant.to_dict().items() if default.to_dict().get(k) != v}
    assert differ == {"norm_unit"}
    assert variant.norm_unit and not default.norm_unit
    assert variant.name != default.name  # its own build and artifact folders


def test_default_is_16x16_int8_int32():
    c = PRESETS["default"]
    assert (c.rows, c.cols, c.in_bits, c.w_bits, c.acc_bits) == (16, 16, 8, 8, 32)
    assert (PRESETS["tiny"].rows, PRESETS["tiny"].cols) == (4, 4)


@settings(max_examples=60, deadline=None)
@given(
    dim=st.sampled_from([2, 4, 8, 16, 32]),
    act=st.sampled_from([8, 16, 64, 128]),
    bus=st.sampled_from([4, 8, 16, 64]),
    latency=st.integers(1, 200),
)
def test_name_is_unique_and_stable(dim, act, bus, latency):
    config = AccelConfig(
        rows=dim, cols=dim, act_kib=act, dram_bytes_per_cycle=bus, dram_latency=latency
    )
    again = AccelConfig.from_json(config.to_json())
    assert again.name == config.name
    changed = dataclasses.replace(config, dram_latency=latency + 1)
    assert changed.name != config.name  # a field outside the readable part still changes it
    assert config.name.startswith(f"{dim}x{dim}_i8w8a32_s{act}k")


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"rows": 3, "cols": 3}, ["rows", "power of two", "3"]),
        ({"rows": 16, "cols": 8}, ["square", "rows=16", "cols=8"]),
        ({"in_bits": 4}, ["in_bits=4"]),
        ({"dram_bytes_per_cycle": 12}, ["dram_bytes_per_cycle", "12"]),
        ({"act_kib": 0}, ["act_kib=0"]),
        ({"acc_kib": 8192}, ["acc_kib=8192", "131072 lines", "65536"]),
        ({"wgt_kib": 3}, ["wgt_kib=3", "power-of-two"]),
        ({"token_depth": 0}, ["token_depth", "0"]),
        ({"dataflow": "output_stationary"}, ["dataflow", "output_stationary"]),
        ({"rows": "16"}, ["rows", "integer", "'16'"]),
    ],
)
def test_bad_values_name_field_and_numbers(fields, words):
    with pytest.raises(ConfigError) as info:
        AccelConfig(**fields)
    for word in words:
        assert word in str(info.value)


def test_bad_json_and_unknown_fields():
    with pytest.raises(ConfigError, match="unknown config field.*'colz'"):
        AccelConfig.from_json(json.dumps({"colz": 4}))
    with pytest.raises(ConfigError, match="not valid JSON"):
        AccelConfig.from_json("{rows: 4")
    with pytest.raises(ConfigError, match="must be an object"):
        AccelConfig.from_json("[4, 4]")
    with pytest.raises(ConfigError, match="unknown config 'huge'.*'default_norm'"):
        load_config("huge")
    with pytest.raises(ConfigError, match="does not exist"):
        load_config("/nonexistent/cfg.json")


def test_derived_sizes():
    c = PRESETS["default"]
    assert c.act_lines * c.act_line_bytes == c.act_kib * 1024
    assert c.acc_line_bytes == 64 and c.wgt_tiles == c.wgt_lines // 16
    assert c.macs_per_cycle == 256

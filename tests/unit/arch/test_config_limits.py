"""Every config field has an upper bound: values whose RTL generation never finished (queue or
token depth 100000, dram_latency 1e9, memories of many MiB) are refused in one line naming the
field and the bound, and a config at the bounds generates."""

from __future__ import annotations

import dataclasses
import json

import pytest

from arch import isa
from arch.config import LIMITS, MAX_MEMORY_KIB, PRESETS, AccelConfig, ConfigError
from hdl_gen.generate import render
from tests.unit.run.test_cli_errors import assert_usage_error, in_process

TINY = PRESETS["tiny"]


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"queue_depth": 100_000}, ["queue_depth", "1..1024", "100000"]),
        ({"token_depth": 100_000}, ["token_depth", "1..1024", "100000"]),
        ({"dram_latency": 10**9}, ["dram_latency", "1..1024", "1000000000"]),
        ({"watchdog_cycles": 1 << 40}, ["watchdog_cycles", str(1 << 32)]),
        ({"dram_mib": 8192}, ["dram_mib", "1..4096", "8192"]),
        ({"acc_kib": 1024}, ["acc_kib", "at most 512", "1024"]),
        ({"act_kib": 1024}, ["act_kib", "at most 512", "1024"]),
        ({"param_lines": 4096}, ["param_lines", "1..2048", "256-byte lines", "4096"]),
    ],
)
def test_values_past_the_bounds_name_field_and_bound(fields, words):
    with pytest.raises(ConfigError) as info:
        AccelConfig(**fields)
    for word in words:
        assert word in str(info.value)


def test_every_integer_field_is_bounded():
    """Each int field past the largest value any check allows is refused."""
    huge = 1 << 70
    for field in dataclasses.fields(AccelConfig):
        if field.type not in ("int", int):
            continue
        with pytest.raises(ConfigError, match=field.name):
            dataclasses.replace(PRESETS["default"], **{field.name: huge})


def test_param_bound_is_in_bytes_of_the_isa():
    assert TINY.cols * isa.PARAM_ENTRY_BYTES == 64  # the line size the config assumes
    most = MAX_MEMORY_KIB * 1024 // (TINY.cols * isa.PARAM_ENTRY_BYTES)
    assert dataclasses.replace(TINY, param_lines=most).param_lines == most
    with pytest.raises(ConfigError, match=f"1..{most} "):
        dataclasses.replace(TINY, param_lines=2 * most)


def test_a_config_at_the_bounds_generates():
    at_bounds = dataclasses.replace(
        TINY,
        dram_latency=LIMITS["dram_latency"],
        queue_depth=LIMITS["queue_depth"],
        token_depth=LIMITS["token_depth"],
        watchdog_cycles=LIMITS["watchdog_cycles"],
    )
    verilog = render(at_bounds)["sim_top.v"]
    # the DRAM model's read queue holds dram_latency + 1 requests (hdl_gen/dram_model.py)
    queue = verilog.split("module \\sim_top.dram.pending", 1)[1].split("endmodule", 1)[0]
    assert f"storage [{LIMITS['dram_latency']}:0];" in queue


def test_cli_refuses_a_config_that_would_not_generate(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text(json.dumps({**TINY.to_dict(), "queue_depth": 100_000}))
    out = str(tmp_path / "o")
    args = ("--model", "mlp", "--config", str(path), "--out", out)
    assert_usage_error(in_process(capsys, *args), "queue_depth", "1..1024")

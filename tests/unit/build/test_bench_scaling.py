"""The array-size scaling bench's configs, table and argument errors (the measurements
themselves run in `make bench-scaling`)."""

import pytest

from arch.config import PRESETS
from sim.bench import scaling


def test_the_16x16_row_is_the_default_preset():
    assert scaling.scaled_config(16) == PRESETS["default"]


@pytest.mark.parametrize("size", scaling.SIZES)
def test_each_size_keeps_the_defaults_lines_and_a_line_per_dram_cycle(size):
    config, default = scaling.scaled_config(size), PRESETS["default"]
    assert (config.rows, config.cols) == (size, size)
    assert (config.act_lines, config.wgt_lines, config.acc_lines) == (
        default.act_lines,
        default.wgt_lines,
        default.acc_lines,
    )
    assert config.dram_bytes_per_cycle == config.act_line_bytes


def test_sizes_the_config_refuses_exit_2_naming_them(capsys):
    assert scaling.main(["--sizes", "8,12"]) == 2
    err = capsys.readouterr().err
    assert "--sizes '8,12'" in err and "rows must be a power of two in 2..64, not 12" in err
    assert scaling.main(["--sizes", "8,x"]) == 2
    assert "--sizes '8,x'" in capsys.readouterr().err


def test_the_table_has_a_line_per_size_and_flags_a_wrong_run():
    def row(size, exact):
        return {
            "size": size,
            "generate": {"seconds": 1.5},
            "build": {"seconds": 60.0, "cpu_s": 100.0, "peak_rss_mib": 700.0},
            "run": {
                "cycles": 123_456,
                "cycles_per_s": 50_000.0,
                "macs_per_s": 1.6e7,
                "peak_rss_mib": 300.0,
                "bit_exact": exact,
            },
        }

    lines = scaling.table([row(8, True), row(64, False)]).splitlines()
    assert len(lines) == 3 and "MACs/s" in lines[0]
    assert lines[1].split()[0] == "8x8" and lines[1].split()[-1] == "yes"
    assert lines[2].split()[0] == "64x64" and lines[2].split()[-1] == "NO"
    assert "123,456" in lines[1]


def test_steps_the_bench_does_not_have_exit_2_naming_them(capsys):
    assert scaling.main(["--sizes", "8", "--steps", "build,area"]) == 2
    assert "--steps 'build,area'" in capsys.readouterr().err


def test_the_synth_step_reports_the_accelerators_area(monkeypatch):
    """The area row is the whole accelerator's of `make synth`'s report (the committed
    16x16 one stands in for a synthesis here; `make bench-scaling` runs Yosys)."""
    import json
    from pathlib import Path

    import hdl_gen.synth

    report = json.loads((Path(__file__).parents[3] / "rtl/default/area.json").read_text())
    monkeypatch.setattr(
        hdl_gen.synth, "synthesize", lambda config: (report, {"rtlil": 2.0, "yosys": 3.0})
    )
    area = scaling.run_step("synth", 16, Path("unused"), 64)
    whole = report["components"]["Accelerator"]
    assert area == {
        "cells": whole["cells"], "ff_bits": whole["ff_bits"], "memory_bits": whole["memory_bits"],
        "multipliers": whole["multipliers"], "seconds": 5.0,
    }  # fmt: skip
    lines = scaling.table([{"size": 16, "synth": area}]).splitlines()
    assert lines[0].split()[:2] == ["array", "cells"] and lines[1].split()[0] == "16x16"
    assert f"{whole['cells']:,}" in lines[1]

"""The per-layer roofline in report.json: each device layer's compute bound (MACs over the
array's MACs per cycle) and DRAM bound (bytes over the bus's bytes per cycle), recomputed here
from the layer's own numbers and the config; no layer beats its compute bound."""

from __future__ import annotations

import json
import math

from tests.unit.run.test_cli_errors import in_process


def test_report_gives_each_device_layer_its_bounds(tmp_path, capsys):
    done = in_process(capsys, "--model", "cnn", "--config", "tiny", "--out", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    config = report["config"]
    device = [layer for layer in report["layers"] if layer["device"] == "accel"]
    assert device and all("roofline" not in x for x in report["layers"] if x not in device)
    for layer in device:
        bounds = layer["roofline"]
        compute = math.ceil(layer["macs"] / (config["rows"] * config["cols"]))
        moved = layer["dram_read_bytes"] + layer["dram_write_bytes"]
        dram = math.ceil(moved / config["dram_bytes_per_cycle"])
        assert (bounds["compute_bound_cycles"], bounds["dram_bound_cycles"]) == (compute, dram)
        assert bounds["limited_by"] == ("compute" if compute >= dram else "dram")
        assert bounds["of_bound"] == round(max(compute, dram) / layer["cycles"], 4)
        assert compute <= layer["cycles"]  # the array does at most rows x cols MACs a cycle
    assert any(layer["roofline"]["limited_by"] == "dram" for layer in device)
    assert any(layer["macs"] and layer["roofline"]["limited_by"] == "compute" for layer in device)

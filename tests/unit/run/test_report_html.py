"""report.html: one self-contained page per run directory - checked by parsing it (html.parser)
against the run's report.json and files: every layer's name and numbers, where it ran and the
placement's reason, a hostile layer name shown as text (never as markup), the plots inlined as
the PNG files' bytes, and every link resolving to a file in the run directory."""

from __future__ import annotations

import base64
import json
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from onnx import helper, numpy_helper

from sim.app import report_html
from tests.onnx_graphs import make_model
from tests.unit.run.test_cli_errors import in_process

HOSTILE = "<script>alert('x')</script>&amp;"


class Page(HTMLParser):
    """What the checks need of a page: its tags, table rows (cell texts), links and images."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.rows: list[list[str]] = []
        self.hrefs: list[str] = []
        self.images: list[str] = []
        self._cell: list[str] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        values = dict(attrs)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "a":
            self.hrefs.append(values["href"] or "")
        elif tag == "img":
            self.images.append(values["src"] or "")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def hostile_model(path: Path) -> Path:
    """A conv named like a script, then a ReduceMean over channels (the host's, by placement)."""
    rng = np.random.default_rng(11)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["a"], name=HOSTILE, pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("ReduceMean", ["r"], ["y"], name="mean", axes=[1], keepdims=1),
    ]
    model = make_model(nodes, [1, 3, 8, 8], opset=13)
    model.graph.initializer.append(numpy_helper.from_array(w, "w"))
    path.write_bytes(model.SerializeToString())
    return path


def number(text: str) -> float:
    return float(text.replace(",", ""))


def test_a_run_writes_a_page_with_every_layer_and_its_numbers(tmp_path, capsys):
    model = hostile_model(tmp_path / "hostile.onnx")
    out = tmp_path / "run"
    done = in_process(capsys, "--model", str(model), "--config", "tiny", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert f"html report: {out / 'report.html'}" in done.stdout
    report = json.loads((out / "report.json").read_text())
    text = (out / "report.html").read_text()
    page = Page(text)
    assert "script" not in page.tags  # the hostile name is text, not a tag
    rows = {row[0]: row for row in page.rows if len(row) >= 13}
    assert {layer["name"] for layer in report["layers"]} <= set(rows)
    assert HOSTILE in rows and "<script>" not in text
    devices = set()
    for layer in report["layers"]:
        row = rows[layer["name"]]
        devices.add(layer["device"])
        assert row[1] == layer["op"]
        assert row[2] == ("host" if layer["device"] == "host" else "accelerator")
        if layer["device"] == "host":
            assert layer["host_reason"] and row[3] == layer["host_reason"]
        assert number(row[4]) == layer["macs"] and number(row[5]) == layer["cycles"]
        assert number(row[7]) == pytest.approx(layer["utilization"], rel=1e-3, abs=1e-4)
        assert number(row[8]) == layer["dram_read_bytes"]
        assert number(row[9]) == layer["dram_write_bytes"]
        assert row[10] == ("yes" if layer["bit_exact"] else "no")
        line = layer.get("roofline")  # the roofline's bound and cycles over it, device layers
        assert row[13].startswith(f"{line['bound_cycles']:,} (" if line else "-")
        assert row[14] == (f"{line['achieved_over_bound']:.4g}" if line else "-")
    assert devices == {"accel", "host"}
    # the plots are the run's PNG files, inlined
    inlined = [base64.b64decode(src.split(",", 1)[1]) for src in page.images]
    assert inlined == [(out / "utilization.png").read_bytes(), (out / "sqnr.png").read_bytes()]
    # every link is relative and names a file of the run directory
    assert {"listing.txt", "timeline.json", "report.json", "hostile.cosim"} <= set(page.hrefs)
    for href in page.hrefs:
        assert not Path(href).is_absolute() and (out / href).is_file(), href
    provenance = {row[0]: row[1] for row in page.rows if len(row) == 2}
    assert provenance["config"] == report["config"]["name"]
    assert provenance["input sha256"] == report["provenance"]["input"]["sha256"]


def test_the_page_escapes_every_text_and_links_only_existing_files(tmp_path):
    """render() on a report whose texts are hostile: the parsed texts equal the originals."""
    report = {
        "model": "<b>m</b>",
        "config": {"name": "tiny<i>", "rows": 4},
        "backend": "isa",
        "executable": str(tmp_path / "gone.cosim"),  # no such file: no link
        "layers": [
            {"name": HOSTILE, "op": "conv\"'", "device": "host", "host_reason": "<img src=x>",
             "macs": 1234567, "cycles": 0, "utilization": 0.0, "dram_read_bytes": 0,
             "dram_write_bytes": 0, "bit_exact": False, "limiter": "<u>"},
        ],  # fmt: skip
        "total": {"macs": 0, "accel_mac_fraction": 0.0, "cycles": 0, "utilization": 0.0,
                  "bit_exact": False, "shards": 1, "sim_wall_s": 0.0, "sim_cycles_per_s": 0},
        "accuracy": {"sqnr": [{"layer": HOSTILE, "sqnr_db": None}]},
        "waves": None,
    }  # fmt: skip
    (tmp_path / "listing.txt").write_text("x")
    page = Page(report_html.render(report, tmp_path))
    assert set(page.tags) <= {"html", "head", "meta", "title", "style", "body", "h1", "h2",
                              "table", "tr", "th", "td", "ul", "li", "a", "p", "code"}  # fmt: skip
    [row] = [row for row in page.rows if row and row[0] == HOSTILE]
    assert row[1:4] == ["conv\"'", "host", "<img src=x>"]
    assert row[4] == "1,234,567" and row[10] == "no" and row[11] == "<u>" and row[12] == "exact"
    assert page.hrefs == ["listing.txt"] and page.images == []

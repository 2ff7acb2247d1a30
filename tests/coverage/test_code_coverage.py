"""Code coverage (sim/verilate/instrument.py, sim/coverage/): a coverage build is a build of its
own and plain builds stay uninstrumented; two instrumented runs of the processing element write
one counts file each, merged by adding; the lcov, Cobertura and HTML outputs agree with the
per-module table; an empty coverage directory is one error line and exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from hdl_gen.pe import ProcessingElement
from sim.coverage import code, report
from sim.verilate.build import BuildSpec, _verilator_args, cache_key, instrumented, run_cocotb
from sim.verilate.instrument import ASSERT_ENV, COVERAGE_ENV
from tests.block.harness import build_block

REPO = Path(__file__).resolve().parents[2]


def test_coverage_builds_have_their_own_key_and_plain_ones_none(monkeypatch, tmp_path):
    source = tmp_path / "m.v"
    source.write_text("module m(input clk); endmodule\n")
    spec = BuildSpec("m", "t", (source,), "m")
    monkeypatch.delenv(COVERAGE_ENV, raising=False)
    monkeypatch.delenv(ASSERT_ENV, raising=False)
    plain = instrumented(spec)
    assert plain == spec and not any("--coverage" in a for a in _verilator_args(plain))
    monkeypatch.setenv(COVERAGE_ENV, str(tmp_path / "cov"))
    covered = instrumented(spec)
    assert covered.coverage and "--coverage-toggle" in _verilator_args(covered)
    assert cache_key(covered) != cache_key(plain)
    bench = BuildSpec("m", "t", (source,), "m", main=source)  # its own C++ main: never
    assert instrumented(bench) == bench


@pytest.mark.simulator
def test_two_runs_merge_and_every_output_agrees(monkeypatch, tmp_path):
    out = tmp_path / "cov"
    monkeypatch.setenv(COVERAGE_ENV, str(out))
    model = build_block(ProcessingElement(), "pe")
    assert model.spec.coverage
    for seed in (5, 6):
        run_cocotb(
            model, "tests.block.cocotb_pe", tmp_path / str(seed), extra_env={"PE_SEED": str(seed)}
        )
    files = sorted((out / "dat").glob("*.dat"))
    assert len(files) == 2
    first, second, merged = code.merge(files[:1]), code.merge(files[1:]), code.merge(files)
    assert set(merged) == set(first) == set(second)
    assert all(merged[p] == first[p] + second[p] for p in merged)
    assert merged == code.read_points(files)  # summing the files' lines = parsing each file
    assert {p.kind for p in merged} == {"line", "toggle"}

    summary, table = report.write(out)
    [(config, module)] = [key for key in code.by_module(merged)]
    tally = code.by_module(merged)[(config, module)]
    assert module == "pe" and 0 < tally.line[1] <= tally.line[0]
    assert any(line.split()[1] == "pe" for line in table[1:])
    # The lcov file's totals and the Cobertura XML's line rate are the table's line numbers
    # counted per source line (several points can share a line).
    lcov = (out / "coverage.info").read_text().splitlines()
    found = sum(int(x.split(":")[1]) for x in lcov if x.startswith("LF:"))
    hit = sum(int(x.split(":")[1]) for x in lcov if x.startswith("LH:"))
    assert 0 < hit <= found
    rate = float(ElementTree.parse(out / "coverage.xml").getroot().get("line-rate"))
    assert rate == pytest.approx(hit / found, abs=1e-3)
    page = (out / "html" / "index.html").read_text()
    assert "pe" in page and "Annotated RTL" in page
    assert summary["runs"] == 2


def test_report_on_nothing_is_one_line_exit_2(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "sim.coverage.report", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: no coverage data")

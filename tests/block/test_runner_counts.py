"""Zero executed tests is a failure wherever a runner reports counts: a cocotb module with no
test, or only skipped ones, raises SimulationFailed; `make test` that selects no test fails."""

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sim.app.disk import disk_failure
from sim.verilate import build
from sim.verilate.build import SimulationFailed, _failures, run_cocotb
from tests.block.test_dot_product import build_dot_product

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.simulator
@pytest.mark.parametrize("module", ["cocotb_no_tests", "cocotb_all_skipped"])
def test_cocotb_run_that_executes_no_test_fails(module, tmp_path):
    model = build_dot_product(4, 8)
    with pytest.raises(SimulationFailed, match="no cocotb test ran"):
        run_cocotb(model, f"tests.block.{module}", tmp_path)


@pytest.mark.parametrize(
    "xml",
    [
        "<testsuites/>",
        '<testsuites><testsuite name="all" tests="0"></testsuite></testsuites>',
    ],
)
def test_a_results_file_with_no_test_case_is_a_failure(xml, tmp_path):
    """cocotb writes no results file for a module without tests (above); a file that holds no
    test case (an empty filter, a crashed writer) must fail too: the zero-tests mutant of
    `make mutate` survived every simulator run."""
    results = tmp_path / "results.xml"
    results.write_text(xml)
    [problem] = _failures(results)
    assert problem.startswith("no cocotb test ran (0 test cases")


@pytest.mark.parametrize("full", [True, False])
def test_an_empty_results_file_is_a_full_disk_or_a_failure(full, tmp_path, monkeypatch):
    """cocotb writes an empty ``results.xml`` on a full disk: that is ENOSPC naming the file
    (exit 3 through the CLI's disk check), not an internal ParseError; elsewhere a failure."""
    results = tmp_path / "results.xml"
    results.write_text("")
    monkeypatch.setattr(build, "NEARLY_FULL_BYTES", 1 << 62 if full else 0)
    if full:
        with pytest.raises(OSError) as caught:
            _failures(results)
        assert (caught.value.errno, caught.value.filename) == (errno.ENOSPC, str(results))
        assert disk_failure(caught.value, None) == (
            3, f"error: {results}: No space left on device"
        )  # fmt: skip
    else:
        [problem] = _failures(results)
        assert problem.startswith(f"the results file {results} is not readable XML (no element")


def test_make_test_fails_when_no_test_is_selected():
    venv = Path(sys.prefix)
    if not (venv / ".cosim-installed").exists():
        pytest.skip(f"{venv} is not a venv made by the Makefile")
    argv = [
        "make",
        "--no-print-directory",
        f"--old-file={venv / '.cosim-installed'}",  # never reinstall the venv from a test
        "test",
        f"VENV={venv}",
        "JOBS=0",
        "PYTEST_ARGS=-p no:cacheprovider tests/unit/arch/test_config.py -k no_such_test",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    out = done.stdout + done.stderr
    # pytest exits 5 when it runs no test; make must pass that on (and .ci/run stops on it).
    assert done.returncode != 0 and "test] Error 5" in out, out

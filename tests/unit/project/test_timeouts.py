"""Test timeouts (pytest-timeout, pinned): every test has a generous bound from pyproject.toml,
and a test that hangs past its bound fails with its stack instead of stalling the run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_every_test_has_a_bound_and_the_lock_pins_the_plugin():
    pyproject = (REPO / "pyproject.toml").read_text()
    options = pyproject.split("\n[tool.pytest.ini_options]\n", 1)[1].split("\n[", 1)[0]
    bound = re.search(r"^timeout = (\d+)$", options, re.M)
    assert bound is not None and 600 <= int(bound.group(1)) <= 3600
    assert 'timeout_method = "thread"' in options  # SIGALRM stays the tests' own
    assert "pytest-timeout==" in (REPO / "requirements.lock").read_text()


def test_a_hung_test_fails_with_its_stack(tmp_path):
    (tmp_path / "test_hang.py").write_text(
        "import time\n\n\ndef test_hangs():\n    time.sleep(60)  # the hang\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "--timeout=2", "-o", "timeout_method=thread", "test_hang.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=50,
    )  # fmt: skip
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert "Timeout" in out and "time.sleep(60)  # the hang" in out, out[-2000:]

"""Every environment variable is declared once (`sim/knobs.py`): the docs table is generated from
the declarations, the code reads no variable around them, and no declared name is dead."""

from __future__ import annotations

import re
from pathlib import Path

from sim import knobs

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("arch", "compiler", "hdl_gen", "sim", "mutation", "zoo")
# Reads of an environment variable by name: os.environ.get("X"), os.getenv("X"), os.environ["X"]
# (not an assignment), also with the name in a constant.
_READ = re.compile(r"os\.environ\.get\(|os\.getenv\(|os\.environ\[[^\]]+\](?!\s*=[^=])")
# Variables of the operating system and of pytest that the framework passes on or hides, not knobs.
_NOT_KNOBS = ("'PATH'", '"PYTEST_CURRENT_TEST"')


def _sources(packages: tuple[str, ...] = PACKAGES) -> list[Path]:
    """The framework's sources (the tests pass their own cocotb modules parameters in variables
    of their own; those are no knobs)."""
    return [
        path
        for package in packages
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != ROOT / "sim" / "knobs.py"
    ]


def test_the_docs_table_is_generated_from_the_declarations() -> None:
    assert (ROOT / "docs" / "env_vars.md").read_text() == knobs.markdown()


def test_every_knob_has_one_entry_and_a_meaning() -> None:
    names = [k.name for k in knobs.KNOBS]
    assert len(names) == len(set(names))
    assert all(k.meaning and k.who in ("user", "internal") for k in knobs.KNOBS)
    for name in ("COSIM_HOOKS", "COSIM_KEEP_RUNS", "DASK_SCHEDULER", "COSIM_JOB"):
        assert name in names


def test_the_code_reads_variables_only_through_their_knob() -> None:
    stray = []
    for path in _sources():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "environ" not in line and "getenv" not in line:
                continue
            if _READ.search(line) and not any(name in line for name in _NOT_KNOBS):
                stray.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not stray, "read these through sim/knobs.py:\n" + "\n".join(stray)


def test_no_declared_knob_is_dead() -> None:
    text = "\n".join(path.read_text() for path in _sources((*PACKAGES, "tests")))
    for name, value in vars(knobs).items():
        if isinstance(value, knobs.Knob):
            assert f"knobs.{name}" in text, f"{value.name} ({name}) is declared but never read"


def test_a_knob_reads_its_variable_or_its_default(monkeypatch) -> None:
    monkeypatch.delenv("COSIM_WAVES_WARN_MB", raising=False)
    assert knobs.WAVES_WARN_MB.get() == "200" and not knobs.WAVES_WARN_MB.is_set()
    monkeypatch.setenv("COSIM_WAVES_WARN_MB", "7")
    assert knobs.WAVES_WARN_MB.get() == "7" and knobs.WAVES_WARN_MB.is_set()

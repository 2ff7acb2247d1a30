"""Backends are told apart by the traits of their interface (sim/backends/base.py), never by
name outside sim/backends; the step loop is one module (sim/runtime/execute.py) that nobody reaches
into through private names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sim.backends.base import Backend
from sim.backends.registry import NAMES, get_backend

REPO = Path(__file__).resolve().parents[3]
TRAITS = [name for name in Backend.__annotations__ if name != "name"]


@pytest.mark.parametrize("name", NAMES)
def test_every_backend_sets_every_trait(name: str) -> None:
    backend = get_backend(name)
    assert backend.name == name
    for trait in TRAITS:
        assert isinstance(type(backend).__dict__.get(trait), bool), (name, trait)
    assert callable(backend.build) and callable(backend.rtl_dir)


def test_traits_say_what_the_backends_do() -> None:
    """Only a backend that runs the RTL traces it or records a Verilator version; only one
    with a process of its own runs cocotb hooks or writes a simulator log."""
    for name in NAMES:
        backend = get_backend(name)
        assert not backend.traces or backend.runs_rtl, name
        assert not (backend.hooks or backend.writes_log) or backend.own_process, name


def _sources(backends: bool = False) -> list[Path]:
    paths = (REPO / "sim").rglob("*.py")
    return [p for p in paths if backends or "backends" not in p.relative_to(REPO).parts]


def test_no_backend_name_is_tested_outside_the_backends() -> None:
    named = re.compile(r'[!=]=\s*"(isa|rtl|pyverilator)"|\bRTL_BACKENDS\b|BUILT_BACKENDS')
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in _sources()
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if named.search(line)
    ]
    assert found == []


def test_nothing_imports_private_names_of_the_runtime() -> None:
    private = re.compile(r"^from sim\.[\w.]+ import .*\b_[a-z]", re.M)
    found = [
        str(path.relative_to(REPO))
        for path in _sources(backends=True)
        if private.search(path.read_text())
    ]
    assert found == []

"""The floors (docs/architecture.md) as `make lint` checks them: import-linter's layers
contract in pyproject.toml holds on the tree, and fails, naming the import, when a floor imports
one above it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("arch", "compiler", "hdl_gen", "sim", "mutation", "zoo")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _copy_tree(dest: Path) -> Path:
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    for package in PACKAGES:
        skip = shutil.ignore_patterns("__pycache__")
        shutil.copytree(ROOT / package, dest / package, ignore=skip)
    return dest


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _copy_tree(tmp_path_factory.mktemp("floors"))


def test_the_tree_keeps_the_floors(tree: Path) -> None:
    result = _lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("importer", "imported"),
    [
        ("arch/listing.py", "compiler.ir"),
        ("compiler/ir.py", "sim.app.report"),
        ("hdl_gen/pe.py", "compiler.ir"),
        ("zoo/small.py", "arch.config"),
        ("sim/runtime/run.py", "sim.app.report"),
        ("sim/backends/isa.py", "sim.runtime.host"),
    ],
)
def test_an_import_running_back_up_breaks_the_contract(
    tmp_path: Path, importer: str, imported: str
) -> None:
    tree = _copy_tree(tmp_path)
    with (tree / importer).open("a") as f:
        f.write(f"\nimport {imported}  # noqa: E402\n")
    result = _lint(tree)
    assert result.returncode != 0
    module = importer.removesuffix(".py").replace("/", ".")
    assert f"{module} -> {imported}" in result.stdout

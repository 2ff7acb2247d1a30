"""Results of curated mutants kept across runs (build/mutation/results/), so an interrupted or
budget-cut ``make mutate`` goes on where it stopped.

A kept result holds while the code it was measured on is unchanged: the design and harness
sources (:data:`DESIGN`) and the test files that decided it (for a killed mutant the file of the
test that killed it, for a survivor every killer's file)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from mutation.table import Mutant
from mutation.trees import REPO, source_files

RESULTS = REPO / "build" / "mutation" / "results"
DESIGN = (
    "arch/",
    "hdl_gen/",
    "sim/",
    "tests/programs.py",
    "tests/random_programs.py",
    "tests/tie_cases.py",
    "tests/instruction/rtl_compare.py",
    "tests/instruction/bad_programs.py",
)


def _digest(names: list[str]) -> str:
    h = hashlib.sha256()
    for name in sorted(names):
        h.update(name.encode() + b"\0" + (REPO / name).read_bytes())
    return h.hexdigest()[:16]


def design_hash() -> str:
    return _digest([n for n in source_files() if n.startswith(DESIGN)])


def tests_hash(node_ids: list[str]) -> str:
    files = sorted({node.split("::")[0] for node in node_ids})
    return _digest([f for f in files if (REPO / f).is_file()])


def _path(set_name: str, mutant: Mutant) -> Path:
    return RESULTS / set_name / f"{mutant.id}.json"


def load(set_name: str, mutant: Mutant, design: str, killers: tuple[str, ...]) -> dict | None:
    path = _path(set_name, mutant)
    if not path.is_file():
        return None
    kept = json.loads(path.read_text())
    deciding = [kept["killed_by"]] if kept["killed_by"] else list(killers)
    edit = ("file", "original", "replacement")  # the notes (why, equivalent, ...) may change
    valid = (
        all(kept["mutant"][k] == getattr(mutant, k) for k in edit)
        and kept["design"] == design
        and kept["tests"] == tests_hash(deciding)
    )
    return kept if valid else None


def kept_status(set_name: str, mutant: Mutant) -> str:
    """The status of a kept result whatever code it was measured on ('' if none)."""
    path = _path(set_name, mutant)
    return json.loads(path.read_text())["status"] if path.is_file() else ""


def store(set_name: str, mutant: Mutant, design: str, killers: tuple[str, ...], outcome) -> None:
    deciding = [outcome.killed_by] if outcome.killed_by else list(killers)
    path = _path(set_name, mutant)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "mutant": asdict(mutant),
        "design": design,
        "tests": tests_hash(deciding),
        "status": outcome.status,
        "killed_by": outcome.killed_by,
        "seconds": outcome.seconds,
        "detail": outcome.detail,
    }
    path.write_text(json.dumps(record, indent=1) + "\n")

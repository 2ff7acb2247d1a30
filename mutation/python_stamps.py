"""When each Python verdict was measured, so that a verdict can go stale (``make mutate``).

A verdict's stamp hashes the mutated module's whole source and the test files that call the
mutated function (mutmut's map, ``mutants/mutmut-stats.json``, plus the test helpers). mutmut
itself keeps a verdict while the function's own source is unchanged; a verdict whose stamp
differs from today's was measured on other code or other tests: it is measured again, or
reported ``stale``, never counted as a kill. Stamps live in ``stamps.json`` of the work tree
and, for a fresh clone, in ``mutation/python_verdicts.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path

SEPARATOR = "__mutmut_"
FILE = "stamps.json"


def write_atomically(path: Path, text: str) -> None:
    """``path`` holds ``text`` or what it held before, never a part: a run stopped while it
    writes (a kill, the machine's end) must leave files the next run can read."""
    part = path.with_name(f"{path.name}.part")
    part.write_text(text)
    os.replace(part, path)


def load(work: Path) -> dict[str, str]:
    path = work / FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def save(work: Path, stamps: dict[str, str]) -> None:
    write_atomically(work / FILE, json.dumps(stamps, indent=0, sort_keys=True) + "\n")


def drop_unreadable(work: Path, path: str) -> bool:
    """Remove ``path``'s meta file in ``work`` if it is no JSON object of verdicts (a file cut
    short by a run that ended while writing it); whether it was removed."""
    meta = work / "mutants" / f"{path}.meta"
    if not meta.is_file():
        return False
    try:
        if isinstance(json.loads(meta.read_text()).get("exit_code_by_key"), dict):
            return False
    except (ValueError, AttributeError):
        pass
    meta.unlink()
    return True


def meta_of(work: Path, path: str) -> dict:
    meta = work / "mutants" / f"{path}.meta"
    return json.loads(meta.read_text()) if meta.is_file() else {"exit_code_by_key": {}}


def write_meta(work: Path, path: str, meta: dict) -> None:
    write_atomically(work / "mutants" / f"{path}.meta", json.dumps(meta, indent=4))


def now(work: Path, repo: Path, path: str, helpers: list[Path]) -> dict[str, str] | None:
    """Today's stamp of each function of module ``path`` (``module.function``), or None
    before mutmut has mapped the tests to functions."""
    stats_file = work / "mutants" / "mutmut-stats.json"
    if not stats_file.is_file():
        return None
    tests = json.loads(stats_file.read_text()).get("tests_by_mangled_function_name", {})
    base = hashlib.sha256((repo / path).read_bytes())
    for helper in sorted(helpers):
        base.update(helper.read_bytes())
    stamps = {}
    for key in meta_of(work, path)["exit_code_by_key"]:
        function = key.rsplit(SEPARATOR, 1)[0]
        if function in stamps:
            continue
        h = base.copy()
        for name in sorted({node.split("::")[0] for node in tests.get(function, ())}):
            if (repo / name).is_file():
                h.update(name.encode() + b"\0" + (repo / name).read_bytes())
        stamps[function] = h.hexdigest()[:16]
    return stamps


def stale(work: Path, path: str, today: dict[str, str] | None) -> set[str]:
    """The decided verdicts of ``path`` whose stamp is not today's (all of them when today's
    are unknown and a verdict has no stamp that could match)."""
    stamps = load(work)
    codes = meta_of(work, path)["exit_code_by_key"]
    decided = [k for k, c in codes.items() if c is not None]
    if today is None:
        return {k for k in decided if k not in stamps}
    return {k for k in decided if stamps.get(k) != today.get(k.rsplit(SEPARATOR, 1)[0])}


def reset(work: Path, path: str, keys: set[str]) -> dict[str, int]:
    """Set the verdicts ``keys`` of ``path`` to "not checked"; returns their old codes."""
    meta = meta_of(work, path)
    codes = meta["exit_code_by_key"]
    old = {k: codes[k] for k in keys if codes.get(k) is not None}
    for k in old:
        codes[k] = None
    if old:
        write_meta(work, path, meta)
    return old


def draw(work: Path, path: str, share: float, rng: random.Random, skip: set[str]) -> set[str]:
    """A ``share`` of the killed verdicts of ``path`` (not in ``skip``), drawn with ``rng``."""
    codes = meta_of(work, path)["exit_code_by_key"]
    killed = sorted(k for k, c in codes.items() if c == 1 and k not in skip)
    return {k for k in killed if rng.random() < share}


def mark(work: Path, path: str, before: dict, today: dict[str, str] | None) -> int:
    """Stamp the verdicts of ``path`` decided since ``before`` (codes of the same keys);
    returns how many."""
    if today is None:
        return 0
    stamps = load(work)
    codes = meta_of(work, path)["exit_code_by_key"]
    fresh = [k for k, c in codes.items() if c is not None and before.get(k) is None]
    for k in fresh:
        stamps[k] = today[k.rsplit(SEPARATOR, 1)[0]]
    save(work, stamps)
    return len(fresh)

"""mutmut's verdicts kept in the checkout (``mutation/python_verdicts.json``), so that a fresh
clone resumes the Python mutation run where the last one stopped: the whole run takes hours on
two cores, longer than one sitting.

mutmut keeps a verdict while the source hash of the mutant's function is unchanged (its
``mutants/<path>.meta``: ``hash_by_function_name`` and ``exit_code_by_key``) and drops the
verdicts of functions that changed when it generates the mutants. :func:`save` copies the decided
verdicts here after a full run; :func:`restore` seeds a missing meta file from them before one.
Survivors are measured again whenever the selected test files changed
(:func:`mutation.python_set.retry_survivors`); a killed verdict stands while its function does, as
in mutmut itself. Commit the file after a run to keep its verdicts.
"""

from __future__ import annotations

import json
from pathlib import Path

from mutation import python_stamps

FILE = Path(__file__).with_name("python_verdicts.json")
SEPARATOR = "__mutmut_"


def _load() -> dict[str, dict[str, list]]:
    return json.loads(FILE.read_text()) if FILE.is_file() else {}


def _prefix(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".") + "."


def save(work: Path, modules: list[str]) -> int:
    """Keep the decided verdicts of ``modules`` from mutmut's tree in ``work``: per module, per
    function, ``[source hash, {mutant number: exit code}, {mutant number: stamp}]`` (stamps:
    :mod:`mutation.python_stamps`). Returns how many were kept."""
    state = _load()
    stamps = python_stamps.load(work)
    kept = 0
    for path in modules:
        meta = work / "mutants" / f"{path}.meta"
        if not meta.is_file():
            continue
        data = json.loads(meta.read_text())
        functions = {f: [h, {}, {}] for f, h in data["hash_by_function_name"].items()}
        for key, code in data["exit_code_by_key"].items():
            function, number = key.removeprefix(_prefix(path)).rsplit(SEPARATOR, 1)
            if code is not None and function in functions:
                functions[function][1][number] = code
                if key in stamps:
                    functions[function][2][number] = stamps[key]
                kept += 1
        state[path] = {f: v for f, v in functions.items() if v[1]}
    python_stamps.write_atomically(FILE, json.dumps(state, indent=1, sort_keys=True) + "\n")
    return kept


def restore(work: Path, modules: list[str]) -> int:
    """Seed each module's meta file in ``work`` that does not exist yet from the kept verdicts;
    returns how many verdicts were seeded (mutmut drops those of changed functions)."""
    state = _load()
    stamps = python_stamps.load(work)
    seeded = 0
    for path in modules:
        meta = work / "mutants" / f"{path}.meta"
        if meta.is_file() or not state.get(path):
            continue
        codes = {
            f"{_prefix(path)}{function}{SEPARATOR}{number}": code
            for function, (_hash, numbers, *_) in state[path].items()
            for number, code in numbers.items()
        }
        stamps |= {
            f"{_prefix(path)}{function}{SEPARATOR}{number}": stamp
            for function, (_hash, _numbers, *rest) in state[path].items()
            for number, stamp in (rest[0] if rest else {}).items()
        }
        data = {
            "exit_code_by_key": codes,
            "hash_by_function_name": {f: h for f, (h, *_) in state[path].items()},
            "type_check_error_by_key": {},
            "durations_by_key": {},
            "estimated_durations_by_key": {},
        }
        meta.parent.mkdir(parents=True, exist_ok=True)
        python_stamps.write_atomically(meta, json.dumps(data, indent=4))
        seeded += len(codes)
    work.mkdir(parents=True, exist_ok=True)
    python_stamps.save(work, stamps)
    return seeded


def committed(work: Path, path: str, today: dict[str, str] | None) -> dict[str, int]:
    """The committed verdicts of module ``path`` measured on today's code and tests (their
    stamp is ``today``'s, :func:`mutation.python_stamps.now`), by mutant key."""
    found = {}
    for function, (_digest, numbers, *rest) in _load().get(path, {}).items():
        name = f"{_prefix(path)}{function}"
        for number, code in numbers.items():
            stamp = rest[0].get(number) if rest else None
            if today and stamp and stamp == today.get(name):
                found[f"{name}{SEPARATOR}{number}"] = code
    return found

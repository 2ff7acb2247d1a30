"""Fuzz: a random special file (FIFO, /dev/zero, /dev/null, a directory, a dangling symlink,
an oversize or an empty file) given as MODEL, IMAGE, CALIB, BUNDLE or HOOKS (a hook module
whose source is that file) to the command line, in process.

Each must be refused (exit 2 or 3) with one line naming the file - or, for HOOKS, the module -
within a bound: a FIFO that is opened blocks, /dev/zero that is read never ends; a file that
exists but is no regular file is said to be one, never reported missing. The size
limits are lowered for the run so that an "oversize" file is a few kilobytes. The sample of
``make test`` is :data:`SAMPLE` cases; ``make fuzz`` runs 20% of FUZZ_CASES."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from sim.app import files
from tests.fuzz.contract import assert_refused, campaign_size, rng_for, time_bound
from tests.unit.run.test_cli_errors import in_process

SAMPLE = 6
CASES = campaign_size(SAMPLE, 200)
KINDS = ("fifo", "zero", "null", "directory", "dangling", "oversize", "empty")
OPTIONS = ("MODEL", "IMAGE", "CALIB", "BUNDLE", "HOOKS")
#: Options that take a folder (of images) as well as a file.
FOLDERS = ("IMAGE", "CALIB")
SUFFIX = {"MODEL": ".onnx", "IMAGE": ".npy", "CALIB": ".npy", "BUNDLE": ".cosim", "HOOKS": ".py"}
#: The size limit of every kind during the run: an oversize file is larger.
SMALL_LIMIT = 4096
#: A hook's time bound (COSIM_HOOK_SECONDS) and the case's.
HOOK_SECONDS, CASE_SECONDS = 2, 60


def special_file(rng: np.random.Generator, kind: str, where: Path) -> Path:
    """Make ``where`` the special file ``kind`` (a symlink to a device for zero and null)."""
    if kind == "fifo":
        os.mkfifo(where)
    elif kind in ("zero", "null"):
        where.symlink_to(f"/dev/{kind}")
    elif kind == "directory":
        where.mkdir()
    elif kind == "dangling":
        where.symlink_to(where.parent / f"gone-{where.name}")
    elif kind == "oversize":
        size = SMALL_LIMIT + 1 + int(rng.integers(0, 3 * SMALL_LIMIT))
        where.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    else:
        where.write_bytes(b"")
    return where


def arguments(option: str, path: Path, out: Path) -> tuple[list[str], str]:
    """The command line giving ``path`` as ``option``, and the name its error line must hold."""
    if option == "HOOKS":
        module = path.stem
        return ["--backend", "rtl", "--model", "mlp", "--hooks", module, "--out", str(out)], module
    flag = {"MODEL": "--model", "IMAGE": "--image", "CALIB": "--calib", "BUNDLE": "--bundle"}
    model = [] if option in ("MODEL", "BUNDLE") else ["--model", "mlp"]
    return [*model, flag[option], str(path), "--out", str(out)], str(path)


@pytest.mark.parametrize("case", range(CASES))
def test_special_files_are_refused_in_one_line(case, tmp_path, capsys, monkeypatch) -> None:
    rng = rng_for("special_files", case)
    kind, option = KINDS[case % len(KINDS)], OPTIONS[int(rng.integers(len(OPTIONS)))]
    folder = tmp_path / "given"
    folder.mkdir()
    path = special_file(rng, kind, folder / f"fuzz_{kind}_{case}{SUFFIX[option]}")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("COSIM_HOOK_SECONDS", str(HOOK_SECONDS))
    for limit in files.MAX_BYTES:
        monkeypatch.setitem(files.MAX_BYTES, limit, SMALL_LIMIT)
    args, name = arguments(option, path, tmp_path / "out")
    what = f"case {case}: {option}={path} ({kind})"
    with time_bound(CASE_SECONDS, what):
        result = in_process(capsys, *args)
    line = assert_refused(result, what, name)
    if kind in ("fifo", "zero", "null") or (kind == "directory" and option not in FOLDERS):
        assert "not a regular file" in line, f"{what}: {line}"  # it exists: never "missing"
    assert not (tmp_path / "out").exists(), f"{what}: a run directory was made"

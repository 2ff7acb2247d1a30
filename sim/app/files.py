"""Every file the command line reads is checked here first, before anything opens it: it
exists, it is a regular file (not a directory, a FIFO that would block the read, or a device
such as ``/dev/zero`` that never ends) and it is not larger than its kind allows. Checking
with ``stat`` opens nothing, so no check can hang."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sim.runtime.inputs import InputError

__all__ = ["MAX_BYTES", "regular_file"]

_GB = 1 << 30
#: The largest file of each kind the command line reads (an ONNX protobuf cannot exceed 2 GB).
MAX_BYTES: dict[str, int] = {
    "model": 2 * _GB,
    "executable": 4 * _GB,
    "image": 256 << 20,
    "array": 4 * _GB,
    "config": 1 << 20,
}

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def regular_file(path: Path, what: str, kind: str) -> Path:
    """``path`` if it is a regular file of at most ``MAX_BYTES[kind]`` bytes, else
    :class:`InputError` naming it (``what``: the option, e.g. ``MODEL``) and what it is."""
    try:
        info = os.stat(path)  # follows a symlink to what it names
    except FileNotFoundError:
        raise InputError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise InputError(f"{what} {path} cannot be read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        found = next((name for test, name in _KINDS if test(info.st_mode)), "a special file")
        raise InputError(f"{what} {path} is not a regular file (it is {found}); give a file")
    limit = MAX_BYTES[kind]
    if info.st_size > limit:
        raise InputError(
            f"{what} {path} is {info.st_size:,} bytes; a {kind} file may have at most {limit:,}"
        )
    return path

"""Writes the file system refuses - a full disk, a quota, a read-only or forbidden folder, a
file where a folder must go - said in one line naming the path, whichever write it was (the
run directory, the executable, ``build/runs``, the simulator's work folder, the Verilator
build lock): never a traceback or an internal error."""

from __future__ import annotations

import errno
from pathlib import Path

__all__ = ["IN_THE_WAY", "REFUSED", "disk_failure"]

#: The system refused the write: exit code 3 (the machine, not the request, must change).
REFUSED = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG}
#: A file is where a folder must go, or the reverse: exit code 2 (another --out will do).
IN_THE_WAY = {errno.EEXIST, errno.ENOTDIR, errno.EISDIR}


def disk_failure(exc: BaseException, where: Path | None) -> tuple[int, str] | None:
    """The exit code and one line for ``exc`` if it is a write the file system refused, else
    None. ``where``: the run directory, named when the error itself names no file (a write
    to an open file)."""
    if not isinstance(exc, OSError) or exc.errno not in REFUSED | IN_THE_WAY:
        return None
    path = exc.filename or (f"a file under {where}" if where is not None else "a file")
    cause = exc.strerror or errno.errorcode.get(exc.errno or 0, str(exc))
    if exc.errno in IN_THE_WAY:
        return 2, f"error: {path}: {cause} (a file is where a folder must go, or the reverse)"
    return 3, f"error: {path}: {cause}"

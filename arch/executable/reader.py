"""The reader's primitives: validated access to the archive's arrays (:class:`Reader`) and to
the manifest's fields - each failure one bounded line naming the file and the field. The
names are private to :mod:`arch.executable`'s reading modules."""

from __future__ import annotations

import hashlib
import io
import math
import re
import zipfile
import zlib
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from arch.executable.container import (
    ARCHIVE_MAX_BYTES,
    ARRAY_MAX_BYTES,
    DIGEST_MEMBER,
    DTYPES,
    MEMBER_NAME,
    ExecutableError,
)
from arch.executable.digest import content_digest
from arch.executable.format import (
    NAME_MAX,
    is_path_name,
)

_NDIM_MAX = 8
_NPY_HEADER_MAX = 4096  # bytes of .npy header allowed beyond the data
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TEXT_MAX = 1000  # characters of a displayed name (layer, node, host step)


def short(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters: a file's values in one bounded line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clip(text: str, limit: int = 200) -> str:
    """``text`` (an exception's message) on one line, cut to ``limit`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class Reader:
    """Validated access to one archive; every error names the file and what is wrong."""

    def __init__(self, path: Path, archive: zipfile.ZipFile, table: Any) -> None:
        self.path, self.archive = path, archive
        if not isinstance(table, dict):
            self.fail("'arrays' must be an object of members")
        self.table: dict[str, Any] = table
        self.members = {info.filename: info for info in archive.infolist()}
        self.blobs: dict[str, bytes] = {}

    def verify(self, manifest_bytes: bytes) -> None:
        """Before anything of the file is used: read every array the table declares (bounded),
        check each against its SHA-256, then the file's digest over the manifest and them all;
        a member the table does not declare is refused."""
        for name in self.members:
            if name not in ("manifest.json", DIGEST_MEMBER) and name not in self.table:
                self.fail(f"member {short(name)} is not part of an executable: the file was edited")
        total = 0
        for member in sorted(self.table, key=str):
            if not isinstance(member, str) or not MEMBER_NAME.fullmatch(member):
                self.fail(
                    f"the array table names {short(member)}, not an array member (arrays/N.npy)"
                )
            nbytes = self._declared(member, member)[2]
            digest = self.table[member].get("sha256")
            if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
                self.fail(f"{member} has sha256 {short(digest)}; expected 64 lowercase hex digits")
            total += nbytes
            if total > ARCHIVE_MAX_BYTES:
                self.fail(f"its arrays hold more than {ARCHIVE_MAX_BYTES} bytes together")
            blob = self._member(member, nbytes + _NPY_HEADER_MAX)
            if hashlib.sha256(blob).hexdigest() != digest:
                self.fail(f"{member} does not match its SHA-256: the file was damaged or altered")
            self.blobs[member] = blob
        sealed = self._member(DIGEST_MEMBER, 128).decode("ascii", "replace").strip()
        if not _SHA256.fullmatch(sealed):
            self.fail(f"{DIGEST_MEMBER} holds {short(sealed)}, not 64 lowercase hex digits")
        if content_digest({"manifest.json": manifest_bytes, **self.blobs}) != sealed:
            self.fail(
                f"its manifest and arrays do not match its digest ({DIGEST_MEMBER}): the file "
                "was damaged or edited after it was written; recompile the model"
            )

    def _declared(
        self,
        member: str,
        where: str,
        dtypes: tuple[str, ...] = DTYPES,
        max_bytes: int = ARRAY_MAX_BYTES,
        limit: str = "the limit for an array",
    ) -> tuple[str, list[int], int]:
        """The dtype, shape and data bytes the table declares for ``member``, checked."""
        declared = self.table[member]
        if not isinstance(declared, dict):
            self.fail(
                f"the array table's entry of {member} must be an object with dtype, shape and "
                f"sha256, not {short(declared)}"
            )
        dtype, shape = declared.get("dtype"), declared.get("shape")
        if not isinstance(dtype, str) or dtype not in dtypes:
            self.fail(f"{where} has dtype {short(dtype)}; expected one of {', '.join(dtypes)}")
        if (
            not isinstance(shape, list)
            or len(shape) > _NDIM_MAX
            or not all(is_int(n) and n >= 0 for n in shape)
        ):
            self.fail(
                f"{where} has a bad shape {short(shape)}; expected a list of at most "
                f"{_NDIM_MAX} integers >= 0"
            )
        # dims capped first: math.prod of huge ints is exact but needlessly slow
        nbytes = max_bytes + 1
        if all(n <= max_bytes for n in shape):
            nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        if nbytes > max_bytes:
            self.fail(
                f"{where} is declared {dtype} {short(shape)}: more bytes than {limit} ({max_bytes})"
            )
        return dtype, shape, nbytes

    def _member(self, name: str, max_bytes: int) -> bytes:
        """The bytes of member ``name``: at most ``max_bytes``, exactly what the zip says."""
        info = self.members.get(name)
        if info is None:
            self.fail(f"member {name} is missing from the archive")
        if info.file_size > max_bytes:
            self.fail(f"member {name} is {info.file_size} bytes, over its limit of {max_bytes}")
        try:
            with self.archive.open(info) as stream:
                blob = stream.read(info.file_size + 1)  # the zip's size may lie: never more
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, RuntimeError) as exc:
            self.fail(f"member {name} is damaged: {type(exc).__name__}: {clip(str(exc))}")
        if len(blob) != info.file_size:
            self.fail(f"member {name} holds {len(blob)} bytes; the archive says {info.file_size}")
        return bytes(blob)

    def fail(self, message: str) -> NoReturn:
        raise ExecutableError(f"{self.path}: {clip(message, 600)}")

    def array(
        self,
        member: Any,
        what: str,
        dtypes: tuple[str, ...] = DTYPES,
        max_bytes: int = ARRAY_MAX_BYTES,
        limit: str = "the limit for an array",
    ) -> np.ndarray:
        """The array ``member`` as the manifest declares it (of ``dtypes``, at most
        ``max_bytes``): its .npy header must agree, and its data be exactly the declared bytes;
        its bytes were read and checked against their digest by :meth:`verify`."""
        if not isinstance(member, str) or not MEMBER_NAME.fullmatch(member):
            self.fail(
                f"{what} names {short(member)}, not an array member of the archive (arrays/N.npy)"
            )
        if member not in self.table:
            self.fail(f"{what} names {member}, which the manifest's array table does not declare")
        if member not in self.members:
            self.fail(f"{what}: member {member} is missing from the archive")
        where = f"{what} ({member})"
        dtype, shape, nbytes = self._declared(member, where, dtypes, max_bytes, limit)
        blob = self.blobs[member]  # read and checked against its digest by verify()
        stream = io.BytesIO(blob)
        header_bytes = self._npy_header(stream, where, dtype, shape)
        if len(blob) != header_bytes + nbytes:
            self.fail(
                f"{where} is {len(blob)} bytes; its {header_bytes}-byte header and "
                f"its declared {dtype} {tuple(shape)} make {header_bytes + nbytes}"
            )
        data = blob[header_bytes:]
        return np.frombuffer(bytearray(data), dtype=dtype).reshape(shape)

    def _npy_header(self, stream: Any, where: str, dtype: str, shape: list[int]) -> int:
        """Read the .npy header off ``stream``; check it says ``dtype`` and ``shape`` in C order
        (native byte order); return its length."""
        try:
            version = np.lib.format.read_magic(stream)
            if version == (1, 0):
                header = np.lib.format.read_array_header_1_0(stream, _NPY_HEADER_MAX)
            elif version == (2, 0):
                header = np.lib.format.read_array_header_2_0(stream, _NPY_HEADER_MAX)
            else:
                self.fail(f"{where} is .npy version {version}; expected 1.0 or 2.0")
        except ValueError as exc:
            if isinstance(exc, ExecutableError):
                raise
            self.fail(f"{where} is not a readable .npy array: {clip(str(exc))}")
        got_shape, fortran, got_dtype = header
        if got_dtype != np.dtype(dtype) or list(got_shape) != shape or fortran:
            order = " in Fortran order" if fortran else ""
            self.fail(
                f"{where} is {clip(str(got_dtype), 40)} {short(got_shape)}{order}; the "
                f"manifest declares {dtype} {tuple(shape)}"
            )
        return int(stream.tell())


def get_field(reader: Reader, obj: Any, key: str, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(obj, dict):
        reader.fail(f"{what} must be an object, not {short(obj)}")
    if key not in obj:
        reader.fail(f"{what}: field {key!r} is missing")
    value = obj[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        reader.fail(f"{what}: field {key!r} must be {names}, not {short(value)}")
    return value


def _span(lo: int | None, hi: int | None) -> str:
    if lo is None:
        return "" if hi is None else f" <= {hi}"
    return f" >= {lo}" if hi is None else f" in {lo}..{hi}"


def _in(value: int, lo: int | None, hi: int | None) -> bool:
    return (lo is None or value >= lo) and (hi is None or value <= hi)


def read_int(
    reader: Reader, obj: Any, key: str, what: str, lo: int | None = 0, hi: int | None = None
) -> int:
    value = get_field(reader, obj, key, int, what)
    if not _in(value, lo, hi):
        reader.fail(f"{what}: field {key!r} must be an integer{_span(lo, hi)}, not {short(value)}")
    return int(value)


def read_ints(
    reader: Reader,
    value: Any,
    count: int,
    what: str,
    lo: int | None = 0,
    hi: int | None = None,
) -> tuple[int, ...]:
    if (
        not isinstance(value, list)
        or len(value) != count
        or not all(is_int(v) and _in(v, lo, hi) for v in value)
    ):
        reader.fail(f"{what} must be a list of {count} integers{_span(lo, hi)}, not {short(value)}")
    return tuple(value)


def read_names(reader: Reader, value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        reader.fail(f"{what} must be a list of tensor names, not {short(value)}")
    return list(value)


def read_text(reader: Reader, obj: Any, key: str, what: str) -> str:
    """A displayed name: printable, at most :data:`_TEXT_MAX` characters."""
    value = get_field(reader, obj, key, str, what)
    if not value or len(value) > _TEXT_MAX or not value.isprintable():
        reader.fail(
            f"{what}: field {key!r} must be 1..{_TEXT_MAX} printable characters, not {short(value)}"
        )
    return str(value)


def read_path_name(reader: Reader, obj: Any, key: str, what: str) -> str:
    """A name that becomes part of a file path (:func:`is_path_name`)."""
    value = get_field(reader, obj, key, str, what)
    if not is_path_name(value):
        reader.fail(
            f"{what}: field {key!r} is {short(value)}; it names files, so it must be 1.."
            f"{NAME_MAX} of A-Z a-z 0-9 _ . # : + - and not start with a dot"
        )
    return str(value)

"""The executable file: a zip of ``manifest.json`` and ``.npy`` arrays, compressed. No pickle.

``manifest.json`` holds the format name and version, the model name, the config, the steps
(device programs and host steps) and the reference graph, all as plain JSON; every array is a
member ``arrays/<n>.npy`` that the manifest names, with its dtype, shape and SHA-256; the member
``digest.sha256`` seals the file: one SHA-256 over the manifest and all arrays
(:mod:`arch.executable.digest`). The reader checks it, and every array's, before it uses
anything: a damaged or edited file is refused as such, never run.

Reading trusts nothing in the file (:func:`load`): the archive must hold only the manifest,
the digest and the arrays the manifest's table declares; no member is inflated beyond what it
may hold (manifest.json: :data:`MANIFEST_MAX_BYTES`; an array: its declared data and a 4 KiB
.npy header at most), whatever the zip says, and a damaged one (inflate or CRC error) is named;
every array must have a dtype of :data:`DTYPES`, a bounded size (an image: the config's DRAM;
others :data:`ARRAY_MAX_BYTES`; all: :data:`ARCHIVE_MAX_BYTES`), a .npy header that agrees with
the manifest and the declared digest; every field must have its type (``true`` is no integer),
every address and size must lie inside the program's memory, every name that becomes a path
must be :func:`~arch.executable.format.is_path_name`, each device program's image must agree
with its fields (``program_checks``: aligned launch registers, a program that decodes up to its
one END, PERF records where ``perf_base`` says, no data outside the regions), and the steps must
agree with the reference graph, which must be one :func:`arch.reference.check_graph` accepts -
so what loads also runs, even when an editor recomputed the digests. What is wrong is said in
one bounded line (:class:`ExecutableError`), never by a traceback.

This module reads the manifest and is where :func:`load`, :func:`save` and the file's constants
are imported from; the work is done in ``container`` (format, limits, the error), ``reader``
(the digests; checked access to arrays and fields), ``digest`` (the file's digest), ``parse``
(steps and reference graph), ``program_checks`` (a program's image against its fields),
``checks`` (the parts against each other) and ``writer``.
"""

from __future__ import annotations

import json
import zipfile
import zlib
from pathlib import Path

from arch.config import AccelConfig, ConfigError
from arch.executable.checks import VIEW_OPS, check_host_models, check_steps
from arch.executable.container import (
    ARCHIVE_MAX_BYTES,
    ARRAY_MAX_BYTES,
    DTYPES,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST_MAX_BYTES,
    READABLE_VERSIONS,
    SUFFIX,
    TENSOR_MAX_ELEMENTS,
    ExecutableError,
)
from arch.executable.format import Executable, Step
from arch.executable.parse import parse_device, parse_host, parse_reference
from arch.executable.reader import Reader, clip, get_field, is_int, read_path_name, short
from arch.executable.writer import check_images, manifest, save

__all__ = [
    "ARCHIVE_MAX_BYTES",
    "ARRAY_MAX_BYTES",
    "DTYPES",
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST_MAX_BYTES",
    "READABLE_VERSIONS",
    "SUFFIX",
    "TENSOR_MAX_ELEMENTS",
    "VIEW_OPS",
    "ExecutableError",
    "check_config",
    "check_images",
    "load",
    "manifest",
    "save",
]


def check_config(
    exe: Executable, config: AccelConfig | None, source: str | Path | None = None
) -> None:
    """Refuse ``exe`` for a ``config`` (if given) other than the one it was compiled for;
    ``source``: the file it was read from, for the message."""
    if config is not None and config != exe.config:
        what = str(source) if source is not None else f"executable {exe.model!r}"
        raise ExecutableError(
            f"{what} was compiled for config {exe.config.name}, not {config.name}; "
            "recompile it for this config (or run it with its own)"
        )


def load(path: str | Path, config: AccelConfig | None = None) -> Executable:
    """Read and check an executable; with ``config``, refuse one compiled for another config."""
    path = Path(path)
    if not path.is_file():
        raise ExecutableError(f"{path}: no such executable file")
    try:
        with zipfile.ZipFile(path) as archive:
            return _load(path, archive, config)
    except zipfile.BadZipFile as exc:
        raise ExecutableError(f"{path} is not an executable (not a zip archive: {exc})") from None
    except (OSError, EOFError, RuntimeError, MemoryError, zlib.error) as exc:  # truncated
        raise ExecutableError(
            f"{path} cannot be read: {type(exc).__name__}: {clip(str(exc))}"
        ) from None


def _load(path: Path, archive: zipfile.ZipFile, config: AccelConfig | None) -> Executable:
    try:
        info = archive.getinfo("manifest.json")
    except KeyError:
        raise ExecutableError(f"{path} is not an executable: no manifest.json") from None
    too_big = f"{path}: manifest.json is over {MANIFEST_MAX_BYTES} bytes"
    if info.file_size > MANIFEST_MAX_BYTES:
        raise ExecutableError(too_big)
    try:
        with archive.open(info) as stream:  # no more than the zip says (it may lie), capped
            text = stream.read(info.file_size + 1)
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise ExecutableError(f"{path}: manifest.json is damaged: {clip(str(exc))}") from None
    if len(text) > MANIFEST_MAX_BYTES:
        raise ExecutableError(too_big)
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ExecutableError(
            f"{path}: manifest.json is not valid JSON: {clip(str(exc))}"
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ExecutableError(f"{path} is not a {FORMAT} file (no 'format': {FORMAT!r})")
    version = data.get("format_version")
    if not is_int(version):
        raise ExecutableError(
            f"{path}: 'format_version' is {type(version).__name__} {short(version)}, not an "
            f"integer; this tool reads versions {READABLE_VERSIONS}"
        )
    if version not in READABLE_VERSIONS:
        raise ExecutableError(
            f"{path}: executable format version {version}; this tool reads versions "
            f"{READABLE_VERSIONS} - recompile the model"
        )
    reader = Reader(path, archive, data.get("arrays"))
    reader.verify(text)  # the digest, before anything of the file is used
    try:
        built_for = AccelConfig.from_dict(get_field(reader, data, "config", dict, "manifest"))
    except (ConfigError, TypeError) as exc:
        reader.fail(f"the config it was compiled for is invalid: {exc}")
    model = read_path_name(reader, data, "model", "manifest")
    steps: list[Step] = []
    for index, step in enumerate(get_field(reader, data, "steps", list, "manifest")):
        kind = get_field(reader, step, "kind", str, f"step {index}")
        if kind == "device":
            steps.append(parse_device(reader, step, index, built_for))
        elif kind == "host":
            steps.append(parse_host(reader, step, index))
        else:
            reader.fail(f"step {index}: kind {short(kind)} is not 'device' or 'host'")
    reference = parse_reference(reader, get_field(reader, data, "reference", dict, "manifest"))
    exe = Executable(model, built_for, steps, reference)
    check_steps(reader, exe)
    check_host_models(reader, reference)
    check_config(exe, config, path)
    return exe

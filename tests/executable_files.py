"""Executable files edited as a damaged disk or a user who knows the format would: members
replaced, removed or added, the manifest changed, and the digests recomputed (:func:`reseal`)
from the format's description - independently of :mod:`arch.executable`'s own code."""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from pathlib import Path


def manifest_of(path: Path) -> dict:
    with zipfile.ZipFile(path) as archive:
        return json.loads(archive.read("manifest.json"))


DIGEST = "digest.sha256"
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def reseal(members: dict[str, bytes], root: bool = True) -> dict[str, bytes]:
    """``members`` as an editor who knows the format would leave them: every array's SHA-256
    in the manifest (those that are 64 hex digits) recomputed over its member, then (``root``)
    the file's digest over manifest.json and the arrays (written here from the format's
    description, not with arch.executable's code)."""
    out = dict(members)
    try:
        info = json.loads(out["manifest.json"])
    except (KeyError, ValueError, UnicodeDecodeError):
        info = None
    if isinstance(info, dict) and isinstance(info.get("arrays"), dict):
        changed = False
        for name, entry in info["arrays"].items():
            if (
                isinstance(entry, dict)
                and name in out
                and SHA256_HEX.fullmatch(str(entry.get("sha256")))
            ):
                changed |= entry["sha256"] != hashlib.sha256(out[name]).hexdigest()
                entry["sha256"] = hashlib.sha256(out[name]).hexdigest()
        if changed:
            out["manifest.json"] = json.dumps(info).encode()
    digest = hashlib.sha256()
    for name in sorted(n for n in out if n != DIGEST):
        digest.update(name.encode() + b"\0" + len(out[name]).to_bytes(8, "big") + out[name])
    if DIGEST in out and root:
        out[DIGEST] = digest.hexdigest().encode() + b"\n"
    return out


def rewrite(
    src: Path,
    dst: Path,
    members: dict[str, bytes | None],
    compression: int = zipfile.ZIP_STORED,
    sealed: bool = True,
    root: bool = True,
) -> Path:
    """A copy of the archive with some members replaced or added (bytes) or left out (None);
    ``sealed``: with its digests recomputed (:func:`reseal`; ``root``: the file's too), so the
    reader's other checks are the ones that speak."""
    with zipfile.ZipFile(src) as old:
        content = {name: old.read(name) for name in old.namelist()}
    content.update(members)
    content = {name: data for name, data in content.items() if data is not None}
    if sealed:
        content = reseal(content, root)
    with zipfile.ZipFile(dst, "w", compression) as new:
        for name, data in content.items():
            new.writestr(name, data)
    return dst


def with_manifest(src: Path, dst: Path, change, **sealing: bool) -> Path:
    """A copy of the archive with its manifest changed by ``change`` (``sealing``: the
    arguments of :func:`rewrite`)."""
    info = manifest_of(src)
    change(info)
    return rewrite(src, dst, {"manifest.json": json.dumps(info).encode()}, **sealing)

"""The executable's seal: one SHA-256 over its manifest and all its arrays, which the writer
stores in :data:`~arch.executable.container.DIGEST_MEMBER` and the reader checks before it uses
anything (:func:`content_digest`)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping


def content_digest(members: Mapping[str, bytes]) -> str:
    """SHA-256 (hex) over ``members`` (name -> uncompressed bytes: manifest.json and every
    array), in name order, each as its UTF-8 name, a NUL, its length (8 bytes, big-endian) and
    its bytes - so no content, name or order change keeps the digest."""
    digest = hashlib.sha256()
    for name in sorted(members):
        blob = members[name]
        digest.update(name.encode() + b"\0" + len(blob).to_bytes(8, "big"))
        digest.update(blob)
    return digest.hexdigest()

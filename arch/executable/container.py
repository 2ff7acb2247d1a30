"""The executable file as a container: its format name and versions, suffix, member names,
array dtypes and size limits, and the error its reader and writer raise."""

from __future__ import annotations

import re

from arch.reference import MAX_ELEMENTS

FORMAT = "cosim-executable"
FORMAT_VERSION = 8
#: Versions this tool reads. 5 seals the file: one digest over the manifest and every array
#: (:data:`DIGEST_MEMBER`), each array's SHA-256 over its whole member. 6 adds the reference
#: views between maps and tokens (map_to_tokens, tokens_to_map, select_token); 7 the constant
#: (a reference node of no input; its codes are in the device image, which then also holds
#: tensor bytes: a class token's concat, position embeddings); 8 batch_matmul's optional attr
#: ``groups`` (a decode step of several sequences). A file of 5, 6 or 7 means the same under
#: 8. Earlier versions (1-4: zero points, ACCUM gates, the transformer's layouts,
#: split_heads_t) carry no digest, so a damaged or edited one cannot be told from a good one:
#: they are refused (recompile).
READABLE_VERSIONS = (5, 6, 7, 8)
SUFFIX = ".cosim"
#: dtypes an array may have.
DTYPES = ("int8", "uint8", "int32", "int64", "float32")
#: The member holding the file's digest: 64 lowercase hex digits of SHA-256 over every other
#: member (:func:`arch.executable.digest.content_digest`).
DIGEST_MEMBER = "digest.sha256"
#: The name of an array member.
MEMBER_NAME = re.compile(r"arrays/[0-9]+\.npy")
#: The most bytes manifest.json may hold.
MANIFEST_MAX_BYTES = 64 << 20
#: The most bytes an array other than a device image may hold (an image: the config's DRAM).
ARRAY_MAX_BYTES = 1 << 30
#: The most bytes all arrays together may hold (every one is read, and checked, before use).
ARCHIVE_MAX_BYTES = 2 * ARRAY_MAX_BYTES
#: The most elements a tensor of the reference graph may have.
TENSOR_MAX_ELEMENTS = MAX_ELEMENTS


class ExecutableError(ValueError):
    """An executable cannot be read, is inconsistent, or does not fit the requested config."""

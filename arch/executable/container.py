"""The executable file as a container: its format name and versions, suffix, member names,
array dtypes and size limits, and the error its reader and writer raise."""

from __future__ import annotations

import re

from arch.reference import MAX_ELEMENTS

FORMAT = "cosim-executable"
FORMAT_VERSION = 4
#: Versions this tool reads. 2 added zero points, ACCUM gates, scale layers, DWCONV and channel
#: slices; 3 the transformer's tokens and heads layouts, batch_matmul layers and the heads
#: views; 4 the transposed heads view of k (split_heads_t) over the tokens_t layout its
#: producer's transposing stores write. An older file has none of them, and their defaults
#: mean what it meant.
READABLE_VERSIONS = (1, 2, 3, 4)
SUFFIX = ".cosim"
#: dtypes an array may have.
DTYPES = ("int8", "uint8", "int32", "int64", "float32")
#: The name of an array member.
MEMBER_NAME = re.compile(r"arrays/[0-9]+\.npy")
#: The most bytes manifest.json may hold.
MANIFEST_MAX_BYTES = 64 << 20
#: The most bytes an array other than a device image may hold (an image: the config's DRAM).
ARRAY_MAX_BYTES = 1 << 30
#: The most elements a tensor of the reference graph may have.
TENSOR_MAX_ELEMENTS = MAX_ELEMENTS


class ExecutableError(ValueError):
    """An executable cannot be read, is inconsistent, or does not fit the requested config."""

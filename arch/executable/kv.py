"""A language model compiled for decoding with a KV cache: two device programs in one DRAM
image (see docs/language-model.md).

- ``prefill`` is an executable like any (the host input stage, then one device program over
  the T positions); launched with ``prefill_launches[b]`` on sequence b's prompt it leaves
  every layer's key rows and values in block b of the caches (B blocks of T rows);
- ``decode`` is one device program at one position, placed in the same image above the
  prefill's map; its instructions serve every position p, and ``launches[p]`` points
  ``desc_base`` at the descriptor table of p - the STOREs of the B new key and value rows at
  row p of each block, the LOAD of the softmax's mask rows of p - so the host picks the
  position at launch, and each launch starts from the DRAM the last one left (no host copy
  of the cache).

Plain data, in memory only: an archive does not hold it (``make sim`` compiles it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arch.executable.format import DramTensor, Executable
from arch.isa import Launch

__all__ = ["KvCacheTensors", "KvExecutable"]


@dataclass(frozen=True)
class KvCacheTensors:
    """One layer's caches in the shared DRAM: token rows, B sequences' blocks of T rows one
    after the other (the decode program's cache constants)."""

    keys: DramTensor  # the key rows (1, B x T, 1, F)
    values: DramTensor  # the value rows (1, B x T, 1, F)
    key_row: str  # the decode program's output stored at row p of ``keys``
    value_row: str  # and at row p of ``values``
    prefilled: tuple[str, str]  # the prefill's tensors of key rows and values (per sequence)


@dataclass
class KvExecutable:
    """See the module docstring. ``decode``'s program has its addresses in the shared image;
    its reference graph is the decode graph (its caches as constants)."""

    prefill: Executable
    decode: Executable
    image: np.ndarray  # uint8: the shared DRAM image from address 0
    launches: list[Launch]  # the decode launch of position p
    caches: list[KvCacheTensors]
    start: str  # the decode program's input: the token's embedding row
    context: int  # T: positions in the caches
    prefill_launches: list[Launch]  # the prefill launch of sequence b (its block of the caches)

    @property
    def batch(self) -> int:
        """B: the sequences decoded together."""
        return len(self.prefill_launches)

    @property
    def dram_end(self) -> int:
        """One past the last byte either program uses."""
        return int(self.image.size)

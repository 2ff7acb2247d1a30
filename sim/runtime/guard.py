"""Guard bands: canary bytes where a program must not write, checked after every run.

Every byte of a DRAM image that lies in no region of its memory map (the gaps between regions)
and a tail of :data:`TAIL_BYTES` after the image hold a seeded random pattern. After the run each
of them must be unchanged: a store past its region, or past the image, fails with the first
changed address and the regions around it. The rest of DRAM, past the bytes read back, is
guarded by the testbench's DRAM model itself, which counts every write there
(``DeviceResult.stray_writes``): a store far past the image fails too, even one writing zeros.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

TAIL_BYTES = 4096  # canary bytes after the image


@dataclass(frozen=True)
class Guard:
    """Where the canaries are (``addresses``), what they hold (``pattern``), and the regions
    (name, address, bytes) they sit between."""

    addresses: np.ndarray
    pattern: np.ndarray
    regions: tuple[tuple[str, int, int], ...]
    image_bytes: int  # the image without the tail

    @property
    def size(self) -> int:
        """Bytes of DRAM to read back to check every canary."""
        return self.image_bytes + TAIL_BYTES

    def check(self, dram: np.ndarray, stray: tuple[int, int] | None = None) -> str | None:
        """None if every canary in ``dram`` is intact and nothing was written past it
        (``stray``: bytes written past the bytes read back and the lowest address, from the
        backend's ``DeviceResult.stray_writes``), else what changed and where."""
        if stray is not None and stray[0]:
            return (
                f"{stray[0]} bytes written past the {self.size} bytes read back; "
                f"first at 0x{stray[1]:x}, {self.where(stray[1])}"
            )
        if dram.size < self.size:
            return f"only {dram.size} bytes of DRAM read back, the guard bands need {self.size}"
        bad = np.flatnonzero(dram[self.addresses] != self.pattern)
        if not bad.size:
            return None
        first = int(self.addresses[bad[0]])
        return (
            f"{bad.size} guard bytes changed; first at 0x{first:x} "
            f"(0x{int(self.pattern[bad[0]]):02x} -> 0x{int(dram[first]):02x}), {self.where(first)}"
        )

    def where(self, address: int) -> str:
        """The address relative to the regions around it."""
        before = [r for r in self.regions if r[1] + r[2] <= address]
        after = [r for r in self.regions if r[1] > address]
        parts = []
        if before:
            name, start, nbytes = max(before, key=lambda r: r[1] + r[2])
            end = start + nbytes
            parts.append(f"{address - end} bytes past '{name}' (0x{start:x}..0x{end:x})")
        if address >= self.image_bytes:
            parts.append(f"past the end of the image (0x{self.image_bytes:x})")
        elif after:
            name, start, _ = min(after, key=lambda r: r[1])
            parts.append(f"before '{name}' (0x{start:x})")
        return ", ".join(parts) or "below every region"


def guard_image(
    image: np.ndarray, regions: Iterable[tuple[str, int, int]], seed: int = 0
) -> tuple[np.ndarray, Guard]:
    """``image`` followed by :data:`TAIL_BYTES`, with canaries in every byte outside
    ``regions`` (name, address, bytes); image bytes outside the regions must be zero."""
    spans = tuple(sorted(((str(n), int(a), int(b)) for n, a, b in regions), key=lambda r: r[1]))
    size = image.size + TAIL_BYTES
    free = np.ones(size, dtype=bool)
    for _name, start, nbytes in spans:
        free[start : start + nbytes] = False
    addresses = np.flatnonzero(free)
    inside = addresses[addresses < image.size]
    if np.any(image[inside]):
        first = int(inside[np.flatnonzero(image[inside])[0]])
        raise ValueError(f"the image has data at 0x{first:x}, outside every region")
    pattern = np.random.default_rng(seed).integers(0, 256, addresses.size, dtype=np.uint8)
    out = np.zeros(size, dtype=np.uint8)
    out[: image.size] = image
    out[addresses] = pattern
    return out, Guard(addresses, pattern, spans, image.size)

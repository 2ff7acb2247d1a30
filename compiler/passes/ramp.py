"""The layer ramp: the first step of a GEMM layer is loaded and computed in parts.

A layer starts from a clean barrier, so its first GEMM waits for the whole first step's loads
(a k group of activations and weights: ~3.5k cycles on a ResNet-50 conv). Split into parts of
1, 2, 4, ... chunks, each with its own LOAD -> COMPUTE token, the first GEMM starts once one
chunk is in, and each later part loads while the parts before it compute. Used by the schedule
(which emits the parts) and the tile pass's cost model (which counts only the first part's load).
"""

from __future__ import annotations

from arch.config import AccelConfig

MAX_PARTS = 4  # bounds the extra GEMM instructions (start and drain each) a layer pays for


def parts(chunks: int, config: AccelConfig) -> list[int]:
    """Chunk counts of the parts of a first step of ``chunks`` k chunks, in order. The LOAD
    queue runs ahead by the parts plus the next step's token, so at most ``token_depth - 2``
    parts keep a push from ever stalling on a full token queue."""
    most = max(1, min(MAX_PARTS, config.token_depth - 2))
    sizes: list[int] = []
    size = 1
    while sum(sizes) < chunks and len(sizes) < most - 1:
        sizes.append(min(size, chunks - sum(sizes)))
        size *= 2
    if sum(sizes) < chunks:
        sizes.append(chunks - sum(sizes))
    return sizes


def first_step_cycles(
    sizes: list[int], chunk_load: float, chunk_compute: float, latency: int, overhead: int
) -> float:
    """When the first step's last GEMM ends, its parts ``sizes`` loading one after another
    (``chunk_load`` cycles a chunk, after ``latency``) and each part's GEMM starting once its
    loads are in and the previous GEMM is done (``chunk_compute`` a chunk plus ``overhead``)."""
    loaded = float(latency)
    done = 0.0
    for size in sizes:
        loaded += size * chunk_load
        done = max(done, loaded) + size * chunk_compute + overhead
    return done

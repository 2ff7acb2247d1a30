"""sqnr.png: the per-layer SQNR (dB) of a run's int8 layers against fp32 onnxruntime."""

from __future__ import annotations

import io
import math
from concurrent.futures import Future
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["plot_sqnr", "sqnr_png"]


def plot_sqnr(entries: list[dict[str, Any]], title: str, path: Path | BinaryIO) -> Path | BinaryIO:
    """Bar chart of ``entries`` (``{"layer", "sqnr_db"}``, in graph order) to ``path`` (or a
    binary file) as PNG; an exact layer (infinite SQNR) is drawn at the top of the axis and
    labelled ``exact``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = [e["sqnr_db"] for e in entries]
    finite = [v for v in values if v is not None and math.isfinite(v)]
    top = max(finite, default=40.0) + 5
    shown = [v if v is not None and math.isfinite(v) else top for v in values]
    fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(entries)), 4))
    ax.bar(range(len(entries)), shown, color="#55a868")
    for i, v in enumerate(values):
        if v is None or not math.isfinite(v):
            ax.text(i, top, "exact", ha="center", va="bottom", fontsize=6, rotation=90)
    ax.set_xticks(range(len(entries)))
    ax.set_xticklabels([e["layer"] for e in entries], rotation=90, fontsize=7)
    ax.set_ylabel("SQNR vs fp32 (dB)")
    ax.set_title(f"{title}: per-layer SQNR", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path


def sqnr_png(entries: Future[list[dict[str, Any]]], title: str) -> bytes | None:
    """The PNG of :func:`plot_sqnr` once ``entries`` are known (None for none), to draw it while
    the simulator runs; the plot must not be drawn at the same time as another (pyplot)."""
    values = entries.result()
    if not values:
        return None
    buffer = io.BytesIO()
    plot_sqnr(values, title, buffer)
    return buffer.getvalue()

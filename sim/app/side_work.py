"""The measurements a run makes beside the simulation, on the other core while it runs: the
output against fp32 onnxruntime, the per-layer SQNR (and its plot), and the per-layer agreement
with onnxruntime's QDQ execution. None of them needs a simulator result."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

import zoo
from arch.executable import Executable
from arch.reference import RefGraph
from sim.app.sqnr_plot import sqnr_png
from sim.quality.accuracy import compare_fp32
from sim.quality.qdq_agreement import agreement_report
from sim.quality.sqnr import layer_sqnr
from sim.quality.twin import twin_report
from sim.runtime.reference_stream import ReferenceStream

SQNR_IMAGES = 100  # held-out images of a trained model the per-layer SQNR is measured on
#: The fp32 comparison's entries a report's ``accuracy`` holds.
FP32_KEYS = ("top1_agree_fp32", "cosine_vs_fp32")


def fp32_accuracy(measured: dict[str, Any]) -> dict[str, Any]:
    """The report's entries of :func:`sim.quality.accuracy.compare_fp32`'s result."""
    return {k: v for k, v in measured.items() if k in FP32_KEYS}


def api_accuracy(
    fp32_model: onnx.ModelProto | str | Path, graph: RefGraph, x: np.ndarray
) -> dict[str, Any]:
    """An API run's ``accuracy`` on input ``x``: the fp32 comparison and the twin agreement."""
    proto = onnx.load(str(fp32_model)) if isinstance(fp32_model, str | Path) else fp32_model
    accuracy = fp32_accuracy(compare_fp32(proto, graph, x))
    twin = twin_report(proto, graph, [x])
    if twin is not None:
        accuracy["twin_agreement"] = twin
    return accuracy


@dataclass
class SideWork:
    """The measurements' futures (None: not measured, as for an executable without its fp32
    model)."""

    fp32: Future[dict[str, Any]] | None = None
    sqnr: Future[list[dict[str, Any]]] | None = None
    sqnr_plot: Future[bytes | None] | None = None
    agreement: Future[dict[str, Any] | None] | None = None
    twin: Future[dict[str, Any] | None] | None = None

    @classmethod
    def start(
        cls,
        pool: Any,
        exe: Executable,
        source: onnx.ModelProto | None,
        model: str | None,
        xs: list[np.ndarray],
        reference: ReferenceStream | None,
        plot_title: str | None,
    ) -> SideWork:
        """Submit the measurements to ``pool``; ``reference``: the run's integer reference of
        ``xs[0]``, shared; ``plot_title``: draw the SQNR plot (with a calibration)."""
        if source is None:
            return cls()

        def known() -> dict[str, np.ndarray] | None:
            return reference.result() if reference is not None else None

        fp32 = pool.submit(lambda: compare_fp32(source, exe.reference, xs[0], known()))
        split = zoo.held_out(model) if model else None
        sqnr_xs = [split.x[i : i + 1] for i in range(SQNR_IMAGES)] if split else xs
        sqnr = pool.submit(lambda: layer_sqnr(source, exe.reference, sqnr_xs, known()))
        # drawn on the other core during the run: no plot is drawn before it is done
        plot = pool.submit(sqnr_png, sqnr, plot_title) if plot_title is not None else None
        agreement = pool.submit(agreement_report, source, exe.reference, xs[:4])
        twin = pool.submit(lambda: twin_report(source, exe.reference, xs[:1], known()))
        return cls(fp32, sqnr, plot, agreement, twin)

    def accuracy(self, dataset: dict[str, Any] | None = None) -> dict[str, Any]:
        """The report's ``accuracy``: the entries measured here (waits for them) and the
        held-out evaluation's ``dataset``."""
        accuracy = fp32_accuracy(self.fp32.result()) if self.fp32 is not None else {}
        if dataset is not None:
            accuracy["dataset"] = dataset
        if self.sqnr is not None:
            accuracy["sqnr"] = self.sqnr.result()
        if self.agreement is not None and self.agreement.result() is not None:
            accuracy["ort_agreement"] = self.agreement.result()
        if self.twin is not None and self.twin.result() is not None:
            accuracy["twin_agreement"] = self.twin.result()
        return accuracy

    def plot(self, accuracy: dict[str, Any]) -> bytes | None:
        """The SQNR plot (PNG), if one was drawn and there is an SQNR to show."""
        if self.sqnr_plot is None or not accuracy.get("sqnr"):
            return None
        return self.sqnr_plot.result()

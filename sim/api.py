"""The Python API: compile a model, and run a compiled bundle on a backend.

>>> from compiler.compile import compile_model
>>> from arch.config import PRESETS
>>> from sim import api
>>> name, plan = compile_model("mlp", PRESETS["tiny"])
>>> outputs, report = api.run(plan, x, backend="isa")   # or a bundle file written by make sim
>>> outputs, report = api.run(plan, x, backend="pyverilator")   # the RTL, in this process
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from arch.config import AccelConfig
from compiler.accuracy import compare_fp32
from compiler.bundle import load_bundle
from compiler.plan import Plan
from sim import report as reports
from sim.run import run as run_plan


def run(
    bundle: str | Path | Plan,
    inputs: np.ndarray,
    backend: str = "isa",
    *,
    config: AccelConfig | None = None,
    workdir: Path | None = None,
    model: str = "model",
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Run ``bundle`` (a ``.bundle`` file or a compiled plan) on ``backend`` ("isa", "rtl" or
    "pyverilator").

    Returns the dequantized graph outputs and the report (the ``report.json`` contract); every
    layer is checked bit for bit against the integer reference. With ``config``, a bundle
    compiled for another config is refused (:class:`compiler.bundle.BundleError`).
    """
    if isinstance(bundle, Plan):
        plan = bundle
        if config is not None and config != plan.config:
            raise ValueError(f"plan was compiled for {plan.config.name}, not {config.name}")
    else:
        plan, manifest = load_bundle(Path(bundle), config)
        model = manifest.get("model", model)
    result = run_plan(plan, np.asarray(inputs, dtype=np.float32), backend, workdir=workdir)
    graph = plan.graph
    accuracy: dict[str, Any] = {}
    if graph.source is not None:
        measured = compare_fp32(graph.source, graph, inputs)
        accuracy = {k: measured[k] for k in ("top1_agree_fp32", "cosine_vs_fp32")}
    counters = [layer.counters for layer in result.layers]
    report = reports.build(model, plan.config, result, accuracy, counters)
    return result.outputs, report

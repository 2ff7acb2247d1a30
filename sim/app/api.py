"""The Python API: run an executable (compiled in this process, or a saved file) on a backend.

>>> from compiler.compile import compile_model
>>> from arch.config import PRESETS
>>> from sim.app import api
>>> compiled = compile_model("mlp", PRESETS["tiny"])
>>> outputs, report = api.run(compiled.executable, x, backend="isa")
>>> outputs, report = api.run("build/runs/latest/mlp.cosim", x, backend="pyverilator")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx

from arch import executable
from arch.config import AccelConfig
from arch.executable import Executable
from sim.app.session import Request, Session
from sim.runtime.inputs import check_input


def run(
    exe: str | Path | Executable,
    inputs: np.ndarray,
    backend: str = "isa",
    *,
    config: AccelConfig | None = None,
    workdir: Path | None = None,
    fp32_model: onnx.ModelProto | str | Path | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Run ``exe`` (an executable or its file) on ``backend`` ("isa", "rtl" or "pyverilator").

    Returns the graph outputs (fp32) and the report (the ``report.json`` contract); every layer
    is checked bit for bit against the integer reference. With ``config``, an executable
    compiled for another config is refused (:class:`arch.executable.ExecutableError`), an input
    of another shape, complex or not finite too (:class:`sim.runtime.inputs.InputError`). With
    ``fp32_model`` (the ONNX model it was compiled from), the report has the accuracy vs fp32.
    """
    path = None
    if not isinstance(exe, Executable):
        path = Path(exe)
        exe = executable.load(path, config)
    executable.check_config(exe, config, path)
    x = check_input(inputs, exe.input.shape)
    session = Session(Request(backend=backend, bundle=path))
    result, report = session.check(exe, x, workdir=workdir, fp32_model=fp32_model, path=path)
    return result.outputs, report

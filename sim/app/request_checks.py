"""The checks of a request that need no model: run first, before any cluster, build or
simulator starts, so that a bad argument is one line and exit code 2 at once.

- Every option given is used: an empty value (``make sim MODEL=``) is refused, not read as
  "the default", and an option that does not apply to the run (:data:`APPLIES`) is refused,
  not dropped.
- Numbers are in range; ``CALIB_METHOD`` is one the compiler knows; JOBS and a waveform
  window do not go together.
- Every file named is a regular file of bounded size (:func:`sim.app.files.regular_file`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

import zoo
from compiler.calib_methods import CalibMethodError, parse_method
from sim import knobs
from sim.app.files import regular_file
from sim.runtime.inputs import InputError
from sim.runtime.run import backend_of
from sim.scaleout import shards

if TYPE_CHECKING:
    from sim.app.session import Request

__all__ = ["APPLIES", "check_early"]

#: The most characters one --generate makes (each is a full forward pass today).
MAX_GENERATE = 4096
_WAVES = ("waves", "wave_layer", "wave_insn", "wave_cycles", "wave_signals")

#: Options that apply only to some runs: option -> (when it applies, what it needs; ``{backend}``
#: is the run's). An option set (not None, not False) where it does not apply is refused.
APPLIES: dict[str, tuple[Callable[[Request], bool], str]] = {
    "image_size": (lambda r: r.bundle is None, "compiling a model (--model), not to --bundle"),
    "calib": (lambda r: r.bundle is None, "compiling a model (--model), not to --bundle"),
    "calib_method": (lambda r: r.bundle is None, "compiling a model (--model), not to --bundle"),
    "eval": (
        lambda r: r.bundle is None,
        "a model trained on a data set (--model), not to --bundle",
    ),
    "generate": (lambda r: r.bundle is None, "a language model (--model), not to --bundle"),
    "prompt": (lambda r: r.generate is not None, "generation (--generate N)"),
    "top_k": (lambda r: r.generate is not None, "generation (--generate N)"),
    "decode": (lambda r: r.generate is not None, "generation (--generate N)"),
    "batch": (
        lambda r: r.generate is not None and r.decode != "recompute",
        "generation with the KV cache (--generate N, not --decode recompute)",
    ),
    "no_ideal": (
        lambda r: backend_of(r.backend).runs_rtl,
        "an RTL backend (rtl, pyverilator), not {backend}",
    ),
    "hooks": (lambda r: backend_of(r.backend).hooks, "--backend rtl (cocotb), not {backend}"),
    "dram_stall": (
        lambda r: backend_of(r.backend).runs_rtl,
        "an RTL backend (rtl, pyverilator), not {backend}",
    ),
    "no_failure_waves": (lambda r: backend_of(r.backend).traces, "--backend rtl, not {backend}"),
    **{
        name: (lambda r: backend_of(r.backend).traces, "--backend rtl, not {backend}")
        for name in _WAVES
    },
}


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_options(request: Request) -> None:
    """No option is empty, and each one given applies to the run (:data:`APPLIES`)."""
    for field in fields(request):
        value = getattr(request, field.name)
        if isinstance(value, str | Path) and not str(value).strip():
            raise InputError(f"{_option(field.name)} is empty: give a value or leave it out")
    for name, (applies, needs) in APPLIES.items():
        value = getattr(request, name)
        if value is not None and value is not False and not applies(request):
            needs = needs.format(backend=request.backend)
            raise InputError(f"{_option(name)} applies only to {needs}; leave it out")


def check_numbers(request: Request) -> None:
    """Numbers in range, a known calibration method, JOBS without a waveform window."""
    r = request
    if r.seed < 0:
        raise InputError(f"--seed must be a non-negative integer, not {r.seed}")
    if r.eval is not None and r.eval < 0:
        raise InputError(f"--eval must be a non-negative integer, not {r.eval}")
    if r.generate is not None and not 1 <= r.generate <= MAX_GENERATE:
        raise InputError(f"--generate must be 1..{MAX_GENERATE} characters, not {r.generate}")
    if r.top_k is not None and r.top_k < 1:
        raise InputError(f"--top-k must be a positive integer, not {r.top_k}")
    if r.batch is not None and r.batch < 1:
        raise InputError(f"--batch must be a positive integer, not {r.batch}")
    if r.max_cycles < 1:
        raise InputError(f"--max-cycles must be a positive integer, not {r.max_cycles}")
    if r.calib_method is not None:
        try:
            parse_method(r.calib_method)
        except CalibMethodError as exc:
            raise InputError(str(exc)) from None
    shards.check_jobs(r.jobs)
    if r.jobs > 1 and any(getattr(r, name) for name in _WAVES):
        raise shards.ShardError(
            "a waveform traces one run, not JOBS shards; drop JOBS "
            "(WAVE_LAYER alone runs only its layer, from its checkpoint)"
        )


def check_files(request: Request) -> None:
    """MODEL (a file, not a zoo name), BUNDLE and a CONFIG file are regular files of bounded
    size (IMAGE and CALIB are checked where they are read: a folder is allowed there)."""
    r = request
    if r.bundle is not None:
        regular_file(r.bundle, "BUNDLE", "executable")
    if r.model is not None and r.model not in zoo.MODELS:
        path = Path(r.model)
        if path.suffix == ".onnx" or "/" in r.model or path.exists():
            regular_file(path, "MODEL", "model")
    if r.config is not None and r.config.endswith(".json"):
        regular_file(Path(r.config), "CONFIG", "config")


def check_early(request: Request) -> None:
    """Every check of this module, and the environment variables' values
    (:func:`sim.knobs.check_all`)."""
    knobs.check_all()
    check_options(request)
    check_numbers(request)
    check_files(request)

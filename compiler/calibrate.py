"""Calibration: run the original model on onnxruntime (fp32) and measure tensor ranges."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from arch import host_runtime

from . import calib_methods
from .errors import CompileError
from .ir import Graph
from .onnx.token_inputs import pack_token_inputs, token_inputs_of

__all__ = [
    "Ranges",
    "ATTENTION_COUNT",
    "DEFAULT_COUNT",
    "as_shape",
    "default_calibration",
    "default_count",
    "max_abs",
    "open_session",
    "ranges",
    "run_onnx",
    "run_session",
    "value_threshold",
]


#: Seeded inputs the default calibration draws for a model ...
DEFAULT_COUNT = 4
#: ... and for a model with attention: a token tensor holds few values per input (16-197 tokens),
#: so the largest of 4 inputs' values falls short of what a new input reaches, and a clipped
#: outlier in a residual stream or an attention score costs more than a coarser step
#: (measured: docs/calibration.md, "The default calibration of transformers").
ATTENTION_COUNT = 16


def default_count(model: onnx.ModelProto | None) -> int:
    """How many seeded inputs :func:`default_calibration` draws for ``model``:
    :data:`ATTENTION_COUNT` if it has attention (a Softmax whose output is no graph output),
    else :data:`DEFAULT_COUNT`."""
    if model is None:
        return DEFAULT_COUNT
    outputs = {o.name for o in model.graph.output}
    inner = (n for n in model.graph.node if n.op_type == "Softmax")
    return ATTENTION_COUNT if any(n.output[0] not in outputs for n in inner) else DEFAULT_COUNT


def default_calibration(
    graph_or_model: Graph | onnx.ModelProto, count: int | None = None, seed: int = 0
) -> list[np.ndarray]:
    """``count`` (default :func:`default_count`) seeded standard-normal float32 inputs shaped
    like the (single) graph input; for a model of token inputs, ``count`` seeded token inputs
    (ids in the vocabulary, masks with a padded tail:
    :meth:`~compiler.onnx.token_inputs.TokenInputs.default`).

    A symbolic batch dimension of an ONNX model counts as 1.
    """
    source = graph_or_model.source if isinstance(graph_or_model, Graph) else graph_or_model
    count = default_count(source) if count is None else count
    tokens = token_inputs_of(source) if source is not None else None
    if tokens is not None:
        return [tokens.default(seed + k)[0] for k in range(count)]
    if isinstance(graph_or_model, Graph):
        shape = graph_or_model.tensors[graph_or_model.inputs[0]].shape
    else:
        shape = model_input_shape(graph_or_model)
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(count)]


def model_input_shape(model: onnx.ModelProto) -> tuple[int, ...]:
    """The shape of the model's one input (integer token inputs: the packed ``tokens``)."""
    if any(i.type.tensor_type.elem_type != TensorProto.FLOAT for i in model.graph.input):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        model = pack_token_inputs(copy)
    inits = {t.name for t in model.graph.initializer}
    (x,) = [i for i in model.graph.input if i.name not in inits]
    dims = x.type.tensor_type.shape.dim
    shape = tuple(1 if axis == 0 else int(d.dim_value) for axis, d in enumerate(dims))
    if any(d < 1 for d in shape):
        raise CompileError(x.name, "graph input", f"shape {shape} is not static", "static shapes")
    return shape


def open_session(model: onnx.ModelProto | str | Path, extra: Sequence[str]) -> ort.InferenceSession:
    """An onnxruntime CPU session of ``model`` (basic optimizations only) that also outputs the
    tensors ``extra``; a model onnxruntime cannot load is a :class:`CompileError`."""
    proto = onnx.load(str(model)) if isinstance(model, str | Path) else model
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    host_runtime.readable(copy)  # the pinned onnx saves IR versions onnxruntime cannot read
    known = {vi.name: vi for vi in copy.graph.value_info}
    outputs = {o.name for o in copy.graph.output} | {i.name for i in copy.graph.input}
    for name in extra:
        if name not in outputs:
            vi = known.get(name) or helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
            copy.graph.output.append(vi)
            outputs.add(name)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    # Basic level only: the extended level fuses QDQ groups of already-quantized models into
    # int8 kernels, which are not the model's reference semantics (x86 u8s8 saturation).
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    try:
        return ort.InferenceSession(
            copy.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CompileError(None, "onnxruntime", f"cannot load the model: {first}") from None


def run_session(
    session: ort.InferenceSession, names: Sequence[str], x: np.ndarray
) -> dict[str, np.ndarray]:
    """The tensors ``names`` of one run of ``session`` on input ``x`` (fp32), by name."""
    feed = session.get_inputs()[0]
    feed_name = feed.name
    x = as_shape(x, feed.shape)
    wanted = list(dict.fromkeys(n for n in names if n != feed_name))
    if not wanted:  # (an empty list would make onnxruntime return every output)
        return {feed_name: np.asarray(x, np.float32)} if feed_name in names else {}
    try:
        values = host_runtime.run_bounded(session, wanted, {feed_name: np.asarray(x, np.float32)})
    except host_runtime.HostTimeout as exc:
        raise host_runtime.HostTimeout(f"the model's fp32 run (calibration) {exc}") from None
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CompileError(None, "onnxruntime", f"cannot run the model: {first}") from None
    out = {n: np.asarray(v) for n, v in zip(wanted, values, strict=True)}
    if feed_name in names:
        out[feed_name] = np.asarray(x, np.float32)
    return out


def as_shape(x: np.ndarray, shape: Sequence[int | str | None]) -> np.ndarray:
    """``x`` in the rank of ``shape`` where they differ by the unit height of a Conv1d net's
    input, which the IR holds as (1, C, 1, L) and ONNX as (1, C, L); else ``x`` unchanged."""
    x = np.asarray(x)
    if x.ndim == 4 and len(shape) == 3 and x.shape[2] == 1:
        return x[:, :, 0, :]
    if x.ndim == 3 and len(shape) == 4 and shape[2] == 1:
        return x[:, :, None, :]
    return x


def run_onnx(
    model: onnx.ModelProto | str | Path, x: np.ndarray, names: Sequence[str] = ()
) -> dict[str, np.ndarray]:
    """Run ``model`` on onnxruntime's CPU with input ``x``: its graph outputs plus the tensors
    ``names`` (exposed as extra outputs), by name."""
    session = open_session(model, names)
    wanted = [o.name for o in session.get_outputs()]
    return run_session(session, list(dict.fromkeys([*wanted, *names])), x)


def max_abs(
    model: onnx.ModelProto, names: Sequence[str], inputs: Sequence[np.ndarray]
) -> dict[str, float]:
    """Max |value| of each tensor ``names`` of ``model`` over all ``inputs`` (fp32 run)."""
    session = open_session(model, names)
    ranges = dict.fromkeys(names, 0.0)
    for x in inputs:
        for name, value in run_session(session, names, x).items():
            if value.dtype.kind not in "fbiu":
                raise CompileError(
                    name, "calibration", f"tensor is {value.dtype} in the ONNX model, not float"
                )
            value = value.astype(np.float32)  # masks and ids cross host steps as float
            if value.size:
                ranges[name] = max(ranges[name], float(np.max(np.abs(value))))
    return ranges


def ranges(
    model: onnx.ModelProto,
    names: Sequence[str],
    inputs: Sequence[np.ndarray],
    method: str = "minmax",
    bins: int = calib_methods.BINS,
) -> dict[str, float]:
    """The clip threshold T of each tensor ``names`` of ``model`` over all ``inputs`` (fp32
    runs) by ``method`` (:mod:`compiler.calib_methods`: ``minmax``, ``percentile[:P]``,
    ``entropy``, ``mse``). Besides min-max, a second pass histograms ``|x|`` into ``bins``
    bins over ``[0, max|x|]``."""
    try:
        name_, percentile = calib_methods.parse_method(method)
    except calib_methods.CalibMethodError as exc:
        raise CompileError(None, "calibration", str(exc)) from None
    amax = max_abs(model, names, inputs)
    if name_ == "minmax":
        return amax
    session = open_session(model, names)
    hists = {name: np.zeros(bins, np.int64) for name in names}
    for x in inputs:
        for name, value in run_session(session, names, x).items():
            if amax[name] > 0:
                hists[name] += np.histogram(np.abs(value), bins, (0.0, amax[name]))[0]
    return {name: _threshold(name_, percentile, hists[name], amax[name]) for name in names}


def _threshold(method: str, percentile: float | None, hist: np.ndarray, amax: float) -> float:
    """The clip threshold ``method`` chooses from the histogram of ``|x|`` over [0, amax]."""
    if amax <= 0:
        return amax
    if method == "percentile":
        assert percentile is not None
        return calib_methods.percentile_threshold(hist, amax, percentile)
    if method == "entropy":
        return calib_methods.entropy_threshold(hist, amax)
    return calib_methods.mse_threshold(hist, amax)


def value_threshold(
    value: np.ndarray, method: str = "minmax", bins: int = calib_methods.BINS
) -> float:
    """The clip threshold T of a constant tensor, by ``method`` over its own values (what
    :func:`ranges` gives a tensor whose calibration runs saw exactly these values)."""
    try:
        name_, percentile = calib_methods.parse_method(method)
    except calib_methods.CalibMethodError as exc:
        raise CompileError(None, "calibration", str(exc)) from None
    amax = float(np.max(np.abs(value))) if value.size else 0.0
    if name_ == "minmax" or amax <= 0:
        return amax
    hist = np.histogram(np.abs(value), bins, (0.0, amax))[0]
    return _threshold(name_, percentile, hist, amax)


class Ranges:
    """Clip thresholds of one model's tensors over one set of calibration inputs by one method,
    each measured once (:func:`ranges`) and kept across the host placement's attempts, which
    need the same tensors again (and a few more or fewer)."""

    def __init__(self) -> None:
        self.known: dict[str, float] = {}
        self.runs = 0  #: the onnxruntime calibrations made

    def of(
        self,
        model: onnx.ModelProto,
        names: Sequence[str],
        inputs: Sequence[np.ndarray],
        method: str = "minmax",
    ) -> dict[str, float]:
        """The thresholds of ``names``, measuring only those not measured before."""
        missing = [n for n in names if n not in self.known]
        if missing:
            self.known.update(ranges(model, missing, inputs, method))
            self.runs += 1
        return {n: self.known[n] for n in names}

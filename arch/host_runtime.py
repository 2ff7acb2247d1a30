"""Host ops: an ONNX model of the nodes the accelerator does not run, executed in fp32 by
onnxruntime - the same function for the reference and for a run's host steps, so a device
program after a host step gets exactly the input the reference gives it.

A session is made once per model (cached by its bytes) with one thread, so results do not
depend on thread scheduling. A run is bounded in time (:func:`set_time_bound`; the sim layer sets
it from ``COSIM_HOST_STEP_SECONDS``): onnxruntime runs on a thread of its own, stopped through its
``RunOptions.terminate`` flag when the bound passes or Ctrl-C arrives.
"""

from __future__ import annotations

import hashlib
import threading

import numpy as np
import onnx
import onnxruntime as ort

#: The IR version models are handed to onnxruntime with, at most: the pinned onnx saves newer
#: ones (14) than the pinned onnxruntime reads (13); the opsets, not the IR version, say what
#: the nodes compute.
IR_VERSION = 10

#: A host run's time bound (seconds) unless :func:`set_time_bound` gave another.
DEFAULT_TIME_BOUND_S = 300.0

_SESSIONS: dict[str, ort.InferenceSession] = {}
_BOUND = {"seconds": DEFAULT_TIME_BOUND_S}
_RUNNING: set[ort.RunOptions] = set()  # the options of every run under way (any thread)


def set_time_bound(seconds: float) -> None:
    """Stop every later host run that takes longer than ``seconds`` (:class:`HostTimeout`)."""
    if not seconds > 0:
        raise ValueError(f"a host run's time bound must be positive, not {seconds}")
    _BOUND["seconds"] = float(seconds)


def readable(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (changed in place) with its IR version lowered to :data:`IR_VERSION` if newer."""
    if model.ir_version > IR_VERSION:
        model.ir_version = IR_VERSION
    return model


def _readable_bytes(model: bytes) -> bytes:
    try:
        proto = onnx.ModelProto.FromString(model)
    except Exception:  # protobuf's DecodeError: let onnxruntime say what is wrong
        return model
    return readable(proto).SerializeToString() if proto.ir_version > IR_VERSION else model


class HostModelError(ValueError):
    """onnxruntime cannot load or run a host model."""


class HostTimeout(RuntimeError):
    """A host run took longer than its time bound and was stopped."""


class HostOutputInvalid(ValueError):
    """A host model's fp32 output, for the run's input, is not what its int8 codes can carry:
    those codes, and every layer after, would mean nothing."""


class HostOutputNotFinite(HostOutputInvalid):
    """A host model's fp32 output holds NaN or infinity for the run's input (a Log or Sqrt
    of a negative, a Reciprocal of 0)."""


class HostMaskNotBinary(HostOutputInvalid):
    """An additive attention mask the host computes holds a value that is neither 0 nor a
    masking value (<= -1e4 or -inf): the device's mask codes say only "keep" or "mask"."""


def session(model: bytes) -> ort.InferenceSession:
    """The onnxruntime session of a serialized ONNX model (cached); a newer IR version than
    onnxruntime reads is lowered (:func:`readable`)."""
    key = hashlib.sha256(model).hexdigest()
    if key not in _SESSIONS:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        try:
            _SESSIONS[key] = ort.InferenceSession(
                _readable_bytes(model), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own exception types
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise HostModelError(f"onnxruntime cannot run it: {first}") from None
    return _SESSIONS[key]


def run(model: bytes, feeds: dict[str, np.ndarray], fetch: str) -> np.ndarray:
    """Output ``fetch`` of ``model`` for fp32 ``feeds`` (input name -> array), within the time
    bound (:class:`HostTimeout` past it)."""
    sess = session(model)
    inputs = {i.name: np.ascontiguousarray(feeds[i.name], np.float32) for i in sess.get_inputs()}
    try:
        [out] = run_bounded(sess, [fetch], inputs)
    except HostTimeout:
        raise
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HostModelError(f"onnxruntime failed: {first}") from None
    return np.asarray(out)


def run_bounded(
    sess: ort.InferenceSession, fetches: list[str] | None, inputs: dict[str, np.ndarray]
) -> list[np.ndarray]:
    """``sess.run`` within the time bound (:class:`HostTimeout` past it): on a thread of its
    own while this one waits, so that the bound and Ctrl-C (delivered to the waiting thread)
    can set the run's terminate flag and end it."""
    seconds = _BOUND["seconds"]
    options = ort.RunOptions()
    options.log_severity_level = 4  # (its "terminate flag" error is ours to report)
    outcome: dict[str, object] = {}

    finished = threading.Event()  # (not Thread.join: on 3.11 an interrupted join forgets it)

    def work() -> None:
        try:
            outcome["values"] = sess.run(fetches, inputs, options)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            outcome["error"] = exc
        finally:
            finished.set()

    _RUNNING.add(options)
    threading.Thread(target=work, name="host run", daemon=True).start()
    try:
        finished.wait(seconds)
    except KeyboardInterrupt:  # Ctrl-C: every run under way stops (the reference's too)
        for running in list(_RUNNING):
            running.terminate = True
        raise
    finally:  # the bound passed, or Ctrl-C: stop onnxruntime before going on
        if not finished.is_set():
            options.terminate = True
            finished.wait()
        _RUNNING.discard(options)
    if "values" in outcome:
        return outcome["values"]  # type: ignore[return-value]
    if isinstance(outcome.get("error"), BaseException) and not options.terminate:
        raise outcome["error"]  # type: ignore[misc]
    raise HostTimeout(f"ran longer than its time bound of {seconds:g} s and was stopped")

"""Host ops: an ONNX model of the nodes the accelerator does not run, executed in fp32 by
onnxruntime - the same function for the reference and for a run's host steps, so a device
program after a host step gets exactly the input the reference gives it.

A session is made once per model (cached by its bytes) with one thread, so results do not
depend on thread scheduling.
"""

from __future__ import annotations

import hashlib

import numpy as np
import onnx
import onnxruntime as ort

#: The IR version models are handed to onnxruntime with, at most: the pinned onnx saves newer
#: ones (14) than the pinned onnxruntime reads (13); the opsets, not the IR version, say what
#: the nodes compute.
IR_VERSION = 10

_SESSIONS: dict[str, ort.InferenceSession] = {}


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


class HostOutputNotFinite(ValueError):
    """A host model's fp32 output holds NaN or infinity for the run's input (a Log or Sqrt
    of a negative, a Reciprocal of 0): its int8 codes, and every layer after, mean nothing."""


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
    """Output ``fetch`` of ``model`` for fp32 ``feeds`` (input name -> array)."""
    sess = session(model)
    inputs = {i.name: np.ascontiguousarray(feeds[i.name], np.float32) for i in sess.get_inputs()}
    try:
        [out] = sess.run([fetch], inputs)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HostModelError(f"onnxruntime failed: {first}") from None
    return np.asarray(out)

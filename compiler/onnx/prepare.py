"""The ONNX-level passes: the model read, checked and rewritten before its nodes are imported.

:data:`ONNX_PASSES` is the one ordered list; :func:`prepare` runs it over one
:class:`OnnxModel`. (A fixed batch N > 1 is made batch 1 before this, by
:func:`compiler.onnx.unbatch.unbatch` in :func:`compiler.compile.compile_model`, which keeps N.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import TensorProto

from ..errors import CompileError
from . import host_models, qoperator
from .channel_norm import norms_over_channels
from .class_token import fold_class_tokens
from .const_fold import fold_constant_nodes
from .finite import check_finite_constants
from .gather_views import gathers_as_reshapes
from .gelu_pattern import fuse_gelu
from .kv_cache_inputs import bind_empty_cache
from .norm_pattern import fuse_layer_norm
from .shape_inference import infer_shapes
from .state import opset_of
from .token_canon import canonicalize_tokens
from .token_inputs import pack_token_inputs
from .token_subsample import subsamples_as_pools

__all__ = ["MAX_OPSET", "MIN_OPSET", "ONNX_PASSES", "OnnxModel", "prepare", "read_model"]

#: Opsets of the default domain the handlers are written for; older models are converted.
MIN_OPSET, MAX_OPSET = 9, 21


@dataclass
class OnnxModel:
    """What the ONNX-level passes work on: the model, and a failure of strict shape inference
    (kept, so that the op handlers, which name the node and say what is supported, get the
    first word)."""

    proto: onnx.ModelProto
    inference_error: CompileError | None = None


def read_model(model: str | Path | onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` (a proto), or the model in the file ``model``."""
    if isinstance(model, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
        return proto
    if not isinstance(model, str | Path):
        raise CompileError(
            None, None, f"expected an ONNX file path or onnx.ModelProto, got {type(model).__name__}"
        )
    path = Path(model)
    if not path.is_file():
        raise CompileError(None, None, f"cannot read ONNX model '{path}': no such file")
    try:
        proto = onnx.load(str(path))
    except Exception as exc:  # protobuf DecodeError, external data errors, ...
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CompileError(None, None, f"'{path}' is not an ONNX model ({first})") from None
    if not proto.graph.node:
        raise CompileError(None, None, f"'{path}' is not an ONNX model with a graph (no nodes)")
    return proto


def prepare(proto: onnx.ModelProto) -> OnnxModel:
    """``proto`` through :data:`ONNX_PASSES`."""
    model = OnnxModel(proto)
    for _name, run in ONNX_PASSES:
        run(model)
    return model


# --------------------------------------------------------------------------- the passes


def _finite(model: OnnxModel) -> None:
    check_finite_constants(model.proto)


def _has_nodes(model: OnnxModel) -> None:
    if not model.proto.graph.node:
        raise CompileError(None, "graph", "has no nodes")


def _ir_version(model: OnnxModel) -> None:
    model.proto.ir_version = min(model.proto.ir_version, host_models.HOST_IR_VERSION)


def _opset(model: OnnxModel) -> None:
    opset = opset_of(model.proto)
    if opset >= MIN_OPSET:
        return
    try:
        model.proto = onnx.version_converter.convert_version(model.proto, 11)
    except Exception:
        raise CompileError(
            None,
            "model",
            f"opset {opset} is not supported and cannot be converted",
            f"opsets {MIN_OPSET}..{MAX_OPSET}",
        ) from None


def _qoperator(model: OnnxModel) -> None:
    model.proto = qoperator.rewrite(model.proto)


def _cache_inputs(model: OnnxModel) -> None:
    model.proto = bind_empty_cache(model.proto)


def _token_inputs(model: OnnxModel) -> None:
    model.proto = pack_token_inputs(model.proto)


def _batch(model: OnnxModel) -> None:
    graph = model.proto.graph
    inits = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in inits]
    if len(inputs) != 1:
        raise CompileError(None, "graph", f"has {len(inputs)} inputs", "exactly 1 input")
    _fix_batch(inputs[0], is_input=True)
    for out in graph.output:
        _fix_batch(out, is_input=False)


def _tokens(model: OnnxModel) -> None:
    model.proto = canonicalize_tokens(model.proto)


def _constants(model: OnnxModel) -> None:
    model.proto = fold_constant_nodes(model.proto)


def _shapes(model: OnnxModel) -> None:
    del model.proto.graph.value_info[:]
    try:
        model.proto = infer_shapes(model.proto, strict_mode=True)
        return
    except Exception as exc:
        first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        error = CompileError(None, "model", f"ONNX shape inference failed: {first}")
    try:
        model.proto = infer_shapes(model.proto)
    except Exception:
        raise error from None
    model.inference_error = error


def _gather_views(model: OnnxModel) -> None:
    model.proto = gathers_as_reshapes(model.proto)


def _token_subsamples(model: OnnxModel) -> None:
    model.proto = subsamples_as_pools(model.proto)


def _gelu(model: OnnxModel) -> None:
    model.proto = fuse_gelu(model.proto)


def _layer_norm(model: OnnxModel) -> None:
    model.proto = fuse_layer_norm(model.proto)


def _channel_norms(model: OnnxModel) -> None:
    model.proto = norms_over_channels(model.proto)


def _class_tokens(model: OnnxModel) -> None:
    model.proto = fold_class_tokens(model.proto)


#: The ONNX-level passes in order, each a function of the :class:`OnnxModel`.
ONNX_PASSES: tuple[tuple[str, Callable[[OnnxModel], None]], ...] = (
    ("finite", _finite),  # no NaN or infinity in a constant
    ("has_nodes", _has_nodes),  # a graph with at least one node
    ("ir_version", _ir_version),  # at most what the pinned onnxruntime reads (host models)
    ("opset", _opset),  # opsets below MIN_OPSET converted to 11
    ("qoperator", _qoperator),  # com.microsoft QLinear ops as DQ -> float op -> Q
    ("cache_inputs", _cache_inputs),  # a decoder's past_key_values bound empty: its prefill
    ("token_inputs", _token_inputs),  # integer inputs (ids, masks) as one fp32 input (1, k, T)
    ("batch", _batch),  # one fp32 input of static shape; a symbolic batch set to 1
    ("tokens", _tokens),  # torch's attention in the batch-first pattern (token_canon)
    ("constants", _constants),  # nodes of constant inputs as initializers (static shapes)
    ("shapes", _shapes),  # shape inference, strict (its failure kept) or else lenient
    ("gather_views", _gather_views),  # an in-order Gather of a flattened tensor as a Reshape
    ("token_subsamples", _token_subsamples),  # a strided pick of a token map as a 1x1 MaxPool
    ("gelu", _gelu),  # GELU chains as one com.microsoft node (after inference: keeps shapes)
    ("layer_norm", _layer_norm),  # decomposed LayerNorms as one LayerNormalization (the same)
    ("channel_norms", _channel_norms),  # LayerNorm2d (channels of a map) on its pixels as tokens
    ("class_tokens", _class_tokens),  # Concat(c, x) + p as Concat(c + p[:1], x + p[1:])
)


def _fix_batch(value: onnx.ValueInfoProto, *, is_input: bool) -> None:
    """Set a symbolic batch dimension to 1; reject other dynamic dims and batch != 1."""
    kind = "graph input" if is_input else "graph output"
    ttype = value.type.tensor_type
    if is_input and ttype.elem_type != TensorProto.FLOAT:
        dtype = TensorProto.DataType.Name(ttype.elem_type)
        raise CompileError(value.name, kind, f"dtype {dtype} is not supported", "FLOAT (fp32)")
    if not ttype.HasField("shape"):
        if is_input:
            raise CompileError(value.name, kind, "has no shape", "static shapes, batch 1")
        return
    for axis, dim in enumerate(ttype.shape.dim):
        if dim.HasField("dim_value") and dim.dim_value > 0:
            if axis == 0 and dim.dim_value != 1:
                raise CompileError(
                    value.name, kind, f"batch {dim.dim_value} is not supported", "batch 1"
                )
            continue
        if axis == 0:
            dim.Clear()
            dim.dim_value = 1
        elif is_input:
            what = f"'{dim.dim_param}'" if dim.dim_param else "unknown"
            raise CompileError(
                value.name,
                kind,
                f"dimension {axis} is dynamic ({what}) and cannot be fixed",
                "static shapes; only the batch may be symbolic (it is set to 1)",
            )
        else:
            dim.Clear()  # let shape inference fill it in

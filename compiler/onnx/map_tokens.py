"""Import of the moves between a map (1, C, H, W) and its pixels as tokens (1, H*W, C).

Exporters write them as two nodes; each pair becomes one view (a map's NHWC pixels are its
tokens' bytes, :mod:`arch.ops.views`):

- ``map_to_tokens``: ``Reshape`` to (1, C, H*W) then ``Transpose`` (0, 2, 1) (timm's
  ``x.flatten(2).transpose(1, 2)``), or ``Transpose`` (0, 2, 3, 1) then ``Reshape`` to
  (1, H*W, C);
- ``tokens_to_map``: ``Transpose`` (0, 2, 1) then ``Reshape`` to (1, C, H, W), or ``Reshape``
  to (1, H, W, C) then ``Transpose`` (0, 3, 1, 2).

The first node of a pair, read only by its partner, stands for nothing on its own: its value
is the view's input (``pending_views``), and the partner emits the view.

``Gather`` of one constant index along the tokens of (1, T, C) (a ViT's class token,
``x[:, 0]``) is the ``select_token`` view of that token's pixel.
"""

from __future__ import annotations

import onnx

from ..errors import CompileError
from .read import act, attrs_of, emit, only_reader, rank_of, shape_of
from .registry import handles
from .state import ImportState

__all__ = ["map_tokens_reshape", "map_tokens_transpose", "op_gather"]

_TO_TOKENS, _TO_MAP = "map_to_tokens", "tokens_to_map"


def _perm(node: onnx.NodeProto | None) -> tuple[int, ...]:
    if node is None or node.op_type != "Transpose":
        return ()
    return tuple(int(p) for p in attrs_of(node).get("perm", ()))


def _source(st: ImportState, value: str) -> tuple[str, tuple[int, ...]] | None:
    """The IR tensor behind ONNX ``value`` and its IR shape, if it is an activation."""
    if value not in st.alias or value in st.qview or value in st.pending_views:
        return None
    return st.alias[value], shape_of(st, st.alias[value])


def _first_half(st: ImportState, node: onnx.NodeProto, kind: str) -> bool:
    """``node`` is the first of a pair: its output stands for its input until the partner."""
    st.pending_views[node.output[0]] = (kind, 0)
    st.alias[node.output[0]] = st.alias[node.input[0]]
    return True


def _emit(st: ImportState, node: onnx.NodeProto, name: str, kind: str) -> bool:
    """The partner ``node`` of a pending first half: the view (its shapes were checked with
    the first half)."""
    x = st.alias[node.input[0]]
    if kind == _TO_TOKENS:
        _, c, h, w = shape_of(st, x)
        emit(st, node, name, _TO_TOKENS, [x], (1, h * w, 1, c))
        return True
    out = st.inferred[node.output[0]]
    c = shape_of(st, x)[3]
    emit(st, node, name, _TO_MAP, [x], (1, c, out[2], out[3]), {"size": (out[2], out[3])})
    return True


def _map_of(target: tuple[int, ...] | None, t: int, c: int) -> bool:
    """Whether ``target`` is a (1, C, H, W) map of ``t`` pixels of ``c`` channels."""
    return (
        target is not None
        and len(target) == 4
        and target[:2] == (1, c)
        and (target[2] * target[3] == t)
    )


def map_tokens_reshape(st: ImportState, node: onnx.NodeProto, name: str) -> bool:
    """A Reshape that is half of a map/tokens view: True if handled (see the module doc)."""
    value = node.input[0]
    pending = st.pending_views.get(value)
    if pending is not None and pending[0] in (_TO_TOKENS, _TO_MAP):
        return _emit(st, node, name, pending[0])
    source = _source(st, value)
    target = st.inferred.get(node.output[0])
    reader = only_reader(st, node.output[0])
    if source is None or target is None or reader is None:
        return False
    _, shape = source
    perm = _perm(reader)
    if rank_of(st, value) == 4 and perm == (0, 2, 1):
        _, c, h, w = shape
        return target == (1, c, h * w) and _first_half(st, node, _TO_TOKENS)
    if rank_of(st, value) == 3 and perm == (0, 3, 1, 2) and len(shape) == 4 and shape[2] == 1:
        _, t, _, c = shape
        ok = len(target) == 4 and _map_of((target[0], target[3], target[1], target[2]), t, c)
        return ok and reader.output[0] in st.inferred and _first_half(st, node, _TO_MAP)
    return False


def map_tokens_transpose(st: ImportState, node: onnx.NodeProto, name: str) -> bool:
    """A Transpose that is half of a map/tokens view: True if handled (see the module doc)."""
    value = node.input[0]
    perm = _perm(node)
    pending = st.pending_views.get(value)
    if pending is not None and pending[0] in (_TO_TOKENS, _TO_MAP):
        return _emit(st, node, name, pending[0])
    source = _source(st, value)
    reader = only_reader(st, node.output[0])
    if source is None or reader is None or reader.op_type != "Reshape":
        return False
    _, shape = source
    target = st.inferred.get(reader.output[0])
    if rank_of(st, value) == 4 and perm == (0, 2, 3, 1):
        _, c, h, w = shape
        return target == (1, h * w, c) and _first_half(st, node, _TO_TOKENS)
    if rank_of(st, value) == 3 and perm == (0, 2, 1) and len(shape) == 4 and shape[2] == 1:
        _, t, _, c = shape
        ok = _map_of(target, t, c) and reader.output[0] in st.inferred
        return ok and _first_half(st, node, _TO_MAP)
    return False


@handles("Gather")
def op_gather(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    """One token of (1, T, C): a ``select_token`` view (the host runs any other Gather)."""
    index = st.consts.get(node.input[1]) if len(node.input) > 1 else None
    axis = int(attrs_of(node).get("axis", 0))
    x = act(st, node, name, 0)
    shape = shape_of(st, x)
    rank = rank_of(st, node.input[0])
    if rank != 3 or axis % 3 != 1 or index is None or index.ndim != 0 or shape[2] != 1:
        by = "a computed index" if index is None else f"indices of shape {index.shape}"
        raise CompileError(
            name,
            node.op_type,
            f"Gather along axis {axis} of {shape} by {by} is not supported",
            "one constant index (a scalar) along the tokens of (1, T, C)",
        )
    i = int(index)
    if not -shape[1] <= i < shape[1]:
        raise CompileError(name, node.op_type, f"index {i} is outside {shape[1]} tokens")
    emit(st, node, name, "select_token", [x], (1, shape[3]), {"index": i % shape[1]})

"""Import of attention as exporters write it: the heads views and the MatMul of two activations.

Handlers (and the helpers MatMul, Mul and Reshape call) for these node patterns:

- ``Reshape`` of tokens (1, T, F) to (1, T, H, F/H) read only by ``Transpose`` perm (0, 2, 1, 3):
  one ``split_heads`` view (1, H, T, F/H); by ``Transpose`` perm (0, 2, 3, 1) - ``k`` transposed
  for ``q @ k^T`` - one ``split_heads_t`` view (1, H, F/H, T), whose producer stores k
  transposed; ``Transpose`` (0, 2, 1, 3) of (1, H, T, d) read only by ``Reshape`` to
  (1, T, H*d): one ``merge_heads`` view back to tokens. (The Reshape, or the Transpose, stands
  for nothing on its own: its value is the view's input, ``pending_views``.) Any other
  Transpose goes to the host, which moves codes exactly.
- ``MatMul`` of two activations (1, H, M, K) @ (1, H, K, N): ``batch_matmul``.
- ``Mul`` or ``Div`` of a ``batch_matmul`` output (read only there) by a scalar constant - the
  1/sqrt(d) of attention scores: folded into the product (param ``alpha``).
"""

from __future__ import annotations

import numpy as np
import onnx

from ..errors import CompileError
from .map_tokens import map_tokens_transpose
from .read import (
    act,
    attrs_of,
    emit,
    only_reader,
    shape_of,
    take_over,
)
from .registry import handles
from .state import ImportState

__all__ = ["batch_matmul", "heads_reshape", "scaled_product"]

_SPLIT_PERM = (0, 2, 1, 3)
_SPLIT_T_PERM = (0, 2, 3, 1)


def target_shape(
    st: ImportState, node: onnx.NodeProto, source: tuple[int, ...] = ()
) -> tuple[int, ...] | None:
    """A Reshape's target, its 0s and one -1 resolved against its input's shape (``source``
    when that input is not imported yet); None if not a constant."""
    shape = _constant(st, node.input[1]) if len(node.input) > 1 else None
    if shape is None:
        return None
    if node.input[0] in st.alias:
        source = shape_of(st, st.alias[node.input[0]])
    dims = [int(v) for v in shape.reshape(-1)]
    size = int(np.prod(source)) if source else 0
    dims = [source[i] if v == 0 and i < len(source) else v for i, v in enumerate(dims)]
    if dims.count(-1) == 1 and size:
        rest = int(np.prod([v for v in dims if v != -1]))
        dims[dims.index(-1)] = size // rest if rest else -1
    return tuple(dims)


def _constant(st: ImportState, value: str) -> np.ndarray | None:
    """``value`` known at compile time: imported already, or a ``Constant`` node's the importer
    has not reached (TorchScript writes a merge's target between its Transpose and Reshape)."""
    if value in st.consts:
        return st.consts[value]
    for node in st.proto.graph.node:
        if node.op_type == "Constant" and list(node.output) == [value]:
            for attr in node.attribute:
                if attr.name == "value" and attr.HasField("t"):
                    return onnx.numpy_helper.to_array(attr.t)
    return None


def heads_reshape(st: ImportState, node: onnx.NodeProto, name: str) -> bool:
    """A Reshape that is half of a heads view: True if handled (see the module doc)."""
    value = node.input[0]
    target = target_shape(st, node)
    if value in st.pending_views:  # Transpose (0, 2, 1, 3) then this: merge
        kind, heads = st.pending_views[value]
        x = st.alias[value]
        _, h, t, d = shape_of(st, x)
        if kind != "merge" or target != (1, t, h * d):
            raise CompileError(name, node.op_type, f"Reshape to {target} after a head merge")
        emit(st, node, name, "merge_heads", [x], (1, t, 1, h * d))
        return True
    if value not in st.alias or target is None or len(target) != 4:
        return False
    x = st.alias[value]
    shape = shape_of(st, x)
    reader = only_reader(st, node.output[0])
    if not (len(shape) == 4 and shape[2] == 1 and target[:2] == (1, shape[1])):
        return False
    heads, d = target[2], target[3]
    perm = tuple(attrs_of(reader).get("perm", ())) if reader is not None else ()
    if heads * d != shape[3] or reader is None or reader.op_type != "Transpose":
        return False
    if perm not in (_SPLIT_PERM, _SPLIT_T_PERM):
        return False  # Reshape and Transpose go to the host together
    st.pending_views[node.output[0]] = ("split", heads)
    st.alias[node.output[0]] = x
    return True


@handles("Transpose")
def op_transpose(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    if map_tokens_transpose(st, node, name):
        return
    perm = tuple(int(p) for p in attrs_of(node).get("perm", ()))
    value = node.input[0]
    if value in st.pending_views and perm in (_SPLIT_PERM, _SPLIT_T_PERM):
        _, heads = st.pending_views[value]
        x = st.alias[value]
        _, t, _, f = shape_of(st, x)
        if perm == _SPLIT_PERM:
            emit(st, node, name, "split_heads", [x], (1, heads, t, f // heads), {"heads": heads})
        else:
            emit(st, node, name, "split_heads_t", [x], (1, heads, f // heads, t), {"heads": heads})
        return
    x = act(st, node, name, 0)
    shape = shape_of(st, x)
    reader = only_reader(st, node.output[0])
    if perm == _SPLIT_PERM and len(shape) == 4 and reader is not None:
        merged = (1, shape[2], shape[1] * shape[3])
        source = (shape[0], shape[2], shape[1], shape[3])  # this Transpose's output
        target = target_shape(st, reader, source) if reader.op_type == "Reshape" else None
        if target == merged:
            st.pending_views[node.output[0]] = ("merge", shape[1])
            st.alias[node.output[0]] = x
            return
    raise CompileError(
        name,
        node.op_type,
        f"Transpose {perm} of {shape} is not a view of attention heads",
        "(0, 2, 1, 3) or, for k^T, (0, 2, 3, 1) after a Reshape of tokens to heads, and "
        "(0, 2, 1, 3) before a Reshape of heads to tokens (the host moves other data)",
    )


def batch_matmul(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    a, b = act(st, node, name, 0), act(st, node, name, 1)
    sa, sb = shape_of(st, a), shape_of(st, b)
    if len(sa) != 4 or len(sb) != 4 or sa[:2] != sb[:2] or sa[0] != 1 or sa[3] != sb[2]:
        raise CompileError(
            name,
            node.op_type,
            f"MatMul of activations {sa} and {sb} is not supported",
            "(1, H, M, K) @ (1, H, K, N)",
        )
    emit(st, node, name, "batch_matmul", [a, b], (*sa[:3], sb[3]), {"act": None})


def scaled_product(st: ImportState, node: onnx.NodeProto, name: str) -> bool:
    """Mul/Div of a batch_matmul or add output by a positive scalar constant (attention's
    1/sqrt(d); LeViT's ``(x + x_dist) / 2``): folded into its rescale; False if not that."""
    for i in (0, 1) if node.op_type == "Mul" else (0,):
        value, other = node.input[i], node.input[1 - i]
        c = st.consts.get(other)
        ir = next((n for n in st.nodes if n.output == st.alias.get(value)), None)
        if c is None or c.size != 1 or ir is None or ir.op not in ("batch_matmul", "add"):
            continue
        if st.uses[value] != 1 or not np.isfinite(c).all() or float(c.reshape(())) <= 0:
            continue
        factor = float(c.reshape(()))
        factor = 1.0 / factor if node.op_type == "Div" else factor
        alpha = float(ir.params.get("alpha", np.ones(1, np.float32))[0]) * factor
        take_over(st, ir, node, name, params={**ir.params, "alpha": np.array([alpha], np.float32)})
        return True
    return False


@handles("Div")
def op_div(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    if not scaled_product(st, node, name):
        raise CompileError(
            name,
            node.op_type,
            "Div is supported as the scale of a MatMul or an Add of two activations",
            "MatMul(q, k^T) / constant, (a + b) / constant",
        )

"""Pools and resampling: MaxPool, AveragePool (and their 1-D forms), ReduceMean over H and
W, GlobalAveragePool, nearest Resize/Upsample."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from arch.ops.check import window_output

from ..errors import CompileError
from ..ir import Node, Tensor
from .read import (
    act,
    attrs_of,
    const,
    emit,
    has_input,
    lift_1d,
    need_4d,
    no_extra_outputs,
    opt_const,
    rank_of,
)
from .registry import handles
from .state import ImportState
from .windows import pool_window

#: Largest nearest-upsampling factor per axis on the accelerator (one store per output
#: position of an input pixel; the executable format bounds it too).
MAX_UPSAMPLE = 64


@handles("MaxPool")
def op_max_pool(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    no_extra_outputs(st, node, name, "an Indices")
    pool(st, node, name, "maxpool")


@handles("AveragePool")
def op_average_pool(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    pool(st, node, name, "avgpool")


def pool(st: ImportState, node: onnx.NodeProto, name: str, op: str) -> None:
    if rank_of(st, node.input[0]) == 3:  # MaxPool1d / AvgPool1d: height 1
        node = lift_1d(st, node)
    x = act(st, node, name, 0, int8=None if op == "maxpool" else False)
    xs = need_4d(st, node, name, x)
    attrs = attrs_of(node)
    if "kernel_shape" not in attrs:
        raise CompileError(name, node.op_type, "kernel_shape is missing")
    k, s, pads = pool_window(st, node, name, xs, tuple(attrs["kernel_shape"]))
    ir_attrs: dict[str, Any] = {"kernel": k, "stride": s, "pads": pads}
    if op == "maxpool" and (max(pads[0], pads[2]) >= k[0] or max(pads[1], pads[3]) >= k[1]):
        raise CompileError(name, node.op_type, f"pads {pads} must be smaller than the kernel {k}")
    if op == "avgpool":
        include = int(attrs.get("count_include_pad", 0))
        if any(pads) and not include:
            raise CompileError(
                name,
                node.op_type,
                f"pads {pads} with count_include_pad=0 are not supported",
                "pads 0, or count_include_pad=1",
            )
        ir_attrs["count_include_pad"] = include
    try:
        out = (xs[0], xs[1], *window_output(xs[2:], k, s, pads))
    except ValueError as exc:
        raise CompileError(name, node.op_type, str(exc)) from None
    emit(st, node, name, op, [x], out, ir_attrs)


@handles("ReduceMean")
def op_reduce_mean(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    """A mean over H and W is a global average pool (how torch exports one); so is a mean
    over the tokens of (1, T, C) (LeViT's head), of the tokens viewed as a (1, C, T, 1) map."""
    x = act(st, node, name, 0)
    xs = need_4d(st, node, name, x)
    attrs = attrs_of(node)
    if has_input(node, 1):
        axes = [int(a) for a in const(st, node, name, 1, "axes").reshape(-1)]
    else:
        axes = [int(a) for a in attrs.get("axes", [])]
    if rank_of(st, node.input[0]) == 3 and xs[2] == 1 and [a % 3 for a in axes] == [1]:
        x, xs = _tokens_as_map(st, name, x, xs)
    elif sorted(a % 4 for a in axes) != [2, 3]:
        raise CompileError(
            name, node.op_type, f"axes {axes} are not supported",
            "axes [2, 3] of a map, or [1] of tokens (1, T, C)",
        )  # fmt: skip
    if attrs.get("keepdims", 1) and rank_of(st, node.input[0]) == 3:  # (1, 1, C): a token
        out = node.output[0]  # the pool keeps the ONNX name (calibration measures it there)
        token = st.unique(f"{out}#tokens")
        st.nodes.append(Node(name, "global_avgpool", [x], out, {}, {}, [name]))
        st.tensors[out] = Tensor(out, (1, xs[1], 1, 1))
        st.nodes.append(
            Node(st.unique(f"{name}#tokens"), "map_to_tokens", [out], token, {}, {}, [name])
        )
        st.tensors[token] = Tensor(token, (1, 1, 1, xs[1]))
        st.alias[out] = token
        return
    if attrs.get("keepdims", 1):
        emit(st, node, name, "global_avgpool", [x], (1, xs[1], 1, 1))
        return
    # The pool's output keeps the ONNX name (calibration measures it there); a flatten
    # gives the (1, C) the model's consumers read.
    out = node.output[0]
    flat = st.unique(f"{out}#flat")
    st.nodes.append(Node(name, "global_avgpool", [x], out, {}, {}, [name]))
    st.tensors[out] = Tensor(out, (1, xs[1], 1, 1))
    st.nodes.append(Node(st.unique(f"{name}#flatten"), "flatten", [out], flat, {}, {}, [name]))
    st.tensors[flat] = Tensor(flat, (1, xs[1]))
    st.alias[out] = flat


def _tokens_as_map(
    st: ImportState, name: str, x: str, xs: tuple[int, ...]
) -> tuple[str, tuple[int, ...]]:
    """Tokens (1, T, 1, C) as the map (1, C, T, 1) of the same bytes (a view)."""
    _, t, _, c = xs
    viewed = st.unique(f"{x}#map")
    st.nodes.append(
        Node(st.unique(f"{name}#map"), "tokens_to_map", [x], viewed, {"size": (t, 1)}, {}, [name])
    )
    st.tensors[viewed] = Tensor(viewed, (1, c, t, 1))
    return viewed, (1, c, t, 1)


@handles("GlobalAveragePool")
def op_global_average_pool(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    x = act(st, node, name, 0)
    xs = need_4d(st, node, name, x)
    emit(st, node, name, "global_avgpool", [x], (1, xs[1], 1, 1))


@handles("Resize", "Upsample")
def op_resize(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    """Nearest upsampling by integer factors, in the coordinate modes where it is
    ``out[y, x] = in[y // sh, x // sw]`` (torch's nn.Upsample and the ONNX defaults)."""
    x = act(st, node, name, 0, int8=None)
    xs = need_4d(st, node, name, x)
    attrs = attrs_of(node)
    op = node.op_type
    if attrs.get("mode", "nearest") != "nearest":
        raise CompileError(name, op, f"mode {attrs.get('mode')!r} is not supported", "nearest")
    scales: np.ndarray | None
    sizes: np.ndarray | None = None
    if node.op_type == "Upsample" or st.opset < 11:
        scales = const(st, node, name, 1, "scales")
        coords, rounding = "asymmetric", "floor"
    else:
        scales = opt_const(st, node, name, 2, "scales")
        sizes = opt_const(st, node, name, 3, "sizes")
        coords = attrs.get("coordinate_transformation_mode", "half_pixel")
        rounding = attrs.get("nearest_mode", "round_prefer_floor")
        if attrs.get("antialias", 0) or "axes" in attrs:
            raise CompileError(name, op, "antialias or axes are not supported")
    if scales is not None and scales.size:
        factors = [float(v) for v in scales.reshape(-1)]
    elif sizes is not None and sizes.size:
        factors = [int(n) / d for n, d in zip(sizes.reshape(-1), xs, strict=False)]
    else:
        raise CompileError(name, op, "has neither scales nor sizes")
    if (
        len(factors) != 4
        or factors[:2] != [1.0, 1.0]
        or any(f < 1 or f > MAX_UPSAMPLE or f != int(f) for f in factors[2:])
    ):
        raise CompileError(
            name,
            op,
            f"scales {factors} are not supported",
            f"[1, 1, sh, sw], integers 1..{MAX_UPSAMPLE}",
        )
    halves = ("half_pixel", "pytorch_half_pixel")
    exact = (coords == "asymmetric" and rounding == "floor") or (
        coords in halves and rounding in ("round_prefer_floor", "round_prefer_ceil")
    )
    if not exact:
        raise CompileError(
            name,
            op,
            f"coordinate mode {coords} with nearest_mode {rounding} is not supported",
            "asymmetric with floor, or half_pixel with rounding",
        )
    sh, sw = int(factors[2]), int(factors[3])
    out = (1, xs[1], xs[2] * sh, xs[3] * sw)
    emit(st, node, name, "upsample", [x], out, {"scale": (sh, sw)})

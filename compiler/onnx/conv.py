"""Convolutions: Conv (and Conv1d), ConvTranspose as a 1x1 conv and a depth_to_space,
QLinearConv, ConvInteger."""

from __future__ import annotations

import numpy as np
import onnx

from arch.ops.check import window_output

from ..errors import CompileError
from ..ir import Node, Tensor
from .qdq_params import (
    act_zero_point,
    bias_params,
    channel_scale,
    check_zero_point,
    float_weight,
    int8_weight,
    int_bias,
    integer_op_inputs,
    qlinear_output,
    scale_const,
    set_scale,
    start_pending,
)
from .read import (
    act,
    attrs_of,
    emit,
    lift_1d,
    need_4d,
    rank_of,
)
from .registry import handles
from .state import ImportState, QConst
from .windows import conv_window


def conv_node(
    st: ImportState,
    node: onnx.NodeProto,
    name: str,
    x: str,
    w: np.ndarray,
    params: dict[str, np.ndarray],
) -> Node:
    xs = need_4d(st, node, name, x)
    group = int(attrs_of(node).get("group", 1))
    if group < 1 or w.shape[0] % group:
        raise CompileError(
            name,
            node.op_type,
            f"group {group} does not divide the {w.shape[0]} output channels",
            "a group count dividing the input and output channels",
        )
    if w.shape[1] * group != xs[1]:
        raise CompileError(
            name, node.op_type, f"weight {w.shape} does not fit input channels {xs[1]}"
        )
    k, s, pads, dilation = conv_window(st, node, name, xs, w.shape[2:])
    try:
        out = (xs[0], int(w.shape[0]), *window_output(xs[2:], k, s, pads, dilation))
    except ValueError as exc:
        raise CompileError(name, node.op_type, str(exc)) from None
    attrs = {
        "kernel": k,
        "stride": s,
        "pads": pads,
        "dilation": dilation,
        "group": group,
        "act": None,
    }
    return emit(st, node, name, "conv", [x], out, attrs, params)


@handles("Conv")
def op_conv(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    if rank_of(st, node.input[0]) == 3:  # Conv1d: a 2-D conv of height 1
        node = lift_1d(st, node, weight=1)
    x = act(st, node, name, 0)
    need_4d(st, node, name, x)
    w, q = float_weight(st, node, name, 1, 4)
    o = int(w.shape[0])
    params = {"weight": w, **bias_params(st, node, name, 2, o)}
    if q is not None:
        params["weight_q"] = q.q.astype(np.int8)
        params["weight_scale"] = channel_scale(name, node.op_type, q, 0, o)
    conv_node(st, node, name, x, w, params)


@handles("ConvTranspose")
def op_conv_transpose(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    """Kernel = stride, no padding (U-Net's up-convolution): every input pixel writes its
    own s*s output block, so it is a 1x1 conv into s*s groups of O channels and a
    depth_to_space that stores each group at its position. Overlapping windows (kernel !=
    stride) and groups go to the host."""
    op = node.op_type
    if rank_of(st, node.input[0]) == 3:  # ConvTranspose1d: height 1
        node = lift_1d(st, node, weight=1)
    x = act(st, node, name, 0)
    xs = need_4d(st, node, name, x)
    w, q = float_weight(st, node, name, 1, 4)
    attrs = attrs_of(node)
    c, o, kh, kw = (int(v) for v in w.shape)
    k = (kh, kw)
    s = tuple(int(v) for v in attrs.get("strides", (1, 1)))
    group = int(attrs.get("group", 1))
    if group != 1:
        raise CompileError(name, op, f"group {group} is not supported", "group 1")
    if c != xs[1]:
        raise CompileError(name, op, f"weight {w.shape} does not fit input channels {xs[1]}")
    rest = {
        "pads": tuple(attrs.get("pads", (0, 0, 0, 0))),
        "dilations": tuple(attrs.get("dilations", (1, 1))),
        "output_padding": tuple(attrs.get("output_padding", (0, 0))),
        "auto_pad": attrs.get("auto_pad", "NOTSET"),
    }
    plain = {"pads": (0,) * 4, "dilations": (1, 1), "output_padding": (0, 0)}
    odd = {key: v for key, v in rest.items() if v != plain.get(key, v)}
    if rest["auto_pad"] not in ("NOTSET", "VALID"):
        odd["auto_pad"] = rest["auto_pad"]
    if s != k or odd:
        what = f"kernel {k}, strides {s}" + "".join(f", {a} {v}" for a, v in odd.items())
        raise CompileError(
            name,
            op,
            f"{what}: overlapping or padded windows have no array mapping",
            "kernel = strides, no pads, dilation 1, no output_padding",
        )
    sh, sw = s
    # out[o, y*sh + a, x*sw + b] = sum_c W[c, o, a, b] x[c, y, x]: group g = a*sw + b of a
    # 1x1 conv with weight W[:, :, a, b].T, then depth_to_space (DCR order).
    weight = np.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(sh * sw * o, c, 1, 1))
    bias = bias_params(st, node, name, 2, o)
    params: dict[str, np.ndarray] = {"weight": weight}
    params |= {key: np.tile(v, sh * sw) for key, v in bias.items()}
    if q is not None:
        wq = q.q.transpose(2, 3, 1, 0).reshape(sh * sw * o, c, 1, 1)
        params["weight_q"] = np.ascontiguousarray(wq).astype(np.int8)
        params["weight_scale"] = np.tile(channel_scale(name, op, q, 1, o), sh * sw)
    out = node.output[0]
    grouped = st.unique(f"{out}#groups")
    conv_attrs = {
        "kernel": (1, 1),
        "stride": (1, 1),
        "pads": (0, 0, 0, 0),
        "dilation": (1, 1),
        "group": 1,
        "act": None,
    }
    st.nodes.append(Node(name, "conv", [x], grouped, conv_attrs, params, [name]))
    st.tensors[grouped] = Tensor(grouped, (1, sh * sw * o, xs[2], xs[3]))
    shuffle = st.unique(f"{name}#interleave")
    ir = emit(st,
        node, shuffle, "depth_to_space", [grouped], (1, o, xs[2] * sh, xs[3] * sw),
        {"block": (sh, sw)},
    )  # fmt: skip
    ir.onnx_nodes = [name]


@handles("QLinearConv")
def op_qlinear_conv(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    x = act(st, node, name, 0, int8=True)
    x_zp = act_zero_point(st, node, name, 2, "x_zero_point", node.input[0])
    set_scale(st, node, name, x, scale_const(st, node, name, 1, "x_scale"), x_zp)
    wq = int8_weight(st, node, name, 3, 4, "int8 4-D weight")
    o = int(wq.shape[0])
    ws = scale_const(st, node, name, 4, "w_scale")
    check_zero_point(st, node, name, 5, "w_zero_point")
    ys = scale_const(st, node, name, 6, "y_scale")
    y_zp = act_zero_point(st, node, name, 7, "y_zero_point")
    wscale = channel_scale(name, node.op_type, QConst(wq, ws, 0), 0, o)
    w = (wq.astype(np.float32) * wscale[:, None, None, None]).astype(np.float32)
    params = {"weight": w, "weight_q": wq, "weight_scale": wscale}
    params |= int_bias(st, node, name, 8, o, wscale * np.float32(st.tensors[x].scale or 1))
    ir = conv_node(st, node, name, x, w, params)
    qlinear_output(st, node, name, ir.output, ys, y_zp)


@handles("ConvInteger")
def op_conv_integer(st: ImportState, node: onnx.NodeProto, name: str) -> None:
    zero_points = ("x_zero_point", "w_zero_point")
    x, wq = integer_op_inputs(st, node, name, zero_points, 4, "int8 4-D weight")
    o = int(wq.shape[0])
    params = {
        "weight": wq.astype(np.float32),
        "bias": np.zeros(o, np.float32),
        "weight_q": wq,
        "weight_scale": np.ones(o, np.float32),
    }
    ir = conv_node(st, node, name, x, wq.astype(np.float32), params)
    start_pending(st, node, name, ir, x)

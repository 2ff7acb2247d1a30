"""Token graphs as timm and torch export them, for the data-movement tests: a ViT-like block
with NCHW <-> tokens moves, layer scale, a class token and position embeddings; a BN1d; a gated
Mul. Seeded random weights at the scale of the activations."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from tests.onnx_graphs import make_model

__all__ = ["bn1d", "gated_mlp", "timm_vit_block"]


def _linear(nodes, inits, rng, name: str, x: str, fin: int, fout: int) -> str:
    inits[f"{name}.w"] = (rng.normal(0, 1 / np.sqrt(fin), (fin, fout))).astype(np.float32)
    inits[f"{name}.b"] = rng.normal(0, 0.1, fout).astype(np.float32)
    nodes.append(helper.make_node("MatMul", [x, f"{name}.w"], [f"{name}.mm"], name=f"{name}.mm"))
    nodes.append(
        helper.make_node("Add", [f"{name}.mm", f"{name}.b"], [f"{name}.y"], name=f"{name}.add")
    )
    return f"{name}.y"


def timm_vit_block(size: int = 16, patch: int = 4, dim: int = 32, seed: int = 0) -> onnx.ModelProto:
    """Patch Conv, NCHW -> tokens (Reshape, Transpose), class token Concat, position Add, an MLP
    with a layer-scale Mul and a residual, tokens -> NCHW for a Conv (hybrid models), and the
    class token's output by Gather into a Gemm head."""
    rng = np.random.default_rng(seed)
    grid = size // patch
    tokens = grid * grid
    inits = {
        "patch.w": rng.normal(0, 1 / np.sqrt(3 * patch * patch), (dim, 3, patch, patch)),
        "patch.b": rng.normal(0, 0.1, dim),
        "flat": np.array([1, dim, tokens], np.int64),
        "cls": rng.normal(0, 0.5, (1, 1, dim)),
        "pos": rng.normal(0, 0.3, (1, tokens + 1, dim)),
        "gamma": rng.uniform(0.1, 1.0, dim),
        "grid": np.array([1, dim, grid, grid], np.int64),
        "conv.w": rng.normal(0, 1 / np.sqrt(dim), (dim, dim, 1, 1)),
        "zero": np.array(0, np.int64),
        "head.w": rng.normal(0, 1 / np.sqrt(dim), (10, dim)),
        "head.b": rng.normal(0, 0.1, 10),
    }
    inits = {k: v if v.dtype == np.int64 else v.astype(np.float32) for k, v in inits.items()}
    node = helper.make_node
    nodes = [
        node("Conv", ["x", "patch.w", "patch.b"], ["p"], name="patch", strides=[patch, patch],
             kernel_shape=[patch, patch]),
        node("Reshape", ["p", "flat"], ["pf"], name="to_tokens"),
        node("Transpose", ["pf"], ["t"], name="to_tokens_t", perm=[0, 2, 1]),
        node("Concat", ["cls", "t"], ["tc"], name="cls_concat", axis=1),
        node("Add", ["tc", "pos"], ["x0"], name="pos_add"),
    ]  # fmt: skip
    h = _linear(nodes, inits, rng, "fc1", "x0", dim, 2 * dim)
    nodes.append(node("Relu", [h], ["h1"], name="act"))
    h = _linear(nodes, inits, rng, "fc2", "h1", 2 * dim, dim)
    nodes += [
        node("Mul", [h, "gamma"], ["ls"], name="layer_scale"),
        node("Add", ["x0", "ls"], ["x1"], name="residual"),
        node("Gather", ["x1", "zero"], ["c"], name="cls_select", axis=1),
        node("Gemm", ["c", "head.w", "head.b"], ["y"], name="head", transB=1),
    ]
    return make_model(nodes, [1, 3, size, size], inits)


def bn1d(tokens: int = 16, dim: int = 32, seed: int = 0, flat: bool = False) -> onnx.ModelProto:
    """A linear layer, then BatchNorm1d over its channels as LeViT writes it: tokens
    transposed to (1, C, T), BatchNormalization, transposed back; ``flat``: flattened to
    (T, C) and reshaped back (LeViT's ``Linear`` + ``BatchNorm1d`` on ``x.flatten(0, 1)``)."""
    rng = np.random.default_rng(seed)
    inits: dict[str, np.ndarray] = {
        "gamma": rng.uniform(0.5, 1.5, dim).astype(np.float32),
        "beta": rng.normal(0, 0.2, dim).astype(np.float32),
        "mean": rng.normal(0, 0.2, dim).astype(np.float32),
        "var": rng.uniform(0.5, 2.0, dim).astype(np.float32),
    }
    nodes: list[onnx.NodeProto] = []
    h = _linear(nodes, inits, rng, "fc", "x", dim, dim)
    if flat:
        inits["back"] = np.array([1, tokens, dim], np.int64)
        into = helper.make_node("Flatten", [h], ["ht"], name="to_rows", axis=2)
        out = helper.make_node("Reshape", ["bn", "back"], ["bt"], name="to_tokens")
    else:
        into = helper.make_node("Transpose", [h], ["ht"], name="to_channels", perm=[0, 2, 1])
        out = helper.make_node("Transpose", ["bn"], ["bt"], name="to_tokens", perm=[0, 2, 1])
    nodes += [
        into,
        helper.make_node(
            "BatchNormalization", ["ht", "gamma", "beta", "mean", "var"], ["bn"], name="bn1d"
        ),
        out,
    ]
    _linear(nodes, inits, rng, "out", "bt", dim, dim)
    nodes.append(helper.make_node("Identity", ["out.y"], ["y"], name="y"))
    return make_model(nodes, [1, tokens, dim], inits)


def gated_mlp(tokens: int = 16, dim: int = 32, seed: int = 0) -> onnx.ModelProto:
    """A gated MLP: Mul of two projections of the same tokens (one through Sigmoid)."""
    rng = np.random.default_rng(seed)
    inits: dict[str, np.ndarray] = {}
    nodes: list[onnx.NodeProto] = []
    a = _linear(nodes, inits, rng, "up", "x", dim, 2 * dim)
    b = _linear(nodes, inits, rng, "gate", "x", dim, 2 * dim)
    nodes += [
        helper.make_node("Sigmoid", [b], ["gs"], name="gate_act"),
        helper.make_node("Mul", [a, "gs"], ["m"], name="gate_mul"),
    ]
    _linear(nodes, inits, rng, "down", "m", 2 * dim, dim)
    nodes.append(helper.make_node("Identity", ["down.y"], ["y"], name="y"))
    return make_model(nodes, [1, tokens, dim], inits)


def map_token_round_trip(
    size: int = 4, dim: int = 32, timm_form: bool = True, seed: int = 0, head: bool = False
) -> onnx.ModelProto:
    """Conv -> tokens -> linear layer -> map -> Conv -> tokens -> linear layer, a hybrid
    model's moves: timm's Reshape + Transpose (0, 2, 1) pairs (``timm_form``), or the NHWC
    pairs Transpose (0, 2, 3, 1) + Reshape and Reshape + Transpose (0, 3, 1, 2). With
    ``head``: a layer scale on the first linear layer, and the last token (Gather) into a Gemm."""
    rng = np.random.default_rng(seed)
    t = size * size
    inits: dict[str, np.ndarray] = {
        "c1.w": rng.normal(0, 1 / np.sqrt(27), (dim, 3, 3, 3)).astype(np.float32),
        "c2.w": rng.normal(0, 1 / np.sqrt(9 * dim), (dim, dim, 3, 3)).astype(np.float32),
        "flat": np.array([1, dim, t], np.int64),
        "seq": np.array([1, t, dim], np.int64),
        "map": np.array([1, dim, size, size], np.int64),
        "nhwc": np.array([1, size, size, dim], np.int64),
    }
    node = helper.make_node
    nodes: list[onnx.NodeProto] = [
        node("Conv", ["x", "c1.w"], ["m1"], name="c1", pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    ]

    def to_tokens(m: str, out: str) -> None:
        if timm_form:
            nodes.append(node("Reshape", [m, "flat"], [f"{out}.r"], name=f"{out}.reshape"))
            nodes.append(node("Transpose", [f"{out}.r"], [out], name=out, perm=[0, 2, 1]))
        else:
            nodes.append(node("Transpose", [m], [f"{out}.t"], name=f"{out}.t", perm=[0, 2, 3, 1]))
            nodes.append(node("Reshape", [f"{out}.t", "seq"], [out], name=out))

    to_tokens("m1", "t1")
    h = _linear(nodes, inits, rng, "fc1", "t1", dim, dim)
    if head:
        inits["gamma"] = rng.uniform(0.1, 1.0, dim).astype(np.float32)
        nodes.append(node("Mul", [h, "gamma"], ["fc1.ls"], name="fc1.layer_scale"))
        h = "fc1.ls"
    if timm_form:
        nodes.append(node("Transpose", [h], ["back.t"], name="back.t", perm=[0, 2, 1]))
        nodes.append(node("Reshape", ["back.t", "map"], ["m2"], name="back"))
    else:
        nodes.append(node("Reshape", [h, "nhwc"], ["back.r"], name="back.r"))
        nodes.append(node("Transpose", ["back.r"], ["m2"], name="back", perm=[0, 3, 1, 2]))
    nodes.append(
        node("Conv", ["m2", "c2.w"], ["m3"], name="c2", pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    )
    nodes.append(node("Relu", ["m3"], ["m4"], name="c2.relu"))
    to_tokens("m4", "t2")
    _linear(nodes, inits, rng, "fc2", "t2", dim, dim)
    if not head:
        nodes.append(node("Identity", ["fc2.y"], ["y"], name="y"))
        return make_model(nodes, [1, 3, size, size], inits)
    inits["last"] = np.array(t - 1, np.int64)
    inits["head.w"] = rng.normal(0, 1 / np.sqrt(dim), (10, dim)).astype(np.float32)
    inits["head.b"] = rng.normal(0, 0.1, 10).astype(np.float32)
    nodes.append(node("Gather", ["fc2.y", "last"], ["c"], name="select", axis=1))
    nodes.append(node("Gemm", ["c", "head.w", "head.b"], ["y"], name="head", transB=1))
    return make_model(nodes, [1, 3, size, size], inits)

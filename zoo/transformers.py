"""ViT- and BERT-style encoders as ONNX graphs with seeded random weights, in the node patterns
``torch.onnx.export`` gives a hand-written block (opset 17): LayerNormalization, linear layers
as MatMul + Add of the bias, heads split by Reshape + Transpose, ``MatMul(q, k^T)`` scaled by a
Mul, Softmax over the last axis, ``MatMul(attention, v)``, heads merged by Transpose + Reshape,
GELU as its Erf form, residual Adds.
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from ._graph import GraphBuilder

__all__ = ["bert", "encoder_block", "vit"]

LN_EPSILON = 1e-6


def _layer_norm(g: GraphBuilder, name: str, x: str, width: int) -> str:
    gamma = g.param(f"{name}.weight", g.rng.uniform(0.8, 1.2, width))
    beta = g.param(f"{name}.bias", g.rng.normal(0.0, 0.05, width))
    return g.node("LayerNormalization", name, [x, gamma, beta], axis=-1, epsilon=LN_EPSILON)


def _linear(g: GraphBuilder, name: str, x: str, fin: int, fout: int, gain: float = 1.0) -> str:
    """torch's nn.Linear on a (1, tokens, fin) tensor: MatMul by W.T (fin, fout), Add bias."""
    weight = g.param(f"{name}.weight", g.he_normal((fin, fout), fin) * (gain / math.sqrt(2.0)))
    bias = g.param(f"{name}.bias", g.fan_in_uniform(fout, fin))
    return g.node("Add", f"{name}.add", [g.node("MatMul", f"{name}.matmul", [x, weight]), bias])


def _shape(g: GraphBuilder, name: str, dims: list[int]) -> str:
    shape = np.asarray(dims, dtype=np.int64)
    g.initializers.append(onnx.numpy_helper.from_array(shape, name))
    return name


def _gelu(g: GraphBuilder, name: str, x: str) -> str:
    """Exact GELU as torch exports it: x * 0.5 * (1 + erf(x / sqrt(2)))."""
    scaled = g.node("Div", f"{name}.div", [x, g.param(f"{name}.sqrt2", np.float32(math.sqrt(2)))])
    erf = g.node("Erf", f"{name}.erf", [scaled])
    one = g.node("Add", f"{name}.add", [erf, g.param(f"{name}.one", np.float32(1.0))])
    product = g.node("Mul", f"{name}.mul", [x, one])
    return g.node("Mul", f"{name}.half", [product, g.param(f"{name}.half_c", np.float32(0.5))])


def encoder_block(
    g: GraphBuilder, name: str, x: str, tokens: int, hidden: int, heads: int, mlp: int
) -> str:
    """Pre-norm encoder block: x + attn(LN(x)), then + MLP(LN(.)) with GELU."""
    head = hidden // heads
    y = _layer_norm(g, f"{name}.norm1", x, hidden)
    split = _shape(g, f"{name}.attn.split_shape", [1, tokens, heads, head])
    parts = []
    for which in ("q", "k", "v"):
        proj = _linear(g, f"{name}.attn.{which}", y, hidden, hidden)
        shaped = g.node("Reshape", f"{name}.attn.{which}.reshape", [proj, split])
        perm = [0, 2, 3, 1] if which == "k" else [0, 2, 1, 3]  # k arrives transposed
        parts.append(g.node("Transpose", f"{name}.attn.{which}.transpose", [shaped], perm=perm))
    q, k_t, v = parts
    scores = g.node("MatMul", f"{name}.attn.qk", [q, k_t])
    scale = g.param(f"{name}.attn.scale", np.float32(1.0 / math.sqrt(head)))
    scores = g.node("Mul", f"{name}.attn.scale_mul", [scores, scale])
    attn = g.node("Softmax", f"{name}.attn.softmax", [scores], axis=-1)
    context = g.node("MatMul", f"{name}.attn.av", [attn, v])
    merged = g.node("Transpose", f"{name}.attn.merge", [context], perm=[0, 2, 1, 3])
    flat = _shape(g, f"{name}.attn.merge_shape", [1, tokens, hidden])
    merged = g.node("Reshape", f"{name}.attn.merge_reshape", [merged, flat])
    x = g.add(f"{name}.add1", x, _linear(g, f"{name}.attn.proj", merged, hidden, hidden, 0.5))
    y = _layer_norm(g, f"{name}.norm2", x, hidden)
    y = _gelu(g, f"{name}.mlp.gelu", _linear(g, f"{name}.mlp.fc1", y, hidden, mlp))
    return g.add(f"{name}.add2", x, _linear(g, f"{name}.mlp.fc2", y, mlp, hidden, 0.5))


def vit(
    *,
    image_size: int = 224,
    patch: int = 16,
    hidden: int = 192,
    heads: int = 3,
    layers: int = 4,
    mlp: int = 768,
    num_classes: int = 1000,
    seed: int = 0,
) -> onnx.ModelProto:
    """ViT: patches by a ``patch`` x ``patch`` stride-``patch`` Conv, flattened to tokens, a
    class token prepended and position embeddings added, ``layers`` encoder blocks, a final
    LayerNorm and a linear head on the class token."""
    if image_size < patch or image_size % patch:
        raise ValueError(f"vit needs an image size that is a multiple of {patch}, not {image_size}")
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
    g = GraphBuilder(seed)
    grid = image_size // patch
    tokens = grid * grid + 1
    x = g.conv("patch_embed", "input", 3, hidden, patch, patch, 0, bias=True)
    x = g.node(
        "Reshape", "patch_embed.flatten", [x, _shape(g, "patch_embed.shape", [1, hidden, -1])]
    )
    x = g.node("Transpose", "patch_embed.transpose", [x], perm=[0, 2, 1])
    cls = g.param("cls_token", g.rng.normal(0.0, 0.5, (1, 1, hidden)))
    x = g.node("Concat", "cls_concat", [cls, x], axis=1)
    x = g.add(
        "pos_embed", x, g.param("pos_embed.weight", g.rng.normal(0.0, 0.2, (1, tokens, hidden)))
    )
    for i in range(layers):
        x = encoder_block(g, f"blocks.{i}", x, tokens, hidden, heads, mlp)
    x = _layer_norm(g, "norm", x, hidden)
    g.initializers.append(onnx.numpy_helper.from_array(np.asarray(0, np.int64), "cls_index"))
    x = g.node("Gather", "cls_select", [x, "cls_index"], axis=1)
    g.gemm("head", x, hidden, num_classes, output="logits")
    return g.model(
        "vit",
        {"input": [1, 3, image_size, image_size]},
        {"logits": [1, num_classes]},
        f"vit: {layers} layers, hidden {hidden}, {heads} heads, patch {patch}, random weights "
        f"(seed {seed}), {image_size}x{image_size}",
    )


def bert(
    *,
    tokens: int = 128,
    hidden: int = 128,
    heads: int = 2,
    layers: int = 2,
    mlp: int = 512,
    num_classes: int = 2,
    seed: int = 0,
) -> onnx.ModelProto:
    """BERT-style encoder: token embeddings come in as a float input ``(1, tokens, hidden)`` (the
    embedding lookup is the host's), position embeddings added, an embedding LayerNorm,
    ``layers`` encoder blocks, and a classifier on the first token."""
    if hidden % heads:
        raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
    g = GraphBuilder(seed)
    pos = g.param("embeddings.position", g.rng.normal(0.0, 0.2, (1, tokens, hidden)))
    x = g.add("embeddings.add", "input", pos)
    x = _layer_norm(g, "embeddings.norm", x, hidden)
    for i in range(layers):
        x = encoder_block(g, f"encoder.{i}", x, tokens, hidden, heads, mlp)
    g.initializers.append(onnx.numpy_helper.from_array(np.asarray(0, np.int64), "cls_index"))
    x = g.node("Gather", "cls_select", [x, "cls_index"], axis=1)
    g.gemm("classifier", x, hidden, num_classes, output="logits")
    return g.model(
        "bert",
        {"input": [1, tokens, hidden]},
        {"logits": [1, num_classes]},
        f"bert: {layers} layers, hidden {hidden}, {heads} heads, {tokens} tokens, random "
        f"weights (seed {seed})",
    )

"""``chargpt``: the character-level GPT of :mod:`zoo.chargpt_train`, trained on numpy's
documentation (:mod:`zoo.chargpt_data`), as an ONNX model - a fixed-length full-sequence forward
pass, T token ids in, T rows of next-character logits out.

Training takes minutes, so the trained weights are kept in ``build/zoo/`` of the checkout
(named after what they depend on: the shape, the seed, the corpus digest and
:data:`TRAINING_VERSION`); an installed package trains once per process.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import zipfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

import numpy as np
import onnx

from ._graph import GraphBuilder
from .chargpt_data import CORPUS_SHA256, VOCAB, Corpus, load, windows
from .chargpt_train import FULL, LN_EPSILON, MASKED, Shape, param_shapes, train

__all__ = [
    "LM_METADATA_KEY",
    "calibration_set",
    "chargpt",
    "held_out_windows",
    "trained",
]

#: Bump when the training changes what it computes: the cached weights are named after it.
TRAINING_VERSION = 2
#: metadata_props key of a language model: JSON {"vocab": characters, "context": T}.
LM_METADATA_KEY = "cosim.language_model"
_REPO = Path(__file__).resolve().parents[1]
CACHE_DIR = _REPO / "build" / "zoo"


@functools.cache
def _corpus() -> Corpus:
    return load()


def _cache_path(shape: Shape, seed: int) -> Path | None:
    """Where the weights of ``shape`` and ``seed`` are kept (None: not in a checkout)."""
    if not (_REPO / "pyproject.toml").is_file():
        return None
    key = json.dumps([asdict(shape), seed, CORPUS_SHA256, TRAINING_VERSION], sort_keys=True)
    return CACHE_DIR / f"chargpt-{hashlib.sha256(key.encode()).hexdigest()[:16]}.npz"


def _load_cached(path: Path, shape: Shape) -> dict[str, np.ndarray] | None:
    """The weights in ``path``, or None if it is missing or not what ``shape`` needs."""
    try:
        with np.load(path, allow_pickle=False) as data:
            params = {k: np.asarray(data[k], np.float32) for k in data.files}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    wanted = param_shapes(shape)
    if {k: v.shape for k, v in params.items()} != wanted:
        return None
    if not all(np.isfinite(v).all() for v in params.values()):
        return None
    return params


@functools.cache
def trained(shape: Shape = FULL, seed: int = 0) -> dict[str, np.ndarray]:
    """The trained float32 parameters for ``shape`` and ``seed``: from ``build/zoo/`` if there,
    else trained (``FULL``: about two minutes) and kept there."""
    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    path = _cache_path(shape, seed)
    cached = _load_cached(path, shape) if path is not None and path.is_file() else None
    if cached is not None:
        return cached
    params = train(_corpus().train, shape, seed)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.tmp.npz")
            np.savez(partial, **cast(dict[str, Any], params))
            os.replace(partial, path)  # (a concurrent trainer writes the same bytes)
        except OSError:
            pass  # a read-only checkout: trained again next time
    return params


def held_out_windows(count: int, shape: Shape = FULL) -> np.ndarray:
    """The first ``count`` windows (count, T + 1) of the held-out text, one after the other:
    T input ids and the T next characters."""
    return windows(_corpus().held_out, shape.context, count)


def calibration_set(count: int = 8, shape: Shape = FULL) -> list[np.ndarray]:
    """``count`` windows of the training text, spread over it (never held-out text), as the
    executable's packed input (1, 1, T) float32: the default calibration. (Ids of a vocabulary
    of at most 128 are one base-128 digit each: their own packed form,
    ``compiler.onnx.token_inputs``.)"""
    ids = _corpus().train
    stride = (len(ids) - shape.context - 1) // count
    picked = windows(ids, shape.context, count, stride)[:, :-1]
    return [w[None, None].astype(np.float32) for w in picked]


def _layer_norm(g: GraphBuilder, p: dict[str, np.ndarray], name: str, x: str) -> str:
    gamma, beta = (
        g.param(f"{name}.weight", p[f"{name}.weight"]),
        g.param(f"{name}.bias", p[f"{name}.bias"]),
    )
    return g.node("LayerNormalization", name, [x, gamma, beta], axis=-1, epsilon=LN_EPSILON)


def _linear(g: GraphBuilder, p: dict[str, np.ndarray], name: str, x: str) -> str:
    weight, bias = (
        g.param(f"{name}.weight", p[f"{name}.weight"]),
        g.param(f"{name}.bias", p[f"{name}.bias"]),
    )
    return g.node("Add", f"{name}.add", [g.node("MatMul", f"{name}.matmul", [x, weight]), bias])


def _shape_const(g: GraphBuilder, name: str, dims: list[int]) -> str:
    g.initializers.append(onnx.numpy_helper.from_array(np.asarray(dims, np.int64), name))
    return name


def _gelu_tanh(g: GraphBuilder, name: str, x: str) -> str:
    """GPT-2's GELU as its code writes it:
    0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))."""
    cube = g.node("Pow", f"{name}.pow", [x, g.param(f"{name}.three", np.float32(3.0))])
    inner = g.node("Mul", f"{name}.mul_c", [cube, g.param(f"{name}.c", np.float32(0.044715))])
    inner = g.node("Add", f"{name}.add_x", [x, inner])
    inner = g.node(
        "Mul", f"{name}.mul_s", [inner, g.param(f"{name}.s", np.float32(math.sqrt(2 / math.pi)))]
    )
    one = g.node(
        "Add",
        f"{name}.add_1",
        [g.node("Tanh", f"{name}.tanh", [inner]), g.param(f"{name}.one", np.float32(1.0))],
    )
    half = g.node("Mul", f"{name}.half", [x, g.param(f"{name}.half_c", np.float32(0.5))])
    return g.node("Mul", f"{name}.mul", [half, one])


def _block(g: GraphBuilder, p: dict[str, np.ndarray], name: str, x: str, s: Shape) -> str:
    """Pre-norm decoder block: x + causal attention(LN(x)), then + MLP(LN(.))."""
    head = s.width // s.heads
    y = _layer_norm(g, p, f"{name}.ln1", x)
    split = _shape_const(g, f"{name}.attn.split_shape", [1, s.context, s.heads, head])
    parts = []
    for which in ("q", "k", "v"):
        shaped = g.node(
            "Reshape",
            f"{name}.attn.{which}.reshape",
            [_linear(g, p, f"{name}.attn.{which}", y), split],
        )
        perm = [0, 2, 3, 1] if which == "k" else [0, 2, 1, 3]  # k arrives transposed
        parts.append(g.node("Transpose", f"{name}.attn.{which}.transpose", [shaped], perm=perm))
    q, k_t, v = parts
    scores = g.node("MatMul", f"{name}.attn.qk", [q, k_t])
    scale = g.param(f"{name}.attn.scale", np.float32(1.0 / math.sqrt(head)))
    scores = g.node("Mul", f"{name}.attn.scale_mul", [scores, scale])
    mask = np.triu(np.full((s.context, s.context), MASKED, np.float32), 1)
    scores = g.node("Add", f"{name}.attn.causal", [scores, g.param(f"{name}.attn.mask", mask)])
    attn = g.node("Softmax", f"{name}.attn.softmax", [scores], axis=-1)
    context = g.node("MatMul", f"{name}.attn.av", [attn, v])
    merged = g.node("Transpose", f"{name}.attn.merge", [context], perm=[0, 2, 1, 3])
    flat = _shape_const(g, f"{name}.attn.merge_shape", [1, s.context, s.width])
    merged = g.node("Reshape", f"{name}.attn.merge_reshape", [merged, flat])
    x = g.add(f"{name}.add1", x, _linear(g, p, f"{name}.attn.proj", merged))
    y = _layer_norm(g, p, f"{name}.ln2", x)
    y = _gelu_tanh(g, f"{name}.mlp.gelu", _linear(g, p, f"{name}.mlp.fc1", y))
    return g.add(f"{name}.add2", x, _linear(g, p, f"{name}.mlp.fc2", y))


def chargpt(*, seed: int = 0, shape: Shape = FULL) -> onnx.ModelProto:
    """The trained decoder (:func:`trained`) as ONNX: input ``"input"`` int64 ``[1, T]`` (ids
    of :data:`zoo.chargpt_data.VOCAB`), output ``"logits"`` ``[1, T, vocab]`` (row t: the
    next character after ids[:t + 1]); token and position embeddings, ``layers`` blocks, a
    final LayerNorm, the LM head. The same seed and shape give a byte-identical model."""
    p = trained(shape, seed)
    g = GraphBuilder(seed)
    x = g.node("Gather", "wte", [g.param("wte.weight", p["wte"]), "input"], axis=0)
    x = g.add("wpe", x, g.param("wpe.weight", p["wpe"][None]))
    for i in range(shape.layers):
        x = _block(g, p, f"h.{i}", x, shape)
    x = _layer_norm(g, p, "ln_f", x)
    weight, bias = g.param("head.weight", p["head.weight"]), g.param("head.bias", p["head.bias"])
    g.node("Add", "head.add", [g.node("MatMul", "head.matmul", [x, weight]), bias], output="logits")
    doc = (
        f"chargpt: character-level GPT, {shape.layers} layers, width {shape.width}, "
        f"{shape.heads} heads, context {shape.context}, trained on numpy's docstrings "
        f"(seed {seed}, {shape.steps} steps)"
    )
    model = g.model(
        "chargpt", {"input": [1, shape.context]}, {"logits": [1, shape.context, shape.vocab]}, doc
    )
    model.graph.input[0].type.tensor_type.elem_type = onnx.TensorProto.INT64
    meta = json.dumps({"vocab": VOCAB, "context": shape.context})
    onnx.helper.set_model_props(model, {LM_METADATA_KEY: meta})
    return model

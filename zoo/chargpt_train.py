"""Train ``chargpt`` in numpy (no torch): a GPT-style character decoder, deterministic for a
seed, about two minutes on one core (:data:`FULL`; :data:`TINY` in seconds).

The network (:class:`Shape`): token embedding ``wte`` plus position embedding ``wpe``;
``layers`` pre-norm blocks - LayerNorm, causal self-attention of ``heads`` heads (q, k, v and
output projections), residual Add, LayerNorm, MLP ``width -> mlp -> width`` with GPT-2's tanh
GELU, residual Add - a final LayerNorm and the LM head ``width -> vocab``. Weights are stored
as a linear layer's ``(fin, fout)`` (what the ONNX MatMul reads). AdamW on the mean next-
character cross-entropy over every position of random windows of the training text, float32 on
one BLAS thread (so the sums run in the same order every time). ``python -m zoo.chargpt_train``
trains :data:`FULL` and prints the held-out bits per character.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .chargpt_data import VOCAB

__all__ = ["FULL", "TINY", "Shape", "forward", "loss_and_grads", "param_shapes", "train"]

Params = dict[str, np.ndarray]
LN_EPSILON = 1e-5
WEIGHT_DECAY = 0.1  # (AdamW's, of the weight matrices and embeddings)
#: What the causal mask adds to the scores above the diagonal (the norm unit's causal flag).
MASKED = -1e4
_GELU_C = math.sqrt(2.0 / math.pi)


@dataclass(frozen=True)
class Shape:
    """The network's sizes and its training run."""

    context: int = 64  # T: characters per window
    width: int = 64  # D
    heads: int = 4
    layers: int = 2
    mlp: int = 256
    vocab: int = len(VOCAB)
    steps: int = 1000  # Adam steps
    batch: int = 16  # windows per step
    rate: float = 1e-2  # peak learning rate (cosine decay after 50 warm-up steps)

    def __post_init__(self) -> None:
        if self.width % self.heads:
            raise ValueError(f"width {self.width} is not a multiple of heads {self.heads}")


FULL = Shape()
TINY = Shape(context=8, width=16, heads=2, layers=1, mlp=32, steps=80, batch=16, rate=1e-2)


def param_shapes(s: Shape) -> dict[str, tuple[int, ...]]:
    """Every parameter's name and shape, in the order they are drawn."""
    shapes: dict[str, tuple[int, ...]] = {"wte": (s.vocab, s.width), "wpe": (s.context, s.width)}
    for i in range(s.layers):
        p = f"h.{i}."
        shapes |= {p + "ln1.weight": (s.width,), p + "ln1.bias": (s.width,)}
        for name in ("q", "k", "v", "proj"):
            shapes |= {
                f"{p}attn.{name}.weight": (s.width, s.width),
                f"{p}attn.{name}.bias": (s.width,),
            }
        shapes |= {p + "ln2.weight": (s.width,), p + "ln2.bias": (s.width,)}
        shapes |= {p + "mlp.fc1.weight": (s.width, s.mlp), p + "mlp.fc1.bias": (s.mlp,)}
        shapes |= {p + "mlp.fc2.weight": (s.mlp, s.width), p + "mlp.fc2.bias": (s.width,)}
    shapes |= {"ln_f.weight": (s.width,), "ln_f.bias": (s.width,)}
    return shapes | {"head.weight": (s.width, s.vocab), "head.bias": (s.vocab,)}


def init(s: Shape, seed: int) -> Params:
    """GPT-2's initialisation: N(0, 0.02) weights (residual projections scaled by
    1/sqrt(2 * layers)), zero biases, LayerNorms at identity."""
    rng = np.random.default_rng(seed)
    params: Params = {}
    for name, shape in param_shapes(s).items():
        if name.endswith("ln1.weight") or name.endswith("ln2.weight") or name == "ln_f.weight":
            params[name] = np.ones(shape, np.float32)
        elif name.endswith(".bias"):
            params[name] = np.zeros(shape, np.float32)
        else:
            std = (
                0.02 / math.sqrt(2 * s.layers)
                if name.endswith(("proj.weight", "fc2.weight"))
                else 0.02
            )
            params[name] = rng.normal(0.0, std, shape).astype(np.float32)
    return params


def _ln(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, tuple[Any, ...]]:
    mean = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + LN_EPSILON)
    xhat = (x - mean) * rstd
    return xhat * g + b, (xhat, rstd, g)


def _ln_back(dy: np.ndarray, saved: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    xhat, rstd, g = saved
    axes = tuple(range(dy.ndim - 1))
    dg, db = (dy * xhat).sum(axes), dy.sum(axes)
    dxhat = dy * g
    dx = rstd * (
        dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True)
    )
    return dx, dg, db


def gelu(x: np.ndarray) -> np.ndarray:
    """GPT-2's GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + np.tanh(_GELU_C * x * (1.0 + 0.044715 * x * x)))


def _gelu_back(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    x2 = x * x
    t = np.tanh(_GELU_C * x * (1.0 + 0.044715 * x2))
    return dy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * _GELU_C * (1 + 3 * 0.044715 * x2))


def causal_mask(length: int) -> np.ndarray:
    """(T, T): 0 at and below the diagonal, :data:`MASKED` above."""
    return np.triu(np.full((length, length), MASKED, np.float32), 1)


def _attention(p: Params, pre: str, a: np.ndarray, s: Shape) -> tuple[np.ndarray, list[Any]]:
    bsz, t, d = a.shape
    dh = d // s.heads

    def heads(name: str) -> np.ndarray:
        y = a @ p[f"{pre}attn.{name}.weight"] + p[f"{pre}attn.{name}.bias"]
        return y.reshape(bsz, t, s.heads, dh).transpose(0, 2, 1, 3)

    q, k, v = heads("q"), heads("k"), heads("v")
    scores = q @ k.transpose(0, 1, 3, 2) * (1.0 / math.sqrt(dh)) + causal_mask(t)
    prob = np.exp(scores - scores.max(-1, keepdims=True))
    prob /= prob.sum(-1, keepdims=True)
    ctx = (prob @ v).transpose(0, 2, 1, 3).reshape(bsz, t, d)
    out = ctx @ p[f"{pre}attn.proj.weight"] + p[f"{pre}attn.proj.bias"]
    return out, [a, q, k, v, prob, ctx]


def _attention_back(
    p: Params, pre: str, dout: np.ndarray, saved: list[Any], s: Shape
) -> tuple[np.ndarray, Params]:
    a, q, k, v, prob, ctx = saved
    bsz, t, d = a.shape
    dh = d // s.heads
    grads = {
        f"{pre}attn.proj.weight": _flat(ctx).T @ _flat(dout),
        f"{pre}attn.proj.bias": dout.sum((0, 1)),
    }
    dctx = (dout @ p[f"{pre}attn.proj.weight"].T).reshape(bsz, t, s.heads, dh).transpose(0, 2, 1, 3)
    dprob, dv = dctx @ v.transpose(0, 1, 3, 2), prob.transpose(0, 1, 3, 2) @ dctx
    dscores = prob * (dprob - (dprob * prob).sum(-1, keepdims=True)) * (1.0 / math.sqrt(dh))
    dq, dk = dscores @ k, dscores.transpose(0, 1, 3, 2) @ q
    da = np.zeros_like(a)
    for name, dy in (("q", dq), ("k", dk), ("v", dv)):
        dy = dy.transpose(0, 2, 1, 3).reshape(bsz, t, d)
        grads[f"{pre}attn.{name}.weight"] = _flat(a).T @ _flat(dy)
        grads[f"{pre}attn.{name}.bias"] = dy.sum((0, 1))
        da += dy @ p[f"{pre}attn.{name}.weight"].T
    return da, grads


def _flat(x: np.ndarray) -> np.ndarray:
    return x.reshape(-1, x.shape[-1])


def _forward(p: Params, ids: np.ndarray, s: Shape) -> tuple[np.ndarray, list[Any]]:
    t = ids.shape[1]
    x = p["wte"][ids] + p["wpe"][:t]
    saved: list[Any] = []
    for i in range(s.layers):
        pre = f"h.{i}."
        a, ln1 = _ln(x, p[pre + "ln1.weight"], p[pre + "ln1.bias"])
        out, attn = _attention(p, pre, a, s)
        x = x + out
        a2, ln2 = _ln(x, p[pre + "ln2.weight"], p[pre + "ln2.bias"])
        f = a2 @ p[pre + "mlp.fc1.weight"] + p[pre + "mlp.fc1.bias"]
        g = gelu(f)
        x = x + g @ p[pre + "mlp.fc2.weight"] + p[pre + "mlp.fc2.bias"]
        saved.append((ln1, attn, ln2, a2, f, g))
    y, lnf = _ln(x, p["ln_f.weight"], p["ln_f.bias"])
    saved.append((lnf, y))
    return y @ p["head.weight"] + p["head.bias"], saved


def forward(p: Params, ids: np.ndarray, s: Shape) -> np.ndarray:
    """Logits (B, T, vocab) of ids (B, T) (float32)."""
    return _forward(p, np.asarray(ids, np.int64), s)[0]


def loss_and_grads(
    p: Params, ids: np.ndarray, targets: np.ndarray, s: Shape
) -> tuple[float, Params]:
    """Mean cross-entropy (nats) of the next characters ``targets`` (B, T) and its gradient."""
    logits, saved = _forward(p, ids, s)
    logits = logits - logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    n = targets.size
    rows = np.arange(n)
    loss = float(-logp.reshape(n, -1)[rows, targets.reshape(-1)].mean())
    dlogits = np.exp(logp).reshape(n, -1)
    dlogits[rows, targets.reshape(-1)] -= 1.0
    dlogits = (dlogits / n).reshape(logp.shape).astype(np.float32)
    lnf, y = saved.pop()
    grads: Params = {"head.weight": _flat(y).T @ _flat(dlogits), "head.bias": dlogits.sum((0, 1))}
    dx, grads["ln_f.weight"], grads["ln_f.bias"] = _ln_back(dlogits @ p["head.weight"].T, lnf)
    for i in reversed(range(s.layers)):
        pre = f"h.{i}."
        ln1, attn, ln2, a2, f, g = saved[i]
        grads[pre + "mlp.fc2.weight"] = _flat(g).T @ _flat(dx)
        grads[pre + "mlp.fc2.bias"] = dx.sum((0, 1))
        df = _gelu_back(dx @ p[pre + "mlp.fc2.weight"].T, f)
        grads[pre + "mlp.fc1.weight"] = _flat(a2).T @ _flat(df)
        grads[pre + "mlp.fc1.bias"] = df.sum((0, 1))
        dln2, grads[pre + "ln2.weight"], grads[pre + "ln2.bias"] = _ln_back(
            df @ p[pre + "mlp.fc1.weight"].T, ln2
        )
        dx = dx + dln2
        da, attn_grads = _attention_back(p, pre, dx, attn, s)
        grads |= attn_grads
        dln1, grads[pre + "ln1.weight"], grads[pre + "ln1.bias"] = _ln_back(da, ln1)
        dx = dx + dln1
    grads["wpe"] = np.zeros_like(p["wpe"])
    grads["wpe"][: ids.shape[1]] = dx.sum(0)
    grads["wte"] = np.zeros_like(p["wte"])
    np.add.at(grads["wte"], ids.reshape(-1), _flat(dx))
    return loss, grads


def _rate(s: Shape, step: int) -> float:
    warm = 50
    if step < warm:
        return s.rate * (step + 1) / warm
    return s.rate * 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, s.steps - warm)))


def train(ids: np.ndarray, s: Shape, seed: int = 0) -> Params:
    """Trained float32 parameters (named as :func:`param_shapes`) on the training ``ids``; the
    same for the same ``seed`` (weights and the windows drawn)."""
    from threadpoolctl import threadpool_limits  # (scikit-learn's dependency)

    p = init(s, seed)
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(val) for k, val in p.items()}
    rng = np.random.default_rng(seed + 1)
    span = np.arange(s.context + 1)
    with threadpool_limits(limits=1):
        for step in range(s.steps):
            starts = rng.integers(0, len(ids) - s.context - 1, s.batch)
            window = ids[starts[:, None] + span]
            _loss, grads = loss_and_grads(p, window[:, :-1], window[:, 1:], s)
            rate = _rate(s, step)
            for k in p:
                g = grads[k]
                m[k] = 0.9 * m[k] + 0.1 * g
                v[k] = 0.99 * v[k] + 0.01 * g * g
                m_hat, v_hat = m[k] / (1 - 0.9 ** (step + 1)), v[k] / (1 - 0.99 ** (step + 1))
                # AdamW: the decay of matrices is decoupled from the gradient's normalization
                # (coupled, it shrank the second block's q and k to nothing).
                decay = WEIGHT_DECAY * p[k] if p[k].ndim == 2 else 0.0
                p[k] = (p[k] - rate * (m_hat / (np.sqrt(v_hat) + 1e-8) + decay)).astype(np.float32)
    return p


def bits_per_char(p: Params, windows: np.ndarray, s: Shape) -> float:
    """Mean bits per character of the float network over windows (N, T + 1)."""
    loss, _ = loss_and_grads(p, windows[:, :-1], windows[:, 1:], s)
    return loss / math.log(2)


def main() -> None:
    import time

    from .chargpt_data import load, windows

    started = time.perf_counter()
    corpus = load()
    params = train(corpus.train, FULL)
    print(f"trained in {time.perf_counter() - started:.1f} s")
    for what, ids in (("train", corpus.train), ("held-out", corpus.held_out)):
        w = windows(ids, FULL.context, 256)
        print(f"{what}: {len(w)} windows, {bits_per_char(params, w, FULL):.4f} bits per character")


if __name__ == "__main__":
    main()

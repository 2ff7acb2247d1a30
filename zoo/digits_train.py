"""Train the digits CNN in numpy (no torch): deterministic for a seed, a few seconds on one core.

The network (:data:`SHAPES`): ``conv1`` 3x3 1->16 pad 1, Relu, MaxPool 2; ``conv2`` 3x3 16->32
pad 1, Relu, MaxPool 2; Flatten (32*2*2); ``fc`` 128->10. Adam on softmax cross-entropy,
mini-batches in a seeded order, float64 arithmetic on one BLAS thread (so the sums are done
in the same order every time). ``python -m zoo.digits_train`` trains and prints the
accuracies.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .digits_data import Split

__all__ = ["EPOCHS", "SHAPES", "predict", "train"]

SHAPES: dict[str, tuple[int, ...]] = {
    "conv1.weight": (16, 1, 3, 3),
    "conv1.bias": (16,),
    "conv2.weight": (32, 16, 3, 3),
    "conv2.bias": (32,),
    "fc.weight": (10, 128),
    "fc.bias": (10,),
}
EPOCHS = 20
BATCH = 32
LEARNING_RATE = 3e-3
WEIGHT_DECAY = 1e-4

Params = dict[str, np.ndarray]


def _cols(x: np.ndarray) -> np.ndarray:
    """3x3 pad-1 windows of (N, C, H, W) as (N, H, W, C*9) (order c, ky, kx)."""
    n, c, h, w = x.shape
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    return windows.transpose(0, 2, 3, 1, 4, 5).reshape(n, h, w, c * 9)


def _uncols(d: np.ndarray, c: int) -> np.ndarray:
    """The gradient of :func:`_cols`: (N, H, W, C*9) back onto (N, C, H, W)."""
    n, h, w, _ = d.shape
    d = d.reshape(n, h, w, c, 3, 3)
    out = np.zeros((n, c, h + 2, w + 2))
    for ky in range(3):
        for kx in range(3):
            out[:, :, ky : ky + h, kx : kx + w] += d[..., ky, kx].transpose(0, 3, 1, 2)
    return out[:, :, 1:-1, 1:-1]


def _pool(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """2x2 max pool of (N, C, H, W) and the mask of the winners (the first in a tie)."""
    n, c, h, w = x.shape
    blocks = x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5)
    flat = blocks.reshape(n, c, h // 2, w // 2, 4)
    first = np.argmax(flat, axis=-1)
    mask = np.zeros_like(flat)
    np.put_along_axis(mask, first[..., None], 1.0, axis=-1)
    return np.take_along_axis(flat, first[..., None], axis=-1)[..., 0], mask


def _unpool(d: np.ndarray, mask: np.ndarray) -> np.ndarray:
    n, c, h2, w2, _ = mask.shape
    blocks = (mask * d[..., None]).reshape(n, c, h2, w2, 2, 2).transpose(0, 1, 2, 4, 3, 5)
    return blocks.reshape(n, c, h2 * 2, w2 * 2)


def _forward(p: Params, x: np.ndarray) -> tuple[np.ndarray, list[Any]]:
    saved: list[Any] = []
    for name in ("conv1", "conv2"):
        w = p[f"{name}.weight"]
        cols = _cols(x)
        y = cols @ w.reshape(w.shape[0], -1).T + p[f"{name}.bias"]  # (N, H, W, O)
        y = y.transpose(0, 3, 1, 2)
        relu = y > 0
        x, mask = _pool(y * relu)
        saved.append((cols, relu, mask, w.shape[1]))
    flat = x.reshape(len(x), -1)
    saved.append(flat)
    return flat @ p["fc.weight"].T + p["fc.bias"], saved


def _backward(p: Params, saved: list[Any], dlogits: np.ndarray) -> Params:
    flat = saved.pop()
    grads = {"fc.weight": dlogits.T @ flat, "fc.bias": dlogits.sum(0)}
    d = (dlogits @ p["fc.weight"]).reshape(len(flat), 32, 2, 2)
    for name, (cols, relu, mask, cin) in zip(("conv2", "conv1"), reversed(saved), strict=True):
        dy = (_unpool(d, mask) * relu).transpose(0, 2, 3, 1)  # (N, H, W, O)
        w = p[f"{name}.weight"]
        grads[f"{name}.weight"] = (
            dy.reshape(-1, w.shape[0]).T @ cols.reshape(-1, cols.shape[-1])
        ).reshape(w.shape)
        grads[f"{name}.bias"] = dy.sum((0, 1, 2))
        if name == "conv2":
            d = _uncols(dy @ w.reshape(w.shape[0], -1), cin)
    return grads


def predict(p: Params, x: np.ndarray) -> np.ndarray:
    """Logits (N, 10) of the float64 network for input (N, 1, 8, 8)."""
    return _forward(p, np.asarray(x, np.float64))[0]


def _init(seed: int) -> Params:
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in SHAPES.items():
        if name.endswith(".weight"):
            fan_in = int(np.prod(shape[1:]))
            params[name] = rng.normal(0.0, np.sqrt(2.0 / fan_in), shape)
        else:
            params[name] = np.zeros(shape)
    return params


def train(data: Split, seed: int = 0, epochs: int = EPOCHS) -> dict[str, np.ndarray]:
    """Trained float32 parameters (named as :data:`SHAPES`) for ``data``; the same for the same
    ``seed`` (weights and mini-batch order)."""
    from threadpoolctl import threadpool_limits  # (scikit-learn's dependency)

    p = _init(seed)
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(val) for k, val in p.items()}
    rng = np.random.default_rng(seed + 1)
    x_all, y_all = np.asarray(data.x, np.float64), data.y
    step = 0
    with threadpool_limits(limits=1):
        for epoch in range(epochs):
            rate = LEARNING_RATE * 0.5 * (1 + np.cos(np.pi * epoch / epochs))  # cosine decay
            order = rng.permutation(len(y_all))
            for start in range(0, len(order), BATCH):
                idx = order[start : start + BATCH]
                logits, saved = _forward(p, x_all[idx])
                prob = np.exp(logits - logits.max(1, keepdims=True))
                prob /= prob.sum(1, keepdims=True)
                prob[np.arange(len(idx)), y_all[idx]] -= 1.0
                grads = _backward(p, saved, prob / len(idx))
                step += 1
                for k in p:
                    g = grads[k] + WEIGHT_DECAY * p[k]
                    m[k] = 0.9 * m[k] + 0.1 * g
                    v[k] = 0.999 * v[k] + 0.001 * g * g
                    m_hat, v_hat = m[k] / (1 - 0.9**step), v[k] / (1 - 0.999**step)
                    p[k] = p[k] - rate * m_hat / (np.sqrt(v_hat) + 1e-8)
    return {k: val.astype(np.float32) for k, val in p.items()}


def main() -> None:
    import time

    from .digits_data import load

    started = time.perf_counter()
    train_split, held = load()
    params = train(train_split)
    for what, split in (("train", train_split), ("held-out", held)):
        top1 = float(np.mean(predict(params, split.x).argmax(1) == split.y))
        print(f"{what}: n={len(split.y)} top-1 {top1:.4f}")
    print(f"trained in {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()

"""Held-out quality of a language model: bits per character (and perplexity) of its logits for
the next characters, and how often its top choice is the next character."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["bits_per_char", "next_char_top1"]


def bits_per_char(logits: np.ndarray, targets: np.ndarray) -> float:
    """Mean ``-log2 softmax(logits)[target]`` over every position: ``logits`` (..., V),
    ``targets`` integer ids of the same leading shape (float64 log-softmax)."""
    z = np.asarray(logits, np.float64)
    z = z.reshape(-1, z.shape[-1])
    t = np.asarray(targets).reshape(-1)
    if len(t) != len(z):
        raise ValueError(f"{len(z)} rows of logits for {len(t)} targets")
    z = z - z.max(axis=1, keepdims=True)
    log_norm = np.log(np.exp(z).sum(axis=1))
    nats = log_norm - z[np.arange(len(t)), t]
    return float(nats.mean() / math.log(2))


def next_char_top1(logits: np.ndarray, targets: np.ndarray) -> float:
    """The fraction of positions whose largest logit is the next character's."""
    z = np.asarray(logits).reshape(-1, np.asarray(logits).shape[-1])
    return float(np.mean(z.argmax(axis=1) == np.asarray(targets).reshape(-1)))

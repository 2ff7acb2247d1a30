"""Elementwise activations the accelerator runs as a STORE lookup table.

Each function of one real value becomes, per layer, :data:`arch.isa.TABLE_ENTRIES` int8 outputs,
one per int8 input code: ``table[q + 128] = quantize(f(q * s_in), s_out)``. The table is the
semantics (the reference, the ISA simulator and the RTL all apply it); the float functions here
only generate it, in float64, as ONNX defines each op.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from arch.isa import TABLE_ENTRIES
from arch.reference import quantize_input

__all__ = ["FUNCTIONS", "evaluate", "make_table"]


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # = 1 / (1 + exp(-x)), without overflow


def _hardsigmoid(x: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    return np.clip(alpha * x + beta, 0.0, 1.0)


def _elu(x: np.ndarray, alpha: float) -> np.ndarray:
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0.0)))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


#: name -> (f(x, *args), number of args); ``args`` are the ONNX attributes, in order.
FUNCTIONS: dict[str, tuple[Callable[..., np.ndarray], int]] = {
    "sigmoid": (_sigmoid, 0),
    "silu": (lambda x: x * _sigmoid(x), 0),
    "tanh": (np.tanh, 0),
    "hardsigmoid": (_hardsigmoid, 2),  # alpha, beta
    "hardswish": (lambda x: x * _hardsigmoid(x, 1.0 / 6.0, 0.5), 0),
    "leakyrelu": (lambda x, alpha: np.where(x >= 0, x, alpha * x), 1),
    "elu": (_elu, 1),  # alpha
    "selu": (lambda x, alpha, gamma: gamma * _elu(x, alpha), 2),
    "celu": (lambda x, alpha: _elu(x / alpha, 1.0) * alpha, 1),
    "softplus": (_softplus, 0),
    "softsign": (lambda x: x / (1.0 + np.abs(x)), 0),
    "mish": (lambda x: x * np.tanh(_softplus(x)), 0),
    "gelu": (lambda x: 0.5 * x * (1.0 + _erf(x / np.sqrt(2.0))), 0),
    "gelu_tanh": (
        lambda x: 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3))),
        0,
    ),
    "clip": (lambda x, lo, hi: np.clip(x, lo, hi), 2),
}


def evaluate(function: str, args: tuple[float, ...], x: np.ndarray) -> np.ndarray:
    """``function(x, *args)`` in float64."""
    f, _arity = FUNCTIONS[function]
    return np.asarray(f(np.asarray(x, np.float64), *args), np.float64)


def make_table(
    function: str,
    args: tuple[float, ...],
    s_in: float,
    s_out: float,
    z_in: int = 0,
    z_out: int = 0,
) -> np.ndarray:
    """The int8 table of ``function`` from input scale and zero point ``s_in``, ``z_in`` to
    ``s_out``, ``z_out``: entry ``t`` is the output code for input code ``t - 128`` (rounded
    half away from zero and saturated, like the host's input quantization)."""
    codes = np.arange(TABLE_ENTRIES, dtype=np.float64) - 128
    return quantize_input(evaluate(function, args, (codes - z_in) * s_in), s_out, z_out)

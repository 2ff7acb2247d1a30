"""What ``make sim`` feeds a model of token inputs (``input_ids``, ``attention_mask``, ...:
:mod:`compiler.onnx.token_inputs`), from ``TOKENS=``, and the report's words for it.

- ``TOKENS=ids.npy``: the token ids, integers of shape (T,) or (1, T) (a mask, if the model
  takes one, is then all ones); ``TOKENS=inputs.npz``: one array per input, by name.
- default: a zoo language model's (``chargpt``) first held-out window; else seeded ids inside
  the vocabulary and, for a mask, all ones with a padded tail.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import zoo
from compiler.onnx.token_inputs import TokenInputs
from sim.app.run_inputs import RunInputs
from sim.runtime.inputs import InputError

__all__ = ["token_run_inputs"]


def token_run_inputs(
    tokens: str | None, spec: TokenInputs, seed: int, model: str | None = None
) -> RunInputs:
    """The packed input of ``spec``'s model for ``TOKENS=tokens`` (see the module docstring);
    without ``tokens``, a zoo language model's first held-out window."""
    held = zoo.held_out_windows(model, 1) if tokens is None and model is not None else None
    if held is not None and len(held) and held.shape[1] - 1 == spec.length:
        packed = spec.pack({spec.inputs[0].name: held[0, :-1]}, "held-out window")
        words = f"{model} held-out window 0"
        return RunInputs([packed], ["tokens"], {"source": words, "tokens": _fed(spec, packed)})
    if tokens is None:
        packed, words = spec.default(seed)
        return RunInputs([packed], ["tokens"], {"source": words, "tokens": _fed(spec, packed)})
    path = Path(tokens)
    if path.suffix not in (".npy", ".npz"):
        raise InputError(f"tokens {path}: use a .npy array of ids or an .npz of named inputs")
    if not path.is_file():
        raise InputError(f"tokens {path} does not exist")
    try:
        loaded = np.load(path)  # numpy refuses object arrays by default
        arrays = dict(loaded) if path.suffix == ".npz" else {spec.inputs[0].name: loaded}
    except (OSError, ValueError, TypeError, EOFError) as exc:
        raise InputError(f"tokens {path} is not a readable {path.suffix} file: {exc}") from None
    try:
        packed = spec.pack(arrays, f"tokens {path}")
    except ValueError as exc:
        raise InputError(str(exc)) from None
    report = {"source": str(path), "tokens": _fed(spec, packed)}
    return RunInputs([packed], [path.name], report)


def _fed(spec: TokenInputs, packed: np.ndarray) -> dict[str, list[int]]:
    """Each input as it was fed, for the report."""
    return {t.name: packed[0, k].astype(np.int64).tolist() for k, t in enumerate(spec.inputs)}

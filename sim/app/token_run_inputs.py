"""What ``make sim`` feeds a model of token inputs (``input_ids``, ``attention_mask``, ...:
:mod:`compiler.onnx.token_inputs`), from ``TOKENS=``, and the report's words for it.

- ``TOKENS=ids.npy``: the token ids, integers of shape (T,) or (1, T) (a mask, if the model
  takes one, is then all ones); ``TOKENS=inputs.npz``: one array per input, by name.
- default: a zoo language model's (``chargpt``) first held-out window; else seeded ids inside
  the vocabulary and, for a mask, all ones with a padded tail.
- ``GENERATE=N`` of a model of ids alone (no tokenizer): ``TOKENS=`` is the prompt, 1 to T ids
  (:func:`prompt_ids`; default: T // 2 seeded ids), and the run's input is the prompt padded
  with id 0 to T (:func:`prompt_run_inputs`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import zoo
from compiler.onnx.token_inputs import TokenInputs
from sim.app.run_inputs import RunInputs
from sim.runtime.inputs import InputError

__all__ = ["load_tokens", "prompt_ids", "prompt_run_inputs", "token_run_inputs"]


def token_run_inputs(
    tokens: str | None,
    spec: TokenInputs,
    seed: int,
    model: str | None = None,
    prompt: tuple[tuple[int, ...], str] | None = None,
) -> RunInputs:
    """The packed input of ``spec``'s model for ``TOKENS=tokens`` (see the module docstring);
    without ``tokens``, a zoo language model's first held-out window; for a generation by a
    model of ids alone, its ``prompt`` (the ids and where they came from) padded."""
    if prompt is not None:
        return prompt_run_inputs(spec, *prompt)
    held = zoo.held_out_windows(model, 1) if tokens is None and model is not None else None
    if held is not None and len(held) and held.shape[1] - 1 == spec.length:
        packed = spec.pack({spec.inputs[0].name: held[0, :-1]}, "held-out window")
        words = f"{model} held-out window 0"
        return RunInputs([packed], ["tokens"], {"source": words, "tokens": _fed(spec, packed)})
    if tokens is None:
        packed, words = spec.default(seed)
        return RunInputs([packed], ["tokens"], {"source": words, "tokens": _fed(spec, packed)})
    path, arrays = load_tokens(tokens, spec)
    try:
        packed = spec.pack(arrays, f"tokens {path}")
    except ValueError as exc:
        raise InputError(str(exc)) from None
    report = {"source": str(path), "tokens": _fed(spec, packed)}
    return RunInputs([packed], [path.name], report)


def load_tokens(tokens: str, spec: TokenInputs) -> tuple[Path, dict[str, np.ndarray]]:
    """The arrays of ``TOKENS=tokens`` by input name (a .npy: the first input's), unchecked;
    a file that is not there or not readable is an InputError naming it."""
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
    return path, arrays


def _fed(spec: TokenInputs, packed: np.ndarray) -> dict[str, list[int]]:
    """Each input as it was fed, for the report."""
    return {t.name: packed[0, k].astype(np.int64).tolist() for k, t in enumerate(spec.inputs)}


def prompt_ids(tokens: str | None, spec: TokenInputs, seed: int) -> tuple[tuple[int, ...], str]:
    """The prompt of a generation by a model of ids alone and the report's words for it:
    ``TOKENS=tokens`` - 1 to T integer ids in the vocabulary, shaped (L,) or (1, L) - or
    T // 2 seeded ids in the vocabulary."""
    ids = spec.inputs[0]
    if tokens is None:
        count = max(1, spec.length // 2)
        seeded = np.random.default_rng(seed).integers(0, ids.vocab, count)
        words = f"seeded prompt (seed {seed}): {count} {ids.name} uniform in [0, {ids.vocab})"
        return tuple(int(i) for i in seeded), words
    path, arrays = load_tokens(tokens, spec)
    what = f"tokens {path}"
    if ids.name not in arrays:
        raise InputError(f"{what}: no array named {ids.name!r}, the model's input")
    a = np.asarray(arrays[ids.name])
    longest = f"1 to {spec.length} ids (the model's positions)"
    if a.ndim not in (1, 2) or (a.ndim == 2 and a.shape[0] != 1) or a.size == 0:
        raise InputError(
            f"{what}: {ids.name} has shape {a.shape}; a prompt for --generate is (L,) or "
            f"(1, L) of {longest}"
        )
    if a.size > spec.length:
        raise InputError(
            f"{what}: a prompt of {a.size} ids is longer than the model's {spec.length} "
            f"positions; give {longest}"
        )
    a = a.reshape(-1)
    padded = np.concatenate([a, np.zeros(spec.length - a.size, a.dtype)])
    try:  # (its dtype and vocabulary: checked as any TOKENS= file's)
        spec.pack({ids.name: padded}, what)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    return tuple(int(i) for i in a), str(path)


def prompt_run_inputs(spec: TokenInputs, prompt: tuple[int, ...], fed: str) -> RunInputs:
    """The run's input for a generation by a model of ids alone: ``prompt`` padded with id 0
    to the model's T positions (the causal attention makes the padding change nothing
    before it)."""
    padded = np.zeros(spec.length, np.int64)
    padded[: len(prompt)] = prompt
    packed = spec.pack({spec.inputs[0].name: padded}, "prompt")
    words = f"{fed}, padded with id 0 to {spec.length}"
    return RunInputs([packed], ["tokens"], {"source": words, "tokens": _fed(spec, packed)})

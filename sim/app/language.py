"""What ``make sim`` knows of a language model: its characters and context, from the model's
metadata (:data:`LANGUAGE_KEY`, written by the zoo's ``chargpt``), and the prompt's ids - or,
for a model as people export it (Hugging Face GPT-2: ``input_ids`` in, logits over the same
ids out), its ids alone: no tokenizer is bundled, so its prompt and what it generates are ids.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from compiler.onnx.token_inputs import token_inputs_of
from sim.runtime.inputs import InputError
from zoo.chargpt import LM_METADATA_KEY as LANGUAGE_KEY

__all__ = ["LANGUAGE_KEY", "LanguageModel"]


@dataclass(frozen=True)
class LanguageModel:
    """A model that predicts the next id: a forward pass reads ``context`` ids of ``size``.
    A character-level one has its ``vocab`` (id i is ``vocab[i]``); an ids-only one None."""

    vocab: str | None
    context: int
    size: int = 0  # ids the model knows (0: len(vocab))

    def __post_init__(self) -> None:
        if self.vocab is not None and not self.size:
            object.__setattr__(self, "size", len(self.vocab))

    @staticmethod
    def of(model: onnx.ModelProto | None) -> LanguageModel | None:
        """The language model ``model`` is (None: it is not one, or there is no model): one
        with :data:`LANGUAGE_KEY` metadata, or one of token ids in and logits over them out."""
        if model is None:
            return None
        for prop in model.metadata_props:
            if prop.key == LANGUAGE_KEY:
                data = json.loads(prop.value)
                return LanguageModel(str(data["vocab"]), int(data["context"]))
        return _ids_only(model)

    @property
    def words(self) -> str:
        """What one of its ids is called: a character, or an id."""
        return "characters" if self.vocab is not None else "ids"

    @property
    def pad(self) -> int:
        """The id a window shorter than the context is padded with (the causal attention
        makes it change nothing before it): a space, else id 0."""
        return self.vocab.index(" ") if self.vocab is not None and " " in self.vocab else 0

    def encode(self, prompt: str | Sequence[int]) -> np.ndarray:
        """The ids of ``prompt`` (an ids-only model's prompt is its ids, checked where they
        were read); a character the model does not know is an
        :class:`~sim.runtime.inputs.InputError` naming it."""
        if not isinstance(prompt, str):
            return np.asarray(prompt, np.int64)
        if self.vocab is None:  # (generation_of refuses a --prompt first)
            raise InputError("--prompt: this model takes token ids, not text (TOKENS=)")
        if not prompt:
            raise InputError("--prompt is empty: give at least one character")
        ids = {ch: i for i, ch in enumerate(self.vocab)}
        for at, ch in enumerate(prompt):
            if ch not in ids:
                raise InputError(
                    f"--prompt: character {ch!r} (at {at}) is not in the model's vocabulary; "
                    f"it knows {self.describe()}"
                )
        return np.asarray([ids[ch] for ch in prompt], np.int64)

    def prompt_fields(self, prompt: str | Sequence[int], fed: str | None) -> dict[str, Any]:
        """The report's words for a generation's prompt: its text (None: ids only), its ids,
        and where an ids-only prompt came from (``fed``)."""
        ids = self.encode(prompt).tolist()
        source = {"prompt_source": fed} if fed is not None else {}
        return {"prompt": self.text(ids), "prompt_ids": ids, **source}

    def describe(self) -> str:
        """The vocabulary in words (newline and printable ASCII said so)."""
        if self.vocab is None:
            return f"ids in [0, {self.size}) (no tokenizer)"
        if self.vocab == "\n" + "".join(map(chr, range(32, 127))):
            return "newline and printable ASCII (space to ~)"
        return f"{len(self.vocab)} characters: {self.vocab!r}"

    def decode(self, ids: np.ndarray | Sequence[int]) -> str:
        """The characters of ``ids``; an ids-only model's ids as numbers, each after a space."""
        flat = [int(i) for i in np.asarray(ids).reshape(-1)]
        if self.vocab is None:
            return "".join(f" {i}" for i in flat)
        return "".join(self.vocab[i] for i in flat)

    def text(self, ids: np.ndarray | Sequence[int]) -> str | None:
        """The text of ``ids`` for the report: None for an ids-only model (no tokenizer)."""
        return self.decode(ids) if self.vocab is not None else None


def _ids_only(model: onnx.ModelProto) -> LanguageModel | None:
    """An ids-only language model: one input of token ids (vocabulary V, T positions) and
    logits (1, T, V) out - the next id's scores at every position."""
    spec = token_inputs_of(model)
    if spec is None or len(spec.inputs) != 1 or spec.inputs[0].kind != "ids":
        return None
    if len(model.graph.output) != 1:
        return None
    dims = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    vocab, length = spec.inputs[0].vocab, spec.length
    if dims not in ([1, length, vocab], [length, vocab]):
        return None
    return LanguageModel(None, length, vocab)

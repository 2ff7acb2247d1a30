"""What ``make sim`` knows of a language model: its characters and context, from the model's
metadata (:data:`LANGUAGE_KEY`, written by the zoo's ``chargpt``), and the prompt's
ids."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import onnx

from sim.runtime.inputs import InputError
from zoo.chargpt import LM_METADATA_KEY as LANGUAGE_KEY

__all__ = ["LANGUAGE_KEY", "LanguageModel"]


@dataclass(frozen=True)
class LanguageModel:
    """A character-level model: id i is ``vocab[i]``; a forward pass reads ``context`` ids."""

    vocab: str
    context: int

    @staticmethod
    def of(model: onnx.ModelProto | None) -> LanguageModel | None:
        """The language model ``model`` is (None: it is not one, or there is no model)."""
        for prop in model.metadata_props if model is not None else ():
            if prop.key == LANGUAGE_KEY:
                data = json.loads(prop.value)
                return LanguageModel(str(data["vocab"]), int(data["context"]))
        return None

    def encode(self, prompt: str) -> np.ndarray:
        """The ids of ``prompt``; a character the model does not know is an
        :class:`~sim.runtime.inputs.InputError` naming it."""
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

    def describe(self) -> str:
        """The vocabulary in words (newline and printable ASCII said so)."""
        if self.vocab == "\n" + "".join(map(chr, range(32, 127))):
            return "newline and printable ASCII (space to ~)"
        return f"{len(self.vocab)} characters: {self.vocab!r}"

    def decode(self, ids: np.ndarray | list[int]) -> str:
        return "".join(self.vocab[int(i)] for i in np.asarray(ids).reshape(-1))

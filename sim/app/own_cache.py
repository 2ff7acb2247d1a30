"""The fp32 reference of a decoder exported with its cache (``past_key_values`` in, ``present``
out; :mod:`compiler.onnx.kv_cache_inputs`): onnxruntime runs the exported file the way a
generation loop runs it - the prompt with an empty past, then one id a step with the step
before's presents as its past - along the ids the device picked. Each of its logits rows is
compared with the device's of the same step (``fp32_cosine`` in the report's steps): the
executable's own KV cache in DRAM must do what the exported cache inputs did. The first
``context`` positions only: past them the device's window slides, the exported cache grows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from compiler.onnx.kv_cache_inputs import cache_io_of

__all__ = ["OwnCache", "cosine", "empty_cache"]


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two logits rows (1.0 for two zero rows)."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b / norm) if norm else float(np.array_equal(a, b))


def empty_cache(model: onnx.ModelProto, cache: list[tuple[str, str, int]]) -> dict[str, np.ndarray]:
    """Each past input of ``model`` (of ``cache``: past, present, positions axis) at length 0."""
    values = {v.name: v for v in model.graph.input}
    feeds = {}
    for past, _, axis in cache:
        dims = [d.dim_value for d in values[past].type.tensor_type.shape.dim]
        feeds[past] = np.zeros([0 if i == axis else d for i, d in enumerate(dims)], np.float32)
    return feeds


class OwnCache:
    """onnxruntime on the exported file, stepping its own cache (see the module docstring)."""

    def __init__(self, path: str | Path, cache: list[tuple[str, str, int]]) -> None:
        model = onnx.load(str(path))
        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        inits = {t.name for t in model.graph.initializer}
        self.inputs = [v for v in model.graph.input if v.name not in inits]
        self.outputs = [o.name for o in model.graph.output]
        self.cache = cache  # (past input, present output, positions axis)
        self.empty = empty_cache(model, cache)
        self.past: dict[str, np.ndarray] = {}
        self.length = 0

    @classmethod
    def of(cls, model: str | None, source: onnx.ModelProto | None) -> OwnCache | None:
        """The reference of ``model`` (an ONNX file) if its prepared ``source`` was bound from
        an export with cache inputs, else None."""
        io = cache_io_of(source) if source is not None else None
        if io is None or model is None or not Path(model).is_file():
            return None
        if any(present is None for _, present, _ in io["cache"]):
            return None  # (a past whose present is no output: no loop can feed it back)
        return cls(model, [tuple(entry) for entry in io["cache"]])

    def start(self, prompt: list[int]) -> np.ndarray:
        """The logits row of the prompt's last position, from an empty past."""
        self.past, self.length = {}, 0
        return self._run(prompt)

    def step(self, token: int) -> np.ndarray:
        """The logits row after ``token``, reading the cache of every id before it."""
        return self._run([token])

    def _run(self, ids: list[int]) -> np.ndarray:
        feeds, seq = {}, len(ids)
        for past, present, _ in self.cache:
            feeds[past] = self.past.get(present, self.empty[past])
        for value in self.inputs:
            if value.name in feeds:
                continue
            dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
            if "mask" in value.name.lower():
                feeds[value.name] = np.ones((1, self.length + seq), dtype)
            elif "position" in value.name.lower():
                feeds[value.name] = np.arange(self.length, self.length + seq, dtype=dtype)[None]
            else:
                feeds[value.name] = np.asarray([ids], dtype)
        results = dict(zip(self.outputs, self.session.run(None, feeds), strict=True))
        self.past = {present: results[present] for _, present, _ in self.cache}
        self.length += seq
        return results[self.outputs[0]][0, -1]

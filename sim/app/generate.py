"""Text generation: with a KV cache (``--decode kv_cache``, the default: :mod:`sim.app.generate_kv`)
or by recomputation (``--decode recompute``, here): every new character is one full forward
pass of the executable over the last T characters (the prompt and what was generated), run on
the backend and checked bit for bit; the next character is picked on the host from the int8
logits of the last position - greedily, or by seeded top-k sampling.

The causal attention makes row t of the logits depend only on ids[:t + 1] (masked scores are
exactly 0 on the device, and every other op works on rows), so a window shorter than T is
padded at its end with spaces that change nothing before them.

The report's ``generation`` keeps one entry per generated character (cycles, DRAM bytes,
utilization), under ``mode: "recompute"``; with a KV cache the same fields with ``mode:
"kv_cache"``, a ``prefill`` entry and per decode step its roofline. A model of ids alone (no
tokenizer: :class:`~sim.app.language.LanguageModel`) generates ids the same way: its prompt is
ids (``TOKENS=``, or seeded), they are printed as numbers, and ``prompt``/``text`` are None.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from arch.config import AccelConfig
from arch.executable import Executable
from arch.executable.kv import KvExecutable
from compiler.onnx.token_inputs import TokenInputs, token_inputs_of
from sim.app.generate_kv import KvGenerationFailed, generate_kv
from sim.app.language import LANGUAGE_KEY, LanguageModel
from sim.app.own_cache import OwnCache
from sim.app.token_run_inputs import prompt_ids
from sim.runtime.inputs import InputError
from sim.runtime.run import RunResult, run

if TYPE_CHECKING:
    from sim.app.session import Request

__all__ = [
    "DECODES",
    "Generation",
    "GenerationFailed",
    "generate",
    "generate_in_run",
    "generation_of",
]

#: How generation runs: prefill and one decode launch per character, or a full pass each.
DECODES = ("kv_cache", "recompute")


class GenerationFailed(RuntimeError):
    """A generation step was not bit-exact (its message names the step and the layer)."""


@dataclass(frozen=True)
class Generation:
    """What to generate: ``count`` characters after ``prompt`` (an ids-only model's: ids,
    and ``fed`` says where they came from); ``top_k`` None is greedy; ``decode`` one of
    :data:`DECODES`; ``batch`` sequences decoded together (KV cache)."""

    prompt: str | tuple[int, ...]
    count: int
    top_k: int | None = None
    seed: int = 0
    decode: str = "kv_cache"
    batch: int = 1
    fed: str | None = None

    @property
    def ids_prompt(self) -> tuple[tuple[int, ...], str] | None:
        """An ids-only model's prompt and where it came from (None: a prompt of text)."""
        return None if isinstance(self.prompt, str) else (self.prompt, self.fed or "")


def _pick(logits: np.ndarray, top_k: int | None, rng: np.random.Generator) -> int:
    """The next id: the largest logit (the first in a tie), or a draw from the softmax of the
    ``top_k`` largest."""
    if top_k is None:
        return int(np.argmax(logits))
    best = np.argsort(-logits, kind="stable")[:top_k]
    z = logits[best].astype(np.float64)
    weights = np.exp(z - z.max())
    return int(best[rng.choice(len(best), p=weights / weights.sum())])


def _step_entry(
    result: RunResult, config: AccelConfig, char: str | None, token: int
) -> dict[str, Any]:
    accel = [la for la in result.layers if la.device == "accel"]
    macs = sum(la.macs for la in accel)
    return {
        "token": token,
        "char": char,
        "cycles": result.cycles,
        "dram_read_bytes": sum(la.dram_read_bytes for la in accel),
        "dram_write_bytes": sum(la.dram_write_bytes for la in accel),
        "utilization": macs / (config.rows * config.cols * result.cycles) if result.cycles else 0.0,
        "bit_exact": result.first_mismatch is None,
    }


def generate(
    exe: Executable,
    lm: LanguageModel,
    spec: TokenInputs,
    want: Generation,
    backend: str,
    *,
    on_text: Callable[[str], None] = lambda text: None,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """Generate ``want.count`` characters (each passed to ``on_text`` as it comes); the
    report's ``generation``. A step that is not bit-exact is :class:`GenerationFailed`."""
    ids = list(lm.encode(want.prompt))
    rng = np.random.default_rng(want.seed)
    steps: list[dict[str, Any]] = []
    started = time.perf_counter()
    for step in range(want.count):
        window = ids[-lm.context :]
        last = len(window) - 1
        padded = np.asarray(window + [lm.pad] * (lm.context - len(window)), np.int64)
        x = spec.pack({spec.inputs[0].name: padded}, "generation window")
        where = workdir / f"step{step}" if workdir is not None else None
        result = run(exe, x, backend, workdir=where)
        if result.first_mismatch is not None:
            bad = result.first_mismatch
            raise GenerationFailed(
                f"generated character {step} is not bit-exact: layer {bad.name} ({bad.op}): "
                f"{bad.mismatch}"
            )
        (output,) = result.outputs.values()
        logits = np.asarray(output).reshape(lm.context, -1)[last]
        token = _pick(logits, want.top_k, rng)
        ids.append(token)
        on_text(lm.decode([token]))
        steps.append(_step_entry(result, exe.config, lm.text([token]), token))
    cycles = [s["cycles"] for s in steps]
    generated = [s["token"] for s in steps]
    return {
        "mode": "recompute",  # every character a full forward pass
        **lm.prompt_fields(want.prompt, want.fed),
        "text": lm.text(generated),
        "ids": generated,
        "count": want.count,
        "picking": _picking(want),
        "context": lm.context,
        "backend": backend,
        "prefill": None,  # (a KV-cache run: the prompt's launch)
        "steps": steps,
        "cycles_per_token": float(np.mean(cycles)) if cycles else 0.0,
        "bit_exact": all(s["bit_exact"] for s in steps),
        "wall_s": round(time.perf_counter() - started, 3),
    }


def _picking(want: Generation) -> str:
    if want.top_k is None:
        return "greedy"
    if want.batch == 1:
        return f"top-{want.top_k} (seed {want.seed})"
    return f"top-{want.top_k} (seeds {want.seed}..{want.seed + want.batch - 1})"


def generation_of(
    r: Request, model: str | None, source: onnx.ModelProto | None
) -> Generation | None:
    """``--generate`` of request ``r`` checked against the model: a language model, a prompt
    in its vocabulary - a character model's ``--prompt``, an ids-only model's ``--tokens`` (or
    seeded ids) -, ``--top-k`` at most its vocabulary (else InputError, exit 2)."""
    if r.generate is None:
        return None
    prompt, top_k = r.prompt, r.top_k
    lm = LanguageModel.of(source)
    spec = token_inputs_of(source) if source is not None else None
    what = f"model {model!r}" if model is not None else "an executable (--bundle)"
    if lm is None or spec is None:
        raise InputError(
            f"--generate is for language models (the zoo's chargpt, an ONNX model of token "
            f"inputs with {LANGUAGE_KEY!r} metadata, or one of token ids in and logits over "
            f"them out); {what} is not one"
        )
    if top_k is not None and top_k > lm.size:
        raise InputError(f"--top-k {top_k} is more than the model's {lm.size} {lm.words}")
    rest = (r.generate, top_k, r.seed, r.decode or "kv_cache", r.batch or 1)
    if lm.vocab is None:
        if prompt is not None:
            raise InputError(
                f"--prompt: {what} takes token ids, not text (no tokenizer is bundled); give "
                f"its prompt as ids with TOKENS=ids.npy (--tokens), or leave both out for "
                f"seeded ids"
            )
        ids, fed = prompt_ids(r.tokens, spec, r.seed)
        return Generation(ids, *rest, fed=fed)
    if prompt is None:
        raise InputError(f'--generate of {what} needs a --prompt to continue (PROMPT="...")')
    lm.encode(prompt)  # a character outside the vocabulary: InputError
    return Generation(prompt, *rest)


def generate_in_run(
    exe: Executable,
    source: onnx.ModelProto,
    want: Generation,
    backend: str,
    stream: Callable[[str], None],
    workdir: Path,
    kv: KvExecutable | None = None,
    own: OwnCache | None = None,
) -> tuple[dict[str, Any] | None, str | None]:
    """``make sim``'s generation (with a KV cache when ``kv`` is given): the prompt and each
    character to ``stream`` as they come, then a newline (a batch of B sequences: a line per
    sequence at the end, as a Python string literal; an ids-only model's ids as numbers, after
    a line saying so); the report's ``generation``, or None and the failure of a step that was
    not bit-exact. ``own``: the fp32 reference of a model exported with its cache."""
    lm, spec = LanguageModel.of(source), token_inputs_of(source)
    assert lm is not None and spec is not None  # (generation_of checked)
    batch = kv.batch if kv is not None else 1
    if lm.vocab is None:
        stream(f"no tokenizer is bundled for a model of ids alone: ids are printed ({want.fed})\n")
    if batch == 1:
        stream(_shown_prompt(lm, want))
    else:
        ids = lm.encode(want.prompt).tolist()
        stream(f"{batch} sequences after {ids if lm.vocab is None else repr(want.prompt)}:")
    try:
        if kv is not None:

            def pick(logits: np.ndarray, rng: np.random.Generator) -> int:
                return _pick(logits, want.top_k, rng)

            generated = generate_kv(kv, lm, spec, want, backend, pick, on_text=stream, own=own)
            generated["picking"] = _picking(want)
            for b, ids in enumerate(generated["ids_per_sequence"] if batch > 1 else []):
                stream(f"\n[{b}] {_shown_sequence(lm, want, ids)}")
            return generated, None
        return generate(exe, lm, spec, want, backend, on_text=stream, workdir=workdir), None
    except (GenerationFailed, KvGenerationFailed) as exc:
        return None, str(exc)
    finally:
        stream("\n")


def _shown_prompt(lm: LanguageModel, want: Generation) -> str:
    """The prompt as printed: its text, or its ids and an arrow."""
    if lm.vocab is None:
        return f"{lm.encode(want.prompt).tolist()} ->"
    return str(want.prompt)


def _shown_sequence(lm: LanguageModel, want: Generation, ids: list[int]) -> str:
    """One sequence of a batch on its line: the prompt and its text as a Python string
    literal (newlines escaped), or the prompt's ids and its own."""
    if lm.vocab is None:
        return _shown_prompt(lm, want) + lm.decode(ids)
    return repr(str(want.prompt) + lm.decode(ids))

"""Text generation with a KV cache (``--decode kv_cache``, the default): the prompt's prefill
launch gives the first character (row L-1 of its logits), then each further character is one
decode launch at the next position (:mod:`sim.runtime.kv_run`: the caches stay in the one
DRAM, each launch picks its position's descriptor table). Every launch is checked layer by
layer; the next character is picked on the host from the int8 logits as by recomputation.
Once the T positions are used, each further character is a prefill of the last T characters
(the window slides, exactly as by recomputation; a prompt longer than T: its last T). With
``kv.batch`` B > 1, B sequences of the prompt go together: B prefill launches, then one decode
launch a character for all B; sequence b samples with the seed ``want.seed + b``.

The report's ``generation`` has ``mode: "kv_cache"``, a ``prefill`` entry and per decode step
its position, cycles, DRAM bytes, utilization and the step's DRAM-bandwidth roofline: the
bytes it moved over the config's DRAM bytes per cycle (``dram_bound_cycles``; the step's
cycles over it: ``of_dram_bound``) beside the sum of its layers' rooflines
(:func:`arch.roofline.program_bounds`, the busier of DRAM and compute per layer).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from arch.config import AccelConfig
from arch.executable.kv import KvExecutable
from arch.ops.quant import dequantize
from arch.roofline import program_bounds
from compiler.kv_link import compile_kv
from compiler.onnx.token_inputs import TokenInputs
from sim.app.language import LanguageModel
from sim.app.own_cache import OwnCache, cosine
from sim.runtime.kv_run import KvLaunch, KvRun
from sim.runtime.run import backend_of

__all__ = ["generate_kv", "kv_for"]


class KvGenerationFailed(RuntimeError):
    """A launch was not bit-exact (its message names the launch and the layer)."""


def kv_for(model: str, seed: int, config: AccelConfig, calib: Any, batch: int = 1) -> KvExecutable:
    """The KV-cache executable of ``model`` for ``config`` decoding ``batch`` sequences,
    calibrated as the run's own executable (``calib``: the run's calibration, or None for the
    model's default) - the same quantized graph."""
    inputs, method = (calib.inputs, calib.method) if calib is not None else (None, "minmax")
    return compile_kv(
        model, config, seed=seed, calibration=inputs, calib_method=method, batch=batch
    )


def _counters(launches: list[KvLaunch], config: AccelConfig) -> dict[str, Any]:
    """Cycles, DRAM bytes and utilization of ``launches`` together."""
    cycles = sum(launch.result.cycles for launch in launches)
    layers = [la for launch in launches for la in launch.layers]
    read = sum(la.dram_read_bytes for la in layers)  # (from its PERF records)
    written = sum(la.dram_write_bytes for la in layers)
    moved = read + written
    bound = moved / config.dram_bytes_per_cycle
    macs = sum(la.macs for la in layers)
    return {
        "cycles": cycles,
        "dram_read_bytes": read,
        "dram_write_bytes": written,
        "utilization": macs / (config.rows * config.cols * cycles) if cycles else 0.0,
        "dram_bound_cycles": round(bound, 1),
        "of_dram_bound": round(cycles / bound, 4) if bound else 0.0,
        "bit_exact": all(launch.first_mismatch is None for launch in launches),
    }


def _failed(launch: KvLaunch, what: str) -> None:
    bad = launch.first_mismatch
    if bad is not None:
        raise KvGenerationFailed(f"{what} is not bit-exact: layer {bad.name} ({bad.op}): "
                                 f"{bad.mismatch}")  # fmt: skip


def generate_kv(
    kv: KvExecutable,
    lm: LanguageModel,
    spec: TokenInputs,
    want: Any,
    backend: str,
    pick: Callable[[np.ndarray, np.random.Generator], int],
    on_text: Callable[[str], None] = lambda text: None,
    own: OwnCache | None = None,
) -> dict[str, Any]:
    """Generate ``want.count`` characters after ``want.prompt`` for each of the ``kv.batch``
    sequences (sequence b picks with the seed ``want.seed + b``; with one sequence each
    character goes to ``on_text`` as it comes); the report's ``generation``. A launch not
    bit-exact is :class:`KvGenerationFailed`. With ``own`` (a model exported with its cache),
    sequence 0's logits of each launch before the window slides are compared with onnxruntime
    stepping the exported cache (``fp32_cosine``)."""
    config, batch, t = kv.prefill.config, kv.batch, kv.context
    texts: list[list[int]] = [list(lm.encode(want.prompt)) for _ in range(batch)]
    rngs = [np.random.default_rng(want.seed + b) for b in range(batch)]
    started = time.perf_counter()

    def window(ids: list[int]) -> np.ndarray:
        last = ids[-t:]  # (past the context, the window slides as by recomputation)
        padded = np.asarray(last + [lm.pad] * (t - len(last)), np.int64)
        return spec.pack({spec.inputs[0].name: padded}, "generation window")

    out = kv.prefill.reference.tensors[kv.prefill.reference.outputs[0]]

    def emit(codes: list[np.ndarray], fp32: np.ndarray | None) -> dict[str, Any]:
        tokens, rows = [], []
        for ids, rng, row in zip(texts, rngs, codes, strict=True):
            rows.append(dequantize(row, out.scale or 1.0, out.zero_point))  # (as a run's)
            tokens.append(pick(rows[-1], rng))
            ids.append(tokens[-1])
        if batch == 1:
            on_text(lm.decode(tokens[:1]))
        char = lm.text(tokens[:1])  # (None: ids only)
        entry: dict[str, Any] = {"token": tokens[0], "char": char, "ids": tokens}  # (a sequence)
        if fp32 is not None:
            entry["fp32_cosine"] = round(cosine(rows[0], fp32), 6)
        return entry

    run = KvRun(kv, backend_of(backend))

    def prefill() -> dict[str, Any]:
        length = min(len(texts[0]), t)
        launches = [run.prefill(window(ids), length, b) for b, ids in enumerate(texts)]
        for b, launch in enumerate(launches):
            what = "" if batch == 1 else f" of sequence {b}"
            _failed(launch, f"the prefill{what} of {length} characters")
        counters = _counters(launches, config)
        fp32 = own.start(texts[0]) if own is not None and len(texts[0]) <= t else None
        picked = emit([launch.logits[length - 1] for launch in launches], fp32)
        return {"launch": "prefill", "tokens": length, **picked, **counters}

    first = prefill()
    if "fp32_cosine" not in first:
        own = None  # (a prompt past the context: the exported cache would outgrow it)
    bounds = program_bounds(kv.decode.programs[0], config)
    roofline = sum(b.cycles for b in bounds.values())
    steps: list[dict[str, Any]] = []
    for _ in range(want.count - 1):
        position = len(texts[0]) - 1  # the character just picked
        if position >= t:  # the cache is full: a prefill of the last T characters
            own = None  # (the exported cache would grow on; the window slides)
            steps.append(prefill())
            continue
        launch = run.step(*(window(ids) for ids in texts))
        _failed(launch, f"the decode step at position {position}")
        counters = _counters([launch], config)
        fp32 = own.step(texts[0][-1]) if own is not None else None
        steps.append({"launch": "decode", "position": position,
                      **emit(list(launch.logits), fp32), **counters,
                      "roofline_cycles": roofline})  # fmt: skip
    generated = [ids[-want.count :] for ids in texts]
    words = [lm.text(ids) for ids in generated]
    report = {
        "mode": "kv_cache",
        **lm.prompt_fields(want.prompt, want.fed),
        "batch": batch,
        "text": words[0],
        "texts": words if lm.vocab is not None else None,  # (None: a model of ids alone)
        "ids": generated[0],
        "ids_per_sequence": generated,
        "count": want.count,
        "context": kv.context,
        "fp32_own_cache": _own_cache_summary([first, *steps]),
    }
    return {**report, **_launches(backend, first, steps, started)}


def _own_cache_summary(launches: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How close sequence 0's logits came to onnxruntime stepping the exported cache: the
    launches compared and the lowest cosine (None: no exported cache to step)."""
    cosines = [launch["fp32_cosine"] for launch in launches if "fp32_cosine" in launch]
    if not cosines:
        return None
    return {"launches": len(cosines), "cosine_min": min(cosines)}


def _launches(
    backend: str, first: dict[str, Any], steps: list[dict[str, Any]], started: float
) -> dict[str, Any]:
    """The generation's launches: the prompt's prefill, then a decode (or, past the context,
    a prefill) per character."""
    decoded = [s["cycles"] for s in steps if s["launch"] == "decode"]
    cycles = [s["cycles"] for s in steps]
    return {
        "backend": backend,
        "prefill": first,
        "steps": steps,
        "cycles_per_token": float(np.mean(cycles)) if cycles else 0.0,
        "decode_cycles_per_token": float(np.mean(decoded)) if decoded else 0.0,
        "bit_exact": True,  # (a launch that is not raises)
        "wall_s": round(time.perf_counter() - started, 3),
    }

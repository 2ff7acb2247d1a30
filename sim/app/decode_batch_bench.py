"""Decode of ``chargpt`` with a KV cache at a batch of B sequences (``make bench-decode``):
per B the cycles, DRAM bytes and utilization of a decode step of the B sequences on the ISA
simulator (16x16 with the norm unit), against the step's DRAM-bandwidth roofline. One prompt
for all B, greedy: every sequence is the BATCH=1 text (checked), and every launch bit-exact.
Cycles are deterministic, so one run each; ``python -m sim.app.decode_batch_bench`` prints the
table of docs/language-model.md and writes ``build/bench/decode_batch.json``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from arch.config import load_config
from compiler.compile import compile_model
from compiler.kv_link import compile_kv
from compiler.onnx.token_inputs import token_inputs_of
from sim.app.generate import Generation
from sim.app.generate_kv import generate_kv
from sim.app.language import LanguageModel

BATCHES = (1, 2, 4, 8, 16)
PROMPT = "Return the "
OUT = Path("build/bench/decode_batch.json")


def measure(batches: tuple[int, ...], count: int, config_name: str) -> dict[str, Any]:
    """{B: the mean decode step's cycles, DRAM bytes, utilization and roofline}."""
    config = load_config(config_name)
    source = compile_model("chargpt", config).source
    assert source is not None
    lm, spec = LanguageModel.of(source), token_inputs_of(source)
    assert lm is not None and spec is not None
    rows: dict[str, Any] = {}
    texts = set()
    for batch in batches:
        kv = compile_kv("chargpt", config, batch=batch)
        want = Generation(PROMPT, count)
        gen = generate_kv(kv, lm, spec, want, "isa", lambda logits, rng: int(np.argmax(logits)))
        texts.update(gen["texts"])
        steps = [s for s in gen["steps"] if s["launch"] == "decode"]
        cycles = float(np.mean([s["cycles"] for s in steps]))
        moved = float(np.mean([s["dram_read_bytes"] + s["dram_write_bytes"] for s in steps]))
        bound = moved / config.dram_bytes_per_cycle
        rows[str(batch)] = {
            "decode_cycles_per_step": cycles,
            "cycles_per_token": cycles / batch,
            "dram_bytes_per_step": moved,
            "utilization": round(float(np.mean([s["utilization"] for s in steps])), 4),
            "dram_bound_cycles": round(bound, 1),
            "of_dram_bound": round(cycles / bound, 4),
            "prefill_cycles": gen["prefill"]["cycles"],
            "bit_exact": gen["bit_exact"],
        }
    if len(texts) != 1:
        raise AssertionError(f"greedy sequences differ across batch sizes: {sorted(texts)}")
    return {"config": config_name, "prompt": PROMPT, "steps": count - 1, "batches": rows,
            "text": texts.pop()}  # fmt: skip


def table(result: dict[str, Any]) -> str:
    """The markdown table of docs/language-model.md."""
    lines = [
        "| BATCH | cycles per step | cycles per token | DRAM bytes per step | utilization "
        "| DRAM bound (cycles) | of the bound |",
        "|---|---|---|---|---|---|---|",
    ]
    for batch, row in result["batches"].items():
        lines.append(
            f"| {batch} | {row['decode_cycles_per_step']:,.0f} | {row['cycles_per_token']:,.0f} "
            f"| {row['dram_bytes_per_step']:,.0f} | {row['utilization']:.3f} "
            f"| {row['dram_bound_cycles']:,.0f} | {row['of_dram_bound']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=list(BATCHES))
    parser.add_argument("--generate", type=int, default=4, help="characters (decode steps + 1)")
    parser.add_argument("--config", default="default_norm")
    args = parser.parse_args(argv)
    result = measure(tuple(args.batches), args.generate, args.config)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    print(f"(greedy text of every sequence: {result['text']!r}; {OUT})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

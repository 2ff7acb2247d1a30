"""The executable bundle: one versioned file with everything a run needs.

A zip holding ``manifest.json`` (format version, config, launch registers, memory map, layer
table, input/output quantization), ``dram_image.bin`` (program, descriptors, weights, params)
and ``plan.pkl`` (the compiled plan, including the quantized graph the per-layer checks use).
"""

from __future__ import annotations

import io
import json
import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from arch.config import AccelConfig
from compiler.errors import CompileError
from compiler.plan import Plan

FORMAT_VERSION = 1


class BundleError(ValueError):
    """A bundle cannot be read or does not fit the requested config."""


def manifest(plan: Plan, model_name: str) -> dict[str, Any]:
    graph = plan.graph
    return {
        "format_version": FORMAT_VERSION,
        "model": model_name,
        "config": plan.config.to_dict(),
        "config_name": plan.config.name,
        "launch": plan.launch,
        "memory_map": [{"name": n, "addr": a, "bytes": s} for n, a, s in plan.regions],
        "input": {
            "name": graph.inputs[0],
            "scale": graph.tensors[graph.inputs[0]].scale,
            "layout": plan.tensors[graph.inputs[0]].layout,
        },
        "outputs": [{"name": n, "scale": graph.tensors[n].scale} for n in graph.outputs],
        "layers": [
            {
                "name": layer.name,
                "op": layer.node.op,
                "kind": layer.kind,
                "macs": layer.macs,
                "output": layer.output,
                "insn_range": list(layer.insn_range),
                "tiling": vars(layer.tiling) if layer.tiling else None,
            }
            for layer in plan.accel_layers()
        ],
        "instructions": len(plan.program.insns) if plan.program else 0,
        "descriptors": len(plan.program.descs) if plan.program else 0,
    }


def save_bundle(plan: Plan, path: Path, model_name: str) -> Path:
    if plan.image is None:
        raise CompileError(None, None, "the plan has not been emitted")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr("manifest.json", json.dumps(manifest(plan, model_name), indent=1))
        archive.writestr("dram_image.bin", plan.image.tobytes())
        archive.writestr("plan.pkl", pickle.dumps(plan, protocol=pickle.HIGHEST_PROTOCOL))
    return path


def load_bundle(path: Path, config: AccelConfig | None = None) -> tuple[Plan, dict[str, Any]]:
    """Read a bundle; with ``config``, refuse one compiled for a different config."""
    try:
        with zipfile.ZipFile(path) as archive:
            info = json.loads(archive.read("manifest.json"))
            if not isinstance(info, dict):
                raise BundleError(f"{path}: manifest.json is not a JSON object")
            if info.get("format_version") != FORMAT_VERSION:
                raise BundleError(
                    f"{path}: bundle format {info.get('format_version')}, "
                    f"this tool reads {FORMAT_VERSION}"
                )
            plan = pickle.loads(archive.read("plan.pkl"))
            if not isinstance(plan, Plan):
                raise BundleError(f"{path}: plan.pkl holds a {type(plan).__name__}, not a plan")
            plan.image = np.frombuffer(archive.read("dram_image.bin"), dtype=np.uint8).copy()
    except BundleError:
        raise
    except (
        OSError,
        KeyError,
        EOFError,
        ValueError,  # includes JSON and UTF-8 decoding errors
        AttributeError,  # a pickle naming classes or attributes that do not exist
        ImportError,
        IndexError,
        TypeError,
        zipfile.BadZipFile,
        pickle.UnpicklingError,
    ) as exc:
        raise BundleError(f"{path} is not a readable bundle: {exc}") from None
    if config is not None and config != plan.config:
        raise BundleError(
            f"{path} was compiled for config {plan.config.name}, not {config.name}; recompile it"
        )
    return plan, info


def read_manifest(data: bytes) -> dict[str, Any]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return json.loads(archive.read("manifest.json"))

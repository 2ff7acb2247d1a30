"""Writing an executable: the manifest as plain JSON, every array a numbered ``.npy`` member,
and the digest over them all (:func:`save`)."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from arch.executable.container import (
    DIGEST_MEMBER,
    DTYPES,
    FORMAT,
    FORMAT_VERSION,
    ExecutableError,
)
from arch.executable.digest import content_digest
from arch.executable.format import (
    DeviceProgram,
    DramTensor,
    Executable,
    HostStep,
    Step,
)


class _Arrays:
    """Collects arrays as numbered members, with the table the manifest declares."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.table: dict[str, dict[str, Any]] = {}

    def add(self, array: np.ndarray) -> str:
        array = np.ascontiguousarray(array)
        if array.dtype.name not in DTYPES:
            raise ExecutableError(f"cannot store a {array.dtype} array; dtypes: {DTYPES}")
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        member = f"arrays/{len(self.blobs)}.npy"
        self.blobs[member] = buffer.getvalue()
        self.table[member] = {
            "dtype": array.dtype.name,
            "shape": list(array.shape),
            "sha256": hashlib.sha256(self.blobs[member]).hexdigest(),  # the whole member
        }
        return member


def _tensor_json(t: DramTensor) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "addr": t.addr,
        "h": t.h,
        "w": t.w,
        "channels": t.channels,
        "logical_channels": t.logical_channels,
        "layout": t.layout,
        "pixel_bytes": t.pixel_bytes,
    }
    if t.layout == "im2col":
        entry.update(kernel=t.kernel, stride=t.stride, pads=t.pads)
        if t.pad_value:
            entry["pad_value"] = t.pad_value
    return entry


def _step_json(step: Step, arrays: _Arrays) -> dict[str, Any]:
    if isinstance(step, HostStep):
        return {"kind": "host", "name": step.name, "op": step.op, "inputs": step.inputs,
                "outputs": step.outputs, "reason": step.reason}  # fmt: skip
    return {
        "kind": "device",
        "name": step.name,
        "image": arrays.add(step.image),
        "launch": step.launch.as_dict(),
        "instructions": step.instructions,
        "perf_base": step.perf_base,
        "regions": [[r.name, r.addr, r.nbytes] for r in step.regions],
        "inputs": step.inputs,
        "outputs": step.outputs,
        "tensors": {name: _tensor_json(t) for name, t in step.tensors.items()},
        "layers": [
            {
                "name": layer.name,
                "op": layer.op,
                "kind": layer.kind,
                "macs": layer.macs,
                "output": layer.output,
                "insn_range": list(layer.insn_range),
                "perf_index": layer.perf_index,
                "tiling": layer.tiling,
            }
            for layer in step.layers
        ],
    }


def manifest(exe: Executable, arrays: _Arrays) -> dict[str, Any]:
    ref = exe.reference
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model": exe.model,
        "config_name": exe.config.name,
        "config": exe.config.to_dict(),
        "steps": [_step_json(step, arrays) for step in exe.steps],
        "reference": {
            "inputs": ref.inputs,
            "outputs": ref.outputs,
            "tensors": {
                name: {"shape": list(t.shape), "scale": t.scale}
                | ({"zero_point": t.zero_point} if t.zero_point else {})
                for name, t in ref.tensors.items()
            },
            "nodes": [
                {
                    "name": node.name,
                    "op": node.op,
                    "inputs": node.inputs,
                    "output": node.output,
                    "attrs": node.attrs,
                    "params": {key: arrays.add(value) for key, value in node.params.items()},
                }
                for node in ref.nodes
            ],
        },
    }


def check_images(exe: Executable) -> None:
    """Raise :class:`ExecutableError` if a device program's DRAM image is not 1-D uint8 or does
    not fit, with its regions, in the config's DRAM (what :func:`load` checks of a file, for an
    executable made or changed in memory)."""
    dram = exe.config.dram_bytes
    for index, step in enumerate(exe.steps):
        if not isinstance(step, DeviceProgram):
            continue
        image = step.image
        if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 1:
            what = f"{image.dtype} {image.shape}" if isinstance(image, np.ndarray) else "no array"
            raise ExecutableError(f"step {index} image is {what}; it must be 1-D uint8")
        if step.dram_end > dram:
            raise ExecutableError(
                f"step {index} ({step.name}) needs {step.dram_end} bytes of DRAM (its image is "
                f"{image.size}): more than the config's DRAM ({dram})"
            )


def save(exe: Executable, path: str | Path) -> Path:
    """Write ``exe`` to ``path`` (a zip; compressed), sealed by the digest of its members; an
    image that does not fit the config's DRAM is refused (:func:`check_images`)."""
    check_images(exe)
    path = Path(path)
    arrays = _Arrays()
    text = json.dumps({**manifest(exe, arrays), "arrays": arrays.table}, indent=1)
    members = {"manifest.json": text.encode(), **arrays.blobs}
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for member, blob in members.items():
            archive.writestr(member, blob)
        archive.writestr(DIGEST_MEMBER, content_digest(members) + "\n")
    return path

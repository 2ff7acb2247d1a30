"""The executable file: a zip of ``manifest.json`` and ``.npy`` arrays, compressed. No pickle.

``manifest.json`` holds the format name and version, the model name, the config, the steps
(device programs and host steps) and the reference graph, all as plain JSON; every array is a
member ``arrays/<n>.npy`` that the manifest names, with its dtype, shape and SHA-256.

Reading trusts nothing in the file: the manifest must name only listed members inside the
archive, every array must have the dtype, shape and digest the manifest declares (and a dtype of
:data:`DTYPES`), no member may expand beyond what its shape needs, and every address, size and
name must be consistent (:func:`load`). What is wrong is said in one line
(:class:`ExecutableError`), never by a traceback.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from arch import isa
from arch.config import AccelConfig, ConfigError
from arch.executable.format import (
    HOST_OPS,
    LAYOUTS,
    DeviceProgram,
    DramTensor,
    Executable,
    HostStep,
    LayerEntry,
    ReferenceGraph,
    RefNode,
    Region,
    Step,
    TensorSpec,
)
from arch.isa import IsaError, Launch
from arch.reference import REFERENCE_OPS

FORMAT = "cosim-executable"
FORMAT_VERSION = 1
SUFFIX = ".cosim"
#: dtypes an array may have.
DTYPES = ("int8", "uint8", "int32", "int64", "float32")
_MEMBER = re.compile(r"arrays/[0-9]+\.npy")
_NPY_HEADER_MAX = 4096  # bytes of .npy header allowed beyond the data


class ExecutableError(ValueError):
    """An executable cannot be read, is inconsistent, or does not fit the requested config."""


# --- writing -------------------------------------------------------------------------------------


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
            "sha256": hashlib.sha256(array.tobytes()).hexdigest(),
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
    }
    if t.layout == "im2col":
        entry.update(kernel=t.kernel, stride=t.stride, pads=t.pads)
    return entry


def _step_json(step: Step, arrays: _Arrays) -> dict[str, Any]:
    if isinstance(step, HostStep):
        return {"kind": "host", "name": step.name, "op": step.op, "inputs": step.inputs,
                "outputs": step.outputs}  # fmt: skip
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
                name: {"shape": list(t.shape), "scale": t.scale} for name, t in ref.tensors.items()
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


def save(exe: Executable, path: str | Path) -> Path:
    """Write ``exe`` to ``path`` (a zip; compressed)."""
    path = Path(path)
    arrays = _Arrays()
    text = json.dumps({**manifest(exe, arrays), "arrays": arrays.table}, indent=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        archive.writestr("manifest.json", text)
        for member, blob in arrays.blobs.items():
            archive.writestr(member, blob)
    return path


# --- reading -------------------------------------------------------------------------------------


class _Reader:
    """Validated access to one archive; every error names the file and what is wrong."""

    def __init__(self, path: Path, archive: zipfile.ZipFile, table: Any) -> None:
        self.path, self.archive = path, archive
        if not isinstance(table, dict):
            self.fail("'arrays' must be an object of members")
        self.table: dict[str, Any] = table
        self.members = {info.filename: info for info in archive.infolist()}

    def fail(self, message: str) -> None:
        raise ExecutableError(f"{self.path}: {message}")

    def array(self, member: Any, what: str, dtypes: tuple[str, ...] = DTYPES) -> np.ndarray:
        if not isinstance(member, str) or not _MEMBER.fullmatch(member):
            self.fail(f"{what} names {member!r}, not an array member of the archive (arrays/N.npy)")
        if member not in self.table:
            self.fail(f"{what} names {member}, which the manifest's array table does not declare")
        if member not in self.members:
            self.fail(f"{what}: member {member} is missing from the archive")
        declared = self.table[member]
        dtype, shape = declared.get("dtype"), declared.get("shape")
        if dtype not in dtypes:
            self.fail(f"{what} ({member}) has dtype {dtype!r}; expected one of {', '.join(dtypes)}")
        if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
            self.fail(f"{what} ({member}) has a bad shape {shape!r}")
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if self.members[member].file_size > nbytes + _NPY_HEADER_MAX:
            self.fail(
                f"{what} ({member}) expands to {self.members[member].file_size} bytes, more than "
                f"its declared {dtype} {tuple(shape)} needs ({nbytes} bytes)"
            )
        try:
            value = np.load(io.BytesIO(self.archive.read(member)), allow_pickle=False)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
            self.fail(f"{what} ({member}) is not a readable .npy array: {exc}")
        if value.dtype.name != dtype or list(value.shape) != shape:
            self.fail(
                f"{what} ({member}) is {value.dtype} {value.shape}; the manifest declares "
                f"{dtype} {tuple(shape)}"
            )
        if hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest() != declared.get(
            "sha256"
        ):
            self.fail(f"{what} ({member}) does not match its SHA-256: the file was altered")
        return value


def _get(reader: _Reader, obj: Any, key: str, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        reader.fail(f"{what}: field {key!r} is missing")
    value = obj[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        reader.fail(f"{what}: field {key!r} must be {names}, not {value!r}")
    return value


def _ints(reader: _Reader, value: Any, count: int, what: str) -> tuple[int, ...]:
    if (
        not isinstance(value, list)
        or len(value) != count
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        reader.fail(f"{what} must be a list of {count} integers, not {value!r}")
    return tuple(value)


def _names(reader: _Reader, value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        reader.fail(f"{what} must be a list of tensor names, not {value!r}")
    return list(value)


def _reference(reader: _Reader, data: Any) -> ReferenceGraph:
    what = "reference"
    tensors: dict[str, TensorSpec] = {}
    for name, entry in _get(reader, data, "tensors", dict, what).items():
        shape = _get(reader, entry, "shape", list, f"reference tensor {name!r}")
        scale = entry.get("scale")
        if scale is not None and (not isinstance(scale, float | int) or not scale > 0):
            reader.fail(f"reference tensor {name!r}: scale must be a positive number or null")
        tensors[name] = TensorSpec(
            name, _ints(reader, shape, len(shape), f"tensor {name!r} shape"), scale
        )
    nodes: list[RefNode] = []
    inputs = _names(reader, _get(reader, data, "inputs", list, what), "reference inputs")
    known = set(inputs)
    for i, entry in enumerate(_get(reader, data, "nodes", list, what)):
        where = f"reference node {i}"
        name = _get(reader, entry, "name", str, where)
        op = _get(reader, entry, "op", str, where)
        if op not in REFERENCE_OPS:
            reader.fail(f"{where} ({name}): op {op!r} is not one of {', '.join(REFERENCE_OPS)}")
        node_inputs = _names(reader, _get(reader, entry, "inputs", list, where), f"{where} inputs")
        output = _get(reader, entry, "output", str, where)
        for tensor in (*node_inputs, output):
            if tensor not in tensors:
                reader.fail(f"{where} ({name}): tensor {tensor!r} is not in the tensor table")
        missing = [t for t in node_inputs if t not in known]
        if missing:
            reader.fail(f"{where} ({name}): input {missing[0]!r} is not produced before it")
        known.add(output)
        attrs = {
            key: tuple(value) if isinstance(value, list) else value
            for key, value in _get(reader, entry, "attrs", dict, where).items()
        }
        params = {
            key: reader.array(member, f"{where} ({name}) param {key!r}")
            for key, member in _get(reader, entry, "params", dict, where).items()
        }
        nodes.append(RefNode(name, op, node_inputs, output, attrs, params))
    outputs = _names(reader, _get(reader, data, "outputs", list, what), "reference outputs")
    for tensor in outputs:
        if tensor not in known:
            reader.fail(f"reference output {tensor!r} is produced by no node")
    for tensor in inputs:
        if tensor not in tensors:
            reader.fail(f"reference input {tensor!r} is not in the tensor table")
    return ReferenceGraph(nodes, tensors, inputs, outputs)


def _device(reader: _Reader, data: dict, index: int, config: AccelConfig) -> DeviceProgram:
    where = f"step {index}"
    name = _get(reader, data, "name", str, where)
    image = reader.array(_get(reader, data, "image", str, where), f"{where} image", ("uint8",))
    if image.ndim != 1 or image.size > config.dram_bytes:
        reader.fail(
            f"{where} image is {image.shape} bytes; it must be 1-D and fit the config's DRAM "
            f"({config.dram_bytes} bytes)"
        )
    launch_data = _get(reader, data, "launch", dict, where)
    try:
        launch = Launch(**{k: launch_data.get(k) for k in ("insn_base", "desc_base", "desc_count")})
    except IsaError as exc:
        reader.fail(f"{where}: {exc}")
    instructions = _get(reader, data, "instructions", int, where)
    perf_base = _get(reader, data, "perf_base", int, where)

    def inside(addr: int, nbytes: int, what: str) -> None:
        if addr < 0 or nbytes < 0 or addr + nbytes > config.dram_bytes:
            reader.fail(
                f"{where}: {what} spans [{addr}, {addr + nbytes}), outside the config's DRAM "
                f"(0..{config.dram_bytes})"
            )

    insn_bytes = instructions * isa.INSN_BYTES
    if instructions < 1 or launch.insn_base + insn_bytes > image.size:
        reader.fail(f"{where}: {instructions} instructions at {launch.insn_base} overrun the image")
    regions = []
    for entry in _get(reader, data, "regions", list, where):
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)):
            reader.fail(f"{where}: a region must be [name, addr, bytes], not {entry!r}")
        addr, nbytes = _ints(reader, entry[1:], 2, f"{where} region {entry[0]!r}")
        inside(addr, nbytes, f"region {entry[0]!r}")
        regions.append(Region(entry[0], addr, nbytes))
    tensors = {}
    for tname, t in _get(reader, data, "tensors", dict, where).items():
        what = f"{where} tensor {tname!r}"
        layout = _get(reader, t, "layout", str, what)
        if layout not in LAYOUTS:
            reader.fail(f"{what}: layout {layout!r} is not one of {', '.join(LAYOUTS)}")
        addr, h, w, channels = (
            _get(reader, t, k, int, what) for k in ("addr", "h", "w", "channels")
        )
        im2col = layout == "im2col"
        tensor = DramTensor(
            tname,
            addr,
            h,
            w,
            channels,
            logical_channels=_get(reader, t, "logical_channels", int, what),
            layout=layout,
            kernel=_ints(reader, t.get("kernel"), 2, f"{what} kernel") if im2col else None,
            stride=_ints(reader, t.get("stride"), 2, f"{what} stride") if im2col else None,
            pads=_ints(reader, t.get("pads"), 4, f"{what} pads") if im2col else None,
        )
        if min(tensor.h, tensor.w, tensor.channels, tensor.logical_channels) < 1:
            reader.fail(f"{what}: sizes must be positive")
        inside(tensor.addr, tensor.nbytes, f"tensor {tname!r}")
        tensors[tname] = tensor
    layers = []
    for i, entry in enumerate(_get(reader, data, "layers", list, where)):
        what = f"{where} layer {i}"
        start, end = _ints(reader, entry.get("insn_range"), 2, f"{what} insn_range")
        if not 0 <= start <= end <= instructions:
            reader.fail(f"{what}: instructions [{start}, {end}) outside 0..{instructions}")
        perf_index = _get(reader, entry, "perf_index", int, what)
        record = isa.PERF_RECORD.nbytes
        inside(perf_base + perf_index * record, record, f"PERF record of layer {i}")
        output = _get(reader, entry, "output", str, what)
        if output not in tensors:
            reader.fail(f"{what}: output {output!r} has no place in DRAM")
        tiling = entry.get("tiling")
        if tiling is not None and not (
            isinstance(tiling, dict) and all(isinstance(v, int) for v in tiling.values())
        ):
            reader.fail(f"{what}: tiling must be an object of integers")
        layers.append(
            LayerEntry(
                _get(reader, entry, "name", str, what),
                _get(reader, entry, "op", str, what),
                _get(reader, entry, "kind", str, what),
                _get(reader, entry, "macs", int, what),
                output,
                (start, end),
                perf_index,
                tiling,
            )
        )
    inputs = _names(reader, _get(reader, data, "inputs", list, where), f"{where} inputs")
    outputs = _names(reader, _get(reader, data, "outputs", list, where), f"{where} outputs")
    for tname in (*inputs, *outputs):
        if tname not in tensors:
            reader.fail(f"{where}: tensor {tname!r} has no place in DRAM")
    return DeviceProgram(
        name, image, launch, regions, perf_base, layers, tensors, inputs, outputs, instructions
    )


def _host(reader: _Reader, data: dict, index: int) -> HostStep:
    where = f"step {index}"
    op = _get(reader, data, "op", str, where)
    if op not in HOST_OPS:
        reader.fail(f"{where}: host op {op!r} is not one of {', '.join(HOST_OPS)}")
    return HostStep(
        _get(reader, data, "name", str, where),
        op,
        _names(reader, _get(reader, data, "inputs", list, where), f"{where} inputs"),
        _names(reader, _get(reader, data, "outputs", list, where), f"{where} outputs"),
    )


def load(path: str | Path, config: AccelConfig | None = None) -> Executable:
    """Read and check an executable; with ``config``, refuse one compiled for another config."""
    path = Path(path)
    if not path.is_file():
        raise ExecutableError(f"{path}: no such executable file")
    try:
        with zipfile.ZipFile(path) as archive:
            return _load(path, archive, config)
    except zipfile.BadZipFile as exc:
        raise ExecutableError(f"{path} is not an executable (not a zip archive: {exc})") from None
    except (OSError, EOFError, RuntimeError) as exc:  # truncated or unreadable members
        raise ExecutableError(f"{path} cannot be read: {exc}") from None


def _load(path: Path, archive: zipfile.ZipFile, config: AccelConfig | None) -> Executable:
    try:
        info = archive.getinfo("manifest.json")
    except KeyError:
        raise ExecutableError(f"{path} is not an executable: no manifest.json") from None
    if info.file_size > 64 << 20:
        raise ExecutableError(f"{path}: manifest.json is {info.file_size} bytes, over 64 MiB")
    try:
        data = json.loads(archive.read(info))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ExecutableError(f"{path}: manifest.json is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ExecutableError(f"{path} is not a {FORMAT} file (no 'format': {FORMAT!r})")
    if data.get("format_version") != FORMAT_VERSION:
        raise ExecutableError(
            f"{path}: executable format version {data.get('format_version')!r}; this tool reads "
            f"version {FORMAT_VERSION} - recompile the model"
        )
    reader = _Reader(path, archive, data.get("arrays"))
    try:
        built_for = AccelConfig.from_dict(_get(reader, data, "config", dict, "manifest"))
    except (ConfigError, TypeError) as exc:
        raise ExecutableError(f"{path}: the config it was compiled for is invalid: {exc}") from None
    if config is not None and config != built_for:
        raise ExecutableError(
            f"{path} was compiled for config {built_for.name}, not {config.name}; "
            "recompile it for this config (or run it with its own)"
        )
    steps: list[Step] = []
    for index, step in enumerate(_get(reader, data, "steps", list, "manifest")):
        kind = _get(reader, step, "kind", str, f"step {index}")
        if kind == "device":
            steps.append(_device(reader, step, index, built_for))
        elif kind == "host":
            steps.append(_host(reader, step, index))
        else:
            reader.fail(f"step {index}: kind {kind!r} is not 'device' or 'host'")
    reference = _reference(reader, _get(reader, data, "reference", dict, "manifest"))
    exe = Executable(_get(reader, data, "model", str, "manifest"), built_for, steps, reference)
    _check_tensors(reader, exe)
    return exe


def _check_tensors(reader: _Reader, exe: Executable) -> None:
    """Every tensor a step reads or writes, and every layer output, is in the reference graph."""
    ref = exe.reference
    if len(ref.inputs) != 1:
        reader.fail(f"the reference graph must have one input, not {ref.inputs}")
    available = set(ref.inputs)
    for index, step in enumerate(exe.steps):
        names = [*step.inputs, *step.outputs]
        if isinstance(step, DeviceProgram):
            names += [layer.output for layer in step.layers]
        for tensor in names:
            if tensor not in ref.tensors:
                reader.fail(f"step {index} ({step.name}): tensor {tensor!r} is not in the graph")
        for tensor in step.inputs:
            if tensor not in available:
                reader.fail(f"step {index} ({step.name}): input {tensor!r} is produced by no step")
        if isinstance(step, HostStep):
            node = ref.producer(step.outputs[0]) if len(step.outputs) == 1 else None
            if node is None or node.op != step.op or node.inputs != step.inputs:
                reader.fail(
                    f"step {index} ({step.name}): a host step must be the reference node of its "
                    "one output, with the same op and inputs"
                )
        available.update(step.outputs)
    for tensor in ref.outputs:
        if tensor not in available:
            reader.fail(f"graph output {tensor!r} is produced by no step")

"""The executable file: a zip of ``manifest.json`` and ``.npy`` arrays, compressed. No pickle.

``manifest.json`` holds the format name and version, the model name, the config, the steps
(device programs and host steps) and the reference graph, all as plain JSON; every array is a
member ``arrays/<n>.npy`` that the manifest names, with its dtype, shape and SHA-256.

Reading trusts nothing in the file (:func:`load`): the manifest must name only listed members
inside the archive; no member is inflated beyond what it is expected to hold (manifest.json:
:data:`MANIFEST_MAX_BYTES`; an array: exactly its .npy header and data), whatever the zip says;
every array must have a dtype of :data:`DTYPES`, a bounded size (an image: the config's DRAM;
others :data:`ARRAY_MAX_BYTES`), a .npy header that agrees with the manifest - read before any
data - and the declared digest; every field must have its type (``true`` is no integer), every
address and size must lie inside the program's memory, every name that becomes a path must be
:func:`~arch.executable.format.is_path_name`, and the steps must agree with the reference graph,
which must be one :func:`arch.reference.check_graph` accepts - so what loads also runs. What is
wrong is said in one bounded line (:class:`ExecutableError`), never by a traceback.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
import zipfile
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from arch import host_runtime, isa
from arch.config import AccelConfig, ConfigError
from arch.executable.format import (
    HOST_OPS,
    LAYER_KINDS,
    LAYOUTS,
    NAME_MAX,
    TILING_KEYS,
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
    is_path_name,
)
from arch.host_runtime import HostModelError
from arch.isa import IsaError, Launch
from arch.reference import MAX_ELEMENTS, REFERENCE_OPS, ReferenceError, check_graph

FORMAT = "cosim-executable"
#: Reference ops whose output is a view of their inputs' bytes (no layer writes it).
VIEW_OPS = ("flatten", "concat", "split_heads", "split_heads_t", "merge_heads")
FORMAT_VERSION = 4
#: Versions this tool reads. 2 added zero points, ACCUM gates, scale layers, DWCONV and channel
#: slices; 3 the transformer's tokens and heads layouts, batch_matmul layers and the heads
#: views; 4 the transposed heads view of k (split_heads_t) over the tokens_t layout its
#: producer's transposing stores write. An older file has none of them, and their defaults
#: mean what it meant.
READABLE_VERSIONS = (1, 2, 3, 4)
SUFFIX = ".cosim"
#: dtypes an array may have.
DTYPES = ("int8", "uint8", "int32", "int64", "float32")
_MEMBER = re.compile(r"arrays/[0-9]+\.npy")


class ExecutableError(ValueError):
    """An executable cannot be read, is inconsistent, or does not fit the requested config."""


def check_config(
    exe: Executable, config: AccelConfig | None, source: str | Path | None = None
) -> None:
    """Refuse ``exe`` for a ``config`` (if given) other than the one it was compiled for;
    ``source``: the file it was read from, for the message."""
    if config is not None and config != exe.config:
        what = str(source) if source is not None else f"executable {exe.model!r}"
        raise ExecutableError(
            f"{what} was compiled for config {exe.config.name}, not {config.name}; "
            "recompile it for this config (or run it with its own)"
        )


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
    """Write ``exe`` to ``path`` (a zip; compressed); an image that does not fit the config's
    DRAM is refused (:func:`check_images`)."""
    check_images(exe)
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

#: The most bytes manifest.json may hold.
MANIFEST_MAX_BYTES = 64 << 20
#: The most bytes an array other than a device image may hold (an image: the config's DRAM).
ARRAY_MAX_BYTES = 1 << 30
#: The most elements a tensor of the reference graph may have.
TENSOR_MAX_ELEMENTS = MAX_ELEMENTS
_NDIM_MAX = 8
_NPY_HEADER_MAX = 4096  # bytes of .npy header allowed beyond the data
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TEXT_MAX = 1000  # characters of a displayed name (layer, node, host step)


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters: a file's values in one bounded line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _clip(text: str, limit: int = 200) -> str:
    """``text`` (an exception's message) on one line, cut to ``limit`` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Reader:
    """Validated access to one archive; every error names the file and what is wrong."""

    def __init__(self, path: Path, archive: zipfile.ZipFile, table: Any) -> None:
        self.path, self.archive = path, archive
        if not isinstance(table, dict):
            self.fail("'arrays' must be an object of members")
        self.table: dict[str, Any] = table
        self.members = {info.filename: info for info in archive.infolist()}

    def fail(self, message: str) -> NoReturn:
        raise ExecutableError(f"{self.path}: {_clip(message, 600)}")

    def array(
        self,
        member: Any,
        what: str,
        dtypes: tuple[str, ...] = DTYPES,
        max_bytes: int = ARRAY_MAX_BYTES,
        limit: str = "the limit for an array",
    ) -> np.ndarray:
        """The array ``member`` as the manifest declares it: its .npy header is read first and
        must agree; then exactly the declared bytes are read (never more), and their digest."""
        if not isinstance(member, str) or not _MEMBER.fullmatch(member):
            self.fail(
                f"{what} names {_short(member)}, not an array member of the archive (arrays/N.npy)"
            )
        if member not in self.table:
            self.fail(f"{what} names {member}, which the manifest's array table does not declare")
        if member not in self.members:
            self.fail(f"{what}: member {member} is missing from the archive")
        where = f"{what} ({member})"
        declared = self.table[member]
        if not isinstance(declared, dict):
            self.fail(
                f"the array table's entry of {member} must be an object with dtype, shape and "
                f"sha256, not {_short(declared)}"
            )
        dtype, shape, digest = (declared.get(k) for k in ("dtype", "shape", "sha256"))
        if not isinstance(dtype, str) or dtype not in dtypes:
            self.fail(f"{where} has dtype {_short(dtype)}; expected one of {', '.join(dtypes)}")
        if (
            not isinstance(shape, list)
            or len(shape) > _NDIM_MAX
            or not all(_is_int(n) and n >= 0 for n in shape)
        ):
            self.fail(
                f"{where} has a bad shape {_short(shape)}; expected a list of at most "
                f"{_NDIM_MAX} integers >= 0"
            )
        # dims capped first: math.prod of huge ints is exact but needlessly slow
        nbytes = max_bytes + 1
        if all(n <= max_bytes for n in shape):
            nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        if nbytes > max_bytes:
            self.fail(
                f"{where} is declared {dtype} {_short(shape)}: more bytes than {limit} "
                f"({max_bytes})"
            )
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            self.fail(f"{where} has sha256 {_short(digest)}; expected 64 lowercase hex digits")
        info = self.members[member]
        try:
            with self.archive.open(info) as stream:
                header_bytes = self._npy_header(stream, where, dtype, shape)
                if info.file_size != header_bytes + nbytes:
                    self.fail(
                        f"{where} is {info.file_size} bytes; its {header_bytes}-byte header and "
                        f"its declared {dtype} {tuple(shape)} make {header_bytes + nbytes}"
                    )
                data = stream.read(nbytes + 1)  # the zip's size may lie: never more than this
        except (zipfile.BadZipFile, OSError, EOFError, RuntimeError, MemoryError) as exc:
            self.fail(f"{where} cannot be read: {type(exc).__name__}: {_clip(str(exc))}")
        if len(data) != nbytes:
            self.fail(f"{where} holds {len(data)} bytes of data; its header says {nbytes}")
        if hashlib.sha256(data).hexdigest() != digest:
            self.fail(f"{where} does not match its SHA-256: the file was altered")
        return np.frombuffer(bytearray(data), dtype=dtype).reshape(shape)

    def _npy_header(self, stream: Any, where: str, dtype: str, shape: list[int]) -> int:
        """Read the .npy header off ``stream``; check it says ``dtype`` and ``shape`` in C order
        (native byte order); return its length."""
        try:
            version = np.lib.format.read_magic(stream)
            if version == (1, 0):
                header = np.lib.format.read_array_header_1_0(stream, _NPY_HEADER_MAX)
            elif version == (2, 0):
                header = np.lib.format.read_array_header_2_0(stream, _NPY_HEADER_MAX)
            else:
                self.fail(f"{where} is .npy version {version}; expected 1.0 or 2.0")
        except ValueError as exc:
            if isinstance(exc, ExecutableError):
                raise
            self.fail(f"{where} is not a readable .npy array: {_clip(str(exc))}")
        got_shape, fortran, got_dtype = header
        if got_dtype != np.dtype(dtype) or list(got_shape) != shape or fortran:
            order = " in Fortran order" if fortran else ""
            self.fail(
                f"{where} is {_clip(str(got_dtype), 40)} {_short(got_shape)}{order}; the "
                f"manifest declares {dtype} {tuple(shape)}"
            )
        return int(stream.tell())


def _get(reader: _Reader, obj: Any, key: str, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(obj, dict):
        reader.fail(f"{what} must be an object, not {_short(obj)}")
    if key not in obj:
        reader.fail(f"{what}: field {key!r} is missing")
    value = obj[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        reader.fail(f"{what}: field {key!r} must be {names}, not {_short(value)}")
    return value


def _span(lo: int | None, hi: int | None) -> str:
    if lo is None:
        return "" if hi is None else f" <= {hi}"
    return f" >= {lo}" if hi is None else f" in {lo}..{hi}"


def _in(value: int, lo: int | None, hi: int | None) -> bool:
    return (lo is None or value >= lo) and (hi is None or value <= hi)


def _int(
    reader: _Reader, obj: Any, key: str, what: str, lo: int | None = 0, hi: int | None = None
) -> int:
    value = _get(reader, obj, key, int, what)
    if not _in(value, lo, hi):
        reader.fail(f"{what}: field {key!r} must be an integer{_span(lo, hi)}, not {_short(value)}")
    return int(value)


def _ints(
    reader: _Reader,
    value: Any,
    count: int,
    what: str,
    lo: int | None = 0,
    hi: int | None = None,
) -> tuple[int, ...]:
    if (
        not isinstance(value, list)
        or len(value) != count
        or not all(_is_int(v) and _in(v, lo, hi) for v in value)
    ):
        reader.fail(
            f"{what} must be a list of {count} integers{_span(lo, hi)}, not {_short(value)}"
        )
    return tuple(value)


def _names(reader: _Reader, value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        reader.fail(f"{what} must be a list of tensor names, not {_short(value)}")
    return list(value)


def _text(reader: _Reader, obj: Any, key: str, what: str) -> str:
    """A displayed name: printable, at most :data:`_TEXT_MAX` characters."""
    value = _get(reader, obj, key, str, what)
    if not value or len(value) > _TEXT_MAX or not value.isprintable():
        reader.fail(
            f"{what}: field {key!r} must be 1..{_TEXT_MAX} printable characters, not "
            f"{_short(value)}"
        )
    return str(value)


def _path_name(reader: _Reader, obj: Any, key: str, what: str) -> str:
    """A name that becomes part of a file path (:func:`is_path_name`)."""
    value = _get(reader, obj, key, str, what)
    if not is_path_name(value):
        reader.fail(
            f"{what}: field {key!r} is {_short(value)}; it names files, so it must be 1.."
            f"{NAME_MAX} of A-Z a-z 0-9 _ . # : + - and not start with a dot"
        )
    return str(value)


def _reference(reader: _Reader, data: Any) -> ReferenceGraph:
    what = "reference"
    tensors: dict[str, TensorSpec] = {}
    for name, entry in _get(reader, data, "tensors", dict, what).items():
        where = f"reference tensor {_short(name)}"
        shape = _get(reader, entry, "shape", list, where)
        if not 1 <= len(shape) <= 8:  # device tensors are (1, C, H, W) or (1, F); host ones any
            reader.fail(f"{where}: shape {_short(shape)} must have 1 to 8 dimensions")
        dims = _ints(reader, shape, len(shape), f"{where} shape", 1, TENSOR_MAX_ELEMENTS)
        if (len(dims) in (2, 4) and dims[0] != 1) or math.prod(dims) > TENSOR_MAX_ELEMENTS:
            reader.fail(
                f"{where}: shape {dims} must have batch 1 and at most {TENSOR_MAX_ELEMENTS} "
                "elements"
            )
        if "scale" not in entry:
            reader.fail(f"{where}: field 'scale' is missing (a number, or null for fp32)")
        scale = entry["scale"]
        if scale is not None and (
            not isinstance(scale, float | int)
            or isinstance(scale, bool)
            or not math.isfinite(scale)
            or not scale > 0
        ):
            reader.fail(f"{where}: scale must be a positive number or null, not {_short(scale)}")
        zero_point = entry.get("zero_point", 0)  # absent: symmetric
        if (
            not isinstance(zero_point, int)
            or isinstance(zero_point, bool)
            or not -128 <= zero_point <= 127
        ):
            reader.fail(
                f"{where}: zero_point must be an integer in -128..127, not {_short(zero_point)}"
            )
        tensors[name] = TensorSpec(name, dims, scale, zero_point)
    nodes: list[RefNode] = []
    inputs = _names(reader, _get(reader, data, "inputs", list, what), "reference inputs")
    for tensor in inputs:
        if tensor not in tensors:
            reader.fail(f"reference input {_short(tensor)} is not in the tensor table")
    known = set(inputs)
    for i, entry in enumerate(_get(reader, data, "nodes", list, what)):
        where = f"reference node {i}"
        name = _text(reader, entry, "name", where)
        where = f"reference node {i} ({_short(name)})"
        op = _get(reader, entry, "op", str, where)
        if op not in REFERENCE_OPS:
            reader.fail(f"{where}: op {_short(op)} is not one of {', '.join(REFERENCE_OPS)}")
        node_inputs = _names(reader, _get(reader, entry, "inputs", list, where), f"{where} inputs")
        output = _get(reader, entry, "output", str, where)
        for tensor in (*node_inputs, output):
            if tensor not in tensors:
                reader.fail(f"{where}: tensor {_short(tensor)} is not in the tensor table")
        missing = [t for t in node_inputs if t not in known]
        if missing:
            reader.fail(f"{where}: input {_short(missing[0])} is not produced before it")
        if output in known:
            reader.fail(f"{where}: output {_short(output)} is already an input or node output")
        known.add(output)
        attrs = {
            key: tuple(value) if isinstance(value, list) else value
            for key, value in _get(reader, entry, "attrs", dict, where).items()
        }
        params = {
            key: reader.array(member, f"{where} param {_short(key)}")
            for key, member in _get(reader, entry, "params", dict, where).items()
        }
        nodes.append(RefNode(name, op, node_inputs, output, attrs, params))
    outputs = _names(reader, _get(reader, data, "outputs", list, what), "reference outputs")
    for tensor in outputs:
        if tensor not in known:
            reader.fail(f"reference output {_short(tensor)} is produced by no node")
    graph = ReferenceGraph(nodes, tensors, inputs, outputs)
    if len(inputs) != 1:
        reader.fail(f"the reference graph must have one input, not {_short(inputs)}")
    if tensors[inputs[0]].scale is None:
        reader.fail(f"reference input {_short(inputs[0])} has no scale (the host quantizes it)")
    try:
        check_graph(graph)
    except ReferenceError as exc:
        reader.fail(f"reference {exc}")
    return graph


def _device(reader: _Reader, data: dict, index: int, config: AccelConfig) -> DeviceProgram:
    where = f"step {index}"
    name = _path_name(reader, data, "name", where)
    image = reader.array(
        _get(reader, data, "image", str, where),
        f"{where} image",
        ("uint8",),
        config.dram_bytes,
        "the config's DRAM",
    )
    if image.ndim != 1:
        reader.fail(f"{where} image is {image.shape} bytes; it must be 1-D")
    try:
        launch = Launch.from_dict(_get(reader, data, "launch", dict, where))
    except IsaError as exc:
        reader.fail(f"{where}: {exc}")
    instructions = _int(reader, data, "instructions", where, 1, 1 << 32)
    perf_base = _int(reader, data, "perf_base", where, 0, config.dram_bytes)
    if launch.insn_base + instructions * isa.INSN_BYTES > image.size:
        reader.fail(f"{where}: {instructions} instructions at {launch.insn_base} overrun the image")
    if launch.desc_base + launch.desc_count * isa.DESC_BYTES > image.size:
        reader.fail(
            f"{where}: {launch.desc_count} descriptors at {launch.desc_base} overrun the image"
        )
    regions = []
    for entry in _get(reader, data, "regions", list, where):
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)):
            reader.fail(f"{where}: a region must be [name, addr, bytes], not {_short(entry)}")
        addr, nbytes = _ints(reader, entry[1:], 2, f"{where} region {_short(entry[0])}", None)
        if addr < 0 or nbytes < 0 or addr + nbytes > config.dram_bytes:
            reader.fail(
                f"{where}: region {_short(entry[0])} spans [{addr}, {addr + nbytes}), outside the "
                f"config's DRAM (0..{config.dram_bytes})"
            )
        regions.append(Region(entry[0], addr, nbytes))
    dram_end = max([image.size, *(r.addr + r.nbytes for r in regions)])

    def inside(addr: int, nbytes: int, what: str) -> None:
        if addr < 0 or addr + nbytes > dram_end:
            reader.fail(
                f"{where}: {what} spans [{addr}, {addr + nbytes}), outside the program's memory "
                f"(0..{dram_end}: its image and regions)"
            )

    tensors = {}
    for tname, t in _get(reader, data, "tensors", dict, where).items():
        what = f"{where} tensor {_short(tname)}"
        layout = _get(reader, t, "layout", str, what)
        if layout not in LAYOUTS:
            reader.fail(f"{what}: layout {_short(layout)} is not one of {', '.join(LAYOUTS)}")
        addr = _int(reader, t, "addr", what, None)
        h, w, channels, logical = (
            _int(reader, t, k, what, 1, config.dram_bytes)
            for k in ("h", "w", "channels", "logical_channels")
        )
        im2col = layout == "im2col"
        tensor = DramTensor(
            tname,
            addr,
            h,
            w,
            channels,
            logical_channels=logical,
            layout=layout,
            kernel=_ints(reader, t.get("kernel"), 2, f"{what} kernel", 1) if im2col else None,
            stride=_ints(reader, t.get("stride"), 2, f"{what} stride", 1) if im2col else None,
            pads=_ints(reader, t.get("pads"), 4, f"{what} pads") if im2col else None,
            pixel_bytes=_int(reader, t, "pixel_bytes", what, 0, config.dram_bytes)
            if "pixel_bytes" in t
            else 0,
            pad_value=_int(reader, t, "pad_value", what, -128, 127) if "pad_value" in t else 0,
        )
        if tensor.pixel_bytes and (im2col or tensor.pixel_bytes < channels):
            reader.fail(
                f"{what}: pixel_bytes {tensor.pixel_bytes} must be 0 or >= channels "
                f"({channels}), and 0 for an im2col tensor"
            )
        inside(tensor.addr, tensor.nbytes, f"tensor {_short(tname)}")
        tensors[tname] = tensor
    layers = []
    for i, entry in enumerate(_get(reader, data, "layers", list, where)):
        what = f"{where} layer {i}"
        insn_range = _get(reader, entry, "insn_range", list, what)
        start, end = _ints(reader, insn_range, 2, f"{what} insn_range", None)
        if not 0 <= start <= end <= instructions:
            reader.fail(f"{what}: instructions [{start}, {end}) outside 0..{instructions}")
        perf_index = _int(reader, entry, "perf_index", what, None)
        record = isa.PERF_RECORD.nbytes
        inside(perf_base + perf_index * record, record, f"PERF record of layer {i}")
        if perf_index != i:
            reader.fail(f"{what}: PERF record {perf_index}; layer i writes record i")
        output = _get(reader, entry, "output", str, what)
        if output not in tensors:
            reader.fail(f"{what}: output {_short(output)} has no place in DRAM")
        kind = _get(reader, entry, "kind", str, what)
        if kind not in LAYER_KINDS:
            reader.fail(f"{what}: kind {_short(kind)} is not one of {', '.join(LAYER_KINDS)}")
        tiling = entry.get("tiling")
        if tiling is not None and not (
            isinstance(tiling, dict)
            and sorted(tiling) == sorted(TILING_KEYS)
            and all(_is_int(v) and 0 <= v < 1 << 62 for v in tiling.values())
        ):
            reader.fail(
                f"{what}: tiling must be null or an object of exactly {', '.join(TILING_KEYS)} "
                f"(integers >= 0), not {_short(tiling)}"
            )
        layers.append(
            LayerEntry(
                _text(reader, entry, "name", what),
                _get(reader, entry, "op", str, what),
                kind,
                _int(reader, entry, "macs", what),
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
            reader.fail(f"{where}: tensor {_short(tname)} has no place in DRAM")
    return DeviceProgram(
        name, image, launch, regions, perf_base, layers, tensors, inputs, outputs, instructions
    )


def _host(reader: _Reader, data: dict, index: int) -> HostStep:
    where = f"step {index}"
    op = _get(reader, data, "op", str, where)
    if op not in HOST_OPS:
        reader.fail(f"{where}: host op {_short(op)} is not one of {', '.join(HOST_OPS)}")
    return HostStep(
        _text(reader, data, "name", where),
        op,
        _names(reader, _get(reader, data, "inputs", list, where), f"{where} inputs"),
        _names(reader, _get(reader, data, "outputs", list, where), f"{where} outputs"),
        _text(reader, data, "reason", where) if data.get("reason") else "",
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
    except (OSError, EOFError, RuntimeError, MemoryError) as exc:  # truncated, unreadable
        raise ExecutableError(
            f"{path} cannot be read: {type(exc).__name__}: {_clip(str(exc))}"
        ) from None


def _load(path: Path, archive: zipfile.ZipFile, config: AccelConfig | None) -> Executable:
    try:
        info = archive.getinfo("manifest.json")
    except KeyError:
        raise ExecutableError(f"{path} is not an executable: no manifest.json") from None
    too_big = f"{path}: manifest.json is over {MANIFEST_MAX_BYTES} bytes"
    if info.file_size > MANIFEST_MAX_BYTES:
        raise ExecutableError(too_big)
    try:
        with archive.open(info) as stream:  # no more than the zip says (it may lie), capped
            text = stream.read(info.file_size + 1)
    except zipfile.BadZipFile as exc:
        raise ExecutableError(f"{path}: manifest.json is damaged: {_clip(str(exc))}") from None
    if len(text) > MANIFEST_MAX_BYTES:
        raise ExecutableError(too_big)
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ExecutableError(
            f"{path}: manifest.json is not valid JSON: {_clip(str(exc))}"
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ExecutableError(f"{path} is not a {FORMAT} file (no 'format': {FORMAT!r})")
    version = data.get("format_version")
    if not _is_int(version):
        raise ExecutableError(
            f"{path}: 'format_version' is {type(version).__name__} {_short(version)}, not an "
            f"integer; this tool reads versions {READABLE_VERSIONS}"
        )
    if version not in READABLE_VERSIONS:
        raise ExecutableError(
            f"{path}: executable format version {version}; this tool reads versions "
            f"{READABLE_VERSIONS} - recompile the model"
        )
    reader = _Reader(path, archive, data.get("arrays"))
    try:
        built_for = AccelConfig.from_dict(_get(reader, data, "config", dict, "manifest"))
    except (ConfigError, TypeError) as exc:
        reader.fail(f"the config it was compiled for is invalid: {exc}")
    model = _path_name(reader, data, "model", "manifest")
    steps: list[Step] = []
    for index, step in enumerate(_get(reader, data, "steps", list, "manifest")):
        kind = _get(reader, step, "kind", str, f"step {index}")
        if kind == "device":
            steps.append(_device(reader, step, index, built_for))
        elif kind == "host":
            steps.append(_host(reader, step, index))
        else:
            reader.fail(f"step {index}: kind {_short(kind)} is not 'device' or 'host'")
    reference = _reference(reader, _get(reader, data, "reference", dict, "manifest"))
    exe = Executable(model, built_for, steps, reference)
    _check_steps(reader, exe)
    _check_host_models(reader, reference)
    check_config(exe, config, path)
    return exe


def _check_steps(reader: _Reader, exe: Executable) -> None:
    """The steps against the reference graph: every tensor a step reads or writes is in it and
    produced before; each DRAM tensor holds its graph tensor; each device layer writes the
    output of a node of its op; each host step is the node of its output."""
    ref = exe.reference
    if not exe.programs:
        reader.fail("the executable has no device program")
    available = set(ref.inputs)
    for index, step in enumerate(exe.steps):
        where = f"step {index} ({_short(step.name)})"
        names = [*step.inputs, *step.outputs]
        if isinstance(step, DeviceProgram):
            names += [*step.tensors, *(layer.output for layer in step.layers)]
        for tensor in names:
            if tensor not in ref.tensors:
                reader.fail(f"{where}: tensor {_short(tensor)} is not in the graph")
        for tensor in step.inputs:
            if tensor not in available:
                reader.fail(f"{where}: input {_short(tensor)} is produced by no step before it")
        for tensor in step.outputs:
            if tensor in available:
                reader.fail(f"{where}: output {_short(tensor)} is already produced before it")
        if isinstance(step, HostStep):
            node = ref.producer(step.outputs[0]) if len(step.outputs) == 1 else None
            if node is None or node.op != step.op or node.inputs != step.inputs:
                reader.fail(
                    f"{where}: a host step must be the reference node of its one output, with "
                    "the same op and inputs"
                )
        else:
            _check_program(reader, where, step, ref)
        available.update(step.outputs)
    for tensor in ref.outputs:
        if tensor not in available:
            reader.fail(f"graph output {_short(tensor)} is produced by no step")


def _check_host_models(reader: _Reader, ref: ReferenceGraph) -> None:
    """onnxruntime loads every host node's model, whose inputs are the node's feeds and whose
    outputs include its fetch."""
    for node in ref.nodes:
        if node.op != "host":
            continue
        where = f"reference node {_short(node.name)} (host)"
        try:
            session = host_runtime.session(node.params["model"].tobytes())
        except HostModelError as exc:
            reader.fail(f"{where}: its ONNX model: {exc}")
        inputs = sorted(i.name for i in session.get_inputs())
        outputs = [o.name for o in session.get_outputs()]
        if inputs != sorted(node.attrs["feeds"]) or node.attrs["fetch"] not in outputs:
            reader.fail(
                f"{where}: its ONNX model takes {_short(inputs)} and gives {_short(outputs)}; "
                f"the node feeds {_short(list(node.attrs['feeds']))} and fetches "
                f"{_short(node.attrs['fetch'])}"
            )


def _check_program(
    reader: _Reader, where: str, program: DeviceProgram, ref: ReferenceGraph
) -> None:
    written = [layer.output for layer in program.layers]
    for i, layer in enumerate(program.layers):
        node = ref.producer(layer.output)
        if node is None or node.op != layer.op:
            reader.fail(
                f"{where} layer {i}: op {_short(layer.op)} writing {_short(layer.output)}; the "
                f"reference node writing it is {'none' if node is None else repr(node.op)}"
            )
        if layer.output in written[:i]:
            reader.fail(f"{where} layer {i}: output {_short(layer.output)} is written twice")

    def written_here(tensor: str) -> bool:
        """Written by a layer, or a view (flatten, concat) of tensors that are."""
        if tensor in written or tensor in program.inputs:
            return True
        node = ref.producer(tensor)
        return node is not None and node.op in VIEW_OPS and all(map(written_here, node.inputs))

    for tensor in program.outputs:
        if not written_here(tensor):
            reader.fail(f"{where}: output {_short(tensor)} is written by none of its layers")
    for name, t in program.tensors.items():
        _check_dram_tensor(reader, f"{where} tensor {_short(name)}", t, ref.tensors[name])
        if t.layout == "im2col" and (name not in program.inputs or name in written):
            reader.fail(f"{where} tensor {_short(name)}: only an input the host writes is im2col")


def _check_dram_tensor(reader: _Reader, what: str, t: DramTensor, spec: TensorSpec) -> None:
    """``t`` holds the graph's ``spec``: as (1, C, H, W) pixels of C channels, (1, F) as
    h x w pixels of F / (h w) channels, im2col rows of the conv over (1, C, H, W), or tokens
    (1, T, 1, F) as T pixels of F."""
    shape = spec.shape
    if spec.scale is None:
        reader.fail(f"{what}: its graph tensor has no scale; a tensor in DRAM is int8")
    if t.logical_channels > t.channels:
        reader.fail(f"{what}: logical_channels {t.logical_channels} > channels {t.channels}")
    if t.layout == "im2col":
        assert t.kernel is not None and t.stride is not None and t.pads is not None
        (kh, kw), (sy, sx), (top, left, bottom, right) = t.kernel, t.stride, t.pads
        if len(shape) != 4:
            reader.fail(f"{what}: an im2col tensor holds a (1, C, H, W) tensor, not {shape}")
        out = ((shape[2] + top + bottom - kh) // sy + 1, (shape[3] + left + right - kw) // sx + 1)
        if (t.h, t.w) != out or t.logical_channels != shape[1]:
            reader.fail(
                f"{what}: im2col of {shape} by a {kh}x{kw} kernel, stride {t.stride}, pads "
                f"{t.pads} is {out[0]}x{out[1]} rows of {shape[1]} channels, not {t.h}x{t.w} of "
                f"{t.logical_channels}"
            )
        if t.channels < kh * kw * t.logical_channels:
            reader.fail(f"{what}: {t.channels} channels hold no {kh}x{kw}x{shape[1]} rows")
        return
    if t.layout == "tokens_t":
        if (
            len(shape) != 4
            or shape[2] != 1
            or t.w != 1
            or shape[3] % t.h
            or t.logical_channels != shape[1]
        ):
            reader.fail(f"{what}: tokens_t {t.h}x{t.w} of {t.logical_channels}; graph {shape}")
        if t.channels % (shape[3] // t.h) or t.channels // (shape[3] // t.h) < shape[1]:
            reader.fail(
                f"{what}: {t.channels} channels hold no {shape[3] // t.h} heads of {shape[1]}"
            )
        return
    if t.layout != "heads" and t.h * t.w * t.logical_channels != math.prod(shape):
        reader.fail(
            f"{what}: {t.h}x{t.w} pixels of {t.logical_channels} channels do not hold its graph "
            f"tensor {shape}"
        )
    if t.layout == "heads":
        if len(shape) != 4 or (t.h, t.w, t.logical_channels) != (shape[2], 1, shape[3]):
            reader.fail(f"{what}: heads {t.h}x{t.w} of {t.logical_channels}; graph {shape}")
        if t.channels % shape[1] or t.channels // shape[1] < shape[3]:
            reader.fail(f"{what}: {t.channels} channels hold no {shape[1]} heads of {shape[3]}")
        return
    if t.layout == "tokens":
        if (
            len(shape) != 4
            or shape[2] != 1
            or (t.h, t.w, t.logical_channels)
            != (
                shape[1],
                1,
                shape[3],
            )
        ):
            reader.fail(f"{what}: tokens {t.h}x{t.w} of {t.logical_channels}; graph {shape}")
        return
    if len(shape) == 4 and (t.logical_channels, t.h, t.w) != shape[1:]:
        reader.fail(
            f"{what}: {t.h}x{t.w} pixels of {t.logical_channels} channels; its graph tensor is "
            f"{shape}"
        )

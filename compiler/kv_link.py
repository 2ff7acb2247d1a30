"""The prefill and decode programs of :mod:`compiler.kv_decode` linked into one DRAM image
(:class:`~arch.executable.kv.KvExecutable`).

The decode program is compiled at address 0 like any; linking moves it above the prefill's
map (every descriptor's DRAM address, every PERF record's, the launch registers). Its cache
constants (B x T rows each) are the caches: per position p the STOREs of the B new key and
value rows go to row p of each sequence's block (rows T apart) and the LOADs of each
softmax's mask row to position p's row of a mask table in the image - one descriptor table
per position, the instructions once; and the prefill gets a descriptor table per sequence b
whose key rows and values (their STOREs and reads) are block b of the caches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from arch import isa
from arch.config import AccelConfig
from arch.executable import DeviceProgram, DramTensor, Executable, HostStep
from arch.executable.kv import KvCacheTensors, KvExecutable
from arch.isa import Launch
from arch.kv_cache import mask_row
from compiler.compile import Calibration, compile_calibrated, compile_graph, resolve_model
from compiler.errors import CompileError
from compiler.export import assemble
from compiler.kv_decode import CacheNames, KvGraphs, derive

__all__ = ["compile_kv", "link"]

ALIGN = 4096  # the decode program's offset and the tables' alignment


def compile_kv(
    model: str | Path | onnx.ModelProto,
    config: AccelConfig,
    *,
    seed: int = 0,
    calibration: Calibration | None = None,
    calib_method: str = "minmax",
    batch: int = 1,
) -> KvExecutable:
    """``model`` (a zoo name, an .onnx file or a model) compiled for ``config`` as prefill and
    decode in one image; the quantized graph is :func:`compiler.compile.compile_model`'s for
    the same calibration (default: a zoo model's own)."""
    proto: onnx.ModelProto | Path
    if isinstance(model, onnx.ModelProto):
        name, proto = model.graph.name or "model", model
    else:
        name, proto = resolve_model(model, None, seed)
    graph, _ = compile_calibrated(model, proto, config, calibration, seed, calib_method)
    graphs = derive(graph, batch)
    prefill = assemble(name, graphs.prefill, compile_graph(graphs.prefill, config), config)
    try:
        steps = compile_graph(graphs.decode, config)
    except CompileError as exc:
        if batch == 1:
            raise
        raise _too_large(graphs, f"does not compile for this config: {exc}") from None
    kv = link(prefill, assemble(f"{name}.decode", graphs.decode, steps, config), graphs)
    if kv.dram_end > config.dram_bytes:
        raise _too_large(graphs, f"needs {kv.dram_end:,} bytes of DRAM, more than the "
                         f"config's {config.dram_bytes:,}")  # fmt: skip
    return kv


def _too_large(graphs: KvGraphs, why: str) -> CompileError:
    """``--batch B`` refused: a decode of B sequences ``why``."""
    cache = graphs.decode.tensors[graphs.caches[0].key_const].shape  # (1, B x T, 1, F)
    return CompileError(
        None, None, f"--batch {graphs.batch}: a decode of {graphs.batch} sequences (caches "
        f"of {cache[1]:,} positions: {graphs.batch} x context {graphs.context}) {why}",
        "a smaller --batch",
    )  # fmt: skip


def link(prefill: Executable, decode: Executable, graphs: KvGraphs) -> KvExecutable:
    """See the module docstring."""
    kinds = [type(s) for s in prefill.steps], [type(s) for s in decode.steps]
    if kinds != ([HostStep, DeviceProgram], [DeviceProgram]):
        raise CompileError(
            None, "model", "no KV-cache decode: prefill must be an input stage and one device "
            "program, decode one device program"
        )  # fmt: skip
    pre, dec = prefill.programs[0], decode.programs[0]
    offset = _align(pre.dram_end)
    table = _descriptors(dec)
    moved_table = [{**d, "dram_base": (d["dram_base"] + offset) % (1 << 32)} for d in table]
    per_position: dict[int, Callable[[int], int]] = {}
    caches = [
        _caches(pre, dec, table, (moved_table, per_position), names, graphs, offset)
        for names in graphs.caches
    ]
    tables_at = _align(offset + dec.dram_end)
    table_bytes = _align_to(len(table) * isa.DESC_BYTES, 64)
    slots = _slot_tables(pre, caches, graphs)
    slot_bytes = _align_to(len(slots[0]) * isa.DESC_BYTES, 64)
    slots_at = _align(tables_at + graphs.context * table_bytes)
    masks_at = _align(slots_at + graphs.batch * slot_bytes)
    masks, mask_descs = _mask_table(dec, table, graphs, masks_at)
    per_position.update(mask_descs)
    image = np.zeros(masks_at + masks.size, np.uint8)
    image[: pre.image.size] = pre.image
    moved = _moved(dec, offset, moved_table)
    image[offset : offset + moved.image.size - offset] = moved.image[offset:]
    image[masks_at : masks_at + masks.size] = masks
    launches = []
    for p in range(graphs.context):
        entries = [dict(d) for d in moved_table]
        for i, at in per_position.items():
            entries[i]["dram_base"] = at(p)
        base = tables_at + p * table_bytes
        blob = _table_bytes(entries)
        image[base : base + blob.size] = blob
        launches.append(Launch(moved.launch.insn_base, base, len(entries)))
    prefills = []
    for b, entries in enumerate(slots):
        base = slots_at + b * slot_bytes
        blob = _table_bytes(entries)
        image[base : base + blob.size] = blob
        prefills.append(Launch(pre.launch.insn_base, base, len(entries)))
    linked = dataclasses.replace(decode, steps=[moved])
    return KvExecutable(
        prefill, linked, image, launches, caches, graphs.start, graphs.context, prefills
    )


def _caches(
    pre: DeviceProgram,
    dec: DeviceProgram,
    table: list[dict[str, Any]],
    out: tuple[list[dict[str, Any]], dict[int, Callable[[int], int]]],
    names: CacheNames,
    graphs: KvGraphs,
    offset: int,
) -> KvCacheTensors:
    """One layer's two caches: the decode program's cache constants (B x T rows, moved by
    ``offset``); the STOREs of the new rows (row b of B) moved into ``out`` (the moved
    table, and their DRAM base as a function of p) at row p of sequence b's block."""
    moved, per_position = out
    pair = []
    for const, new, rows in (
        (names.key_const, names.key_new, names.key_rows),
        (names.value_const, names.value_new, names.values),
    ):
        region = _region(dec, const)
        h = graphs.batch * graphs.context
        cache = dataclasses.replace(pre.tensors[rows], name=const, addr=region.addr + offset, h=h)
        if cache.nbytes != region.nbytes:
            raise CompileError(None, const, "the decode cache and the prefill's tensor differ")
        _check_order(dec, table, new, names)
        row = dec.tensors[new]
        for i in _within(table, row.addr, row.nbytes):
            moved[i] = _scattered(table[i], row, cache, graphs.context)
            per_position[i] = _at_row(None, moved[i]["dram_base"], cache.pixel_stride)
        pair.append(cache)
    keys, values = pair
    prefilled = (names.key_rows, names.values)
    return KvCacheTensors(keys, values, names.key_new, names.value_new, prefilled)


def _scattered(
    desc: dict[str, Any], row: DramTensor, cache: DramTensor, context: int
) -> dict[str, Any]:
    """``desc``, a STORE of new rows (row b of ``row``), storing row b at row b x T of
    ``cache`` (position 0 of sequence b): its base moved, its loops over rows T times longer."""
    stride = row.pixel_stride
    r, c = divmod(desc["dram_base"] - row.addr, stride)
    out = {**desc, "dram_base": cache.addr + r * context * stride + c}
    within = c
    for level in range(isa.DESC_LOOPS):
        count, step = desc[f"loops[{level}].count"], desc[f"loops[{level}].dram_stride"]
        if count > 1 and abs(step) >= stride and step % stride == 0:
            out[f"loops[{level}].dram_stride"] = step * context
        elif count > 1:
            within += (count - 1) * abs(step)
    if stride != cache.pixel_stride or within >= stride:
        raise CompileError(
            None, row.name, "no KV-cache decode: a STORE of the new rows does not step "
            "row by row"
        )  # fmt: skip
    return out


def _slot_tables(
    pre: DeviceProgram, caches: list[KvCacheTensors], graphs: KvGraphs
) -> list[list[dict[str, Any]]]:
    """The prefill's descriptor table of each sequence b: its key rows and values stored at
    (and read back from) sequence b's block of the caches."""
    table = _descriptors(pre)
    slots = []
    for b in range(graphs.batch):
        entries = [dict(d) for d in table]
        for cache in caches:
            for name, target in zip(cache.prefilled, (cache.keys, cache.values), strict=True):
                tensor = pre.tensors[name]
                at = target.addr + b * graphs.context * target.pixel_stride
                for i in _within(table, tensor.addr, tensor.nbytes):
                    entries[i]["dram_base"] = at + table[i]["dram_base"] - tensor.addr
        slots.append(entries)
    return slots


def _at_row(tensor: DramTensor | None, delta: int, row: int = 0) -> Callable[[int], int]:
    """The DRAM address ``delta`` past row p of ``tensor`` (None: rows of ``row`` bytes from
    address ``delta``)."""
    if tensor is not None:
        row, delta = tensor.pixel_stride, tensor.addr + delta
    return lambda p: delta + p * row


def _align(n: int) -> int:
    return _align_to(n, ALIGN)


def _align_to(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def _descriptors(program: DeviceProgram) -> list[dict[str, Any]]:
    base, count = program.launch.desc_base, program.launch.desc_count
    blob = program.image[base : base + count * isa.DESC_BYTES].tobytes()
    return [isa.decode_record(isa.DESCRIPTOR, w) for w in isa.bytes_to_words(blob, isa.DESC_BYTES)]


def _table_bytes(entries: list[dict[str, Any]]) -> np.ndarray:
    words = [isa.encode_record(isa.DESCRIPTOR, d) for d in entries]
    return np.frombuffer(isa.words_to_bytes(words, isa.DESC_BYTES), np.uint8)


def _region(program: DeviceProgram, name: str) -> Any:
    for region in program.regions:
        if region.name == name:
            return region
    raise CompileError(None, name, "no KV-cache decode: the decode program has no such region")


def _within(table: list[dict[str, Any]], addr: int, nbytes: int) -> list[int]:
    """Indices of the descriptors whose DRAM base lies in ``[addr, addr + nbytes)``."""
    return [i for i, d in enumerate(table) if addr <= d["dram_base"] < addr + nbytes]


def _insns(program: DeviceProgram) -> list[isa.Instruction]:
    base = program.launch.insn_base
    blob = program.image[base : base + program.instructions * isa.INSN_BYTES].tobytes()
    return [isa.decode_insn(w, i) for i, w in enumerate(isa.bytes_to_words(blob, isa.INSN_BYTES))]


def _check_order(dec: DeviceProgram, table: list[dict[str, Any]], new: str, names: Any) -> None:
    """Every LOAD of the cache that ``new`` is stored into comes after the end (the barrier)
    of the layer storing ``new`` - else the LOAD could read the cache before the new row."""
    writer = next((la for la in dec.layers if la.output == new), None)
    const = names.key_const if new == names.key_new else names.value_const
    region = _region(dec, const)
    readers = set(_within(table, region.addr, region.nbytes))
    if writer is None or not readers:
        raise CompileError(None, new, "no KV-cache decode: the cache is not written or not read")
    for index, insn in enumerate(_insns(dec)):
        reads = insn.opcode == isa.Opcode.LOAD and insn["desc"] in readers
        if reads and index < writer.insn_range[1]:
            raise CompileError(
                None, new, f"instruction {index} loads the cache before layer "
                f"{writer.name} has stored the new row"
            )  # fmt: skip


def _mask_table(
    dec: DeviceProgram, table: list[dict[str, Any]], graphs: KvGraphs, at: int
) -> tuple[np.ndarray, dict[int, Callable[[int], int]]]:
    """Per position p, the mask row of :func:`arch.kv_cache.mask_row` (every sequence's: the B
    rows are at one position) in the layout of the compiled mask (the row padded to lines;
    the last entry of the softmax's PARAM data), and the DRAM base of each LOAD of the mask
    row as a function of p."""
    t = graphs.context
    rows: np.ndarray | None = None
    found: dict[int, Callable[[int], int]] = {}
    for names in graphs.caches:
        region = _region(dec, f"{names.softmax}#params")
        scores = graphs.decode.tensors[_node(graphs, names.softmax).output]
        row_bytes = dec.tensors[scores.name].channels // scores.shape[1]  # a head's row
        start = region.addr + region.nbytes - row_bytes
        loads = [i for i in _within(table, start, row_bytes) if table[i]["mem"] == isa.Mem.ACT]
        if not loads:
            raise CompileError(None, names.softmax, "no KV-cache decode: no LOAD of the mask")
        if rows is None:
            rows = np.repeat(dec.image[None, start : start + row_bytes], t, axis=0)
            for p in range(t):
                rows[p, :t] = mask_row(p, t).reshape(-1).view(np.uint8)
        for i in loads:
            found[i] = _at_row(None, at + table[i]["dram_base"] - start, row_bytes)
    assert rows is not None
    return rows.reshape(-1), found


def _node(graphs: KvGraphs, name: str) -> Any:
    return next(node for node in graphs.decode.nodes if node.name == name)


def _moved(dec: DeviceProgram, offset: int, table: list[dict[str, Any]]) -> DeviceProgram:
    """``dec`` at ``offset``: its image from ``offset`` (PERF addresses and descriptors
    moved), launch, regions, PERF base and tensors."""
    image = np.zeros(offset + dec.image.size, np.uint8)
    image[offset:] = dec.image
    words = []
    for insn in _insns(dec):
        if insn.opcode == isa.Opcode.PERF:
            insn = isa.Instruction(
                insn.opcode, {**insn.fields, "dram_addr": insn["dram_addr"] + offset}
            )
        words.append(insn.encode())
    at = offset + dec.launch.insn_base
    blob = np.frombuffer(isa.words_to_bytes(words, isa.INSN_BYTES), np.uint8)
    image[at : at + blob.size] = blob
    base = offset + dec.launch.desc_base
    blob = _table_bytes(table)
    image[base : base + blob.size] = blob
    return dataclasses.replace(
        dec,
        image=image,
        launch=Launch(at, base, dec.launch.desc_count),
        regions=[dataclasses.replace(r, addr=r.addr + offset) for r in dec.regions],
        perf_base=dec.perf_base + offset,
        tensors={k: dataclasses.replace(t, addr=t.addr + offset) for k, t in dec.tensors.items()},
    )

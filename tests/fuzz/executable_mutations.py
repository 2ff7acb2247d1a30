"""Random damage and edits to an executable file, for the fuzz tests: byte flips, truncation,
members removed, swapped, renamed or added, manifest fields and array elements edited - with
no digest recomputed, only the arrays' (the file's digest kept), or all of them (an editor who
knows the format: :func:`tests.executable_files.reseal`)."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tests.executable_files import reseal

Members = dict[str, bytes]


@dataclass(frozen=True)
class Mutation:
    """A mutated file: what was done (``kind``, ``detail``), its bytes, and how it was sealed:
    "none" (no digest recomputed), "arrays" (the arrays' only) or "all"."""

    kind: str
    detail: str
    data: bytes
    sealing: str


def zip_of(members: Members) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, blob in members.items():
            archive.writestr(zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0)), blob)
    return buffer.getvalue()


def members_of(data: bytes) -> Members:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _flip_bytes(rng: np.random.Generator, data: bytes, members: Members) -> tuple[str, bytes]:
    out = bytearray(data)
    spots = rng.integers(0, len(out), int(rng.integers(1, 4)))
    for at in spots:
        out[at] ^= int(rng.integers(1, 256))
    return f"bytes {sorted(map(int, spots))}", bytes(out)


def _truncate(rng: np.random.Generator, data: bytes, members: Members) -> tuple[str, bytes]:
    size = int(rng.integers(0, len(data)))
    return f"to {size} bytes", data[:size]


def _remove(rng: np.random.Generator, members: Members) -> tuple[str, Members]:
    name = _pick(rng, list(members))
    return name, {n: b for n, b in members.items() if n != name}


def _swap(rng: np.random.Generator, members: Members) -> tuple[str, Members]:
    a, b = (str(n) for n in rng.choice(list(members), 2, replace=False))
    return f"{a} <-> {b}", {**members, a: members[b], b: members[a]}


def _rename(rng: np.random.Generator, members: Members) -> tuple[str, Members]:
    name = _pick(rng, list(members))
    new = _pick(rng, ["arrays/999.npy", "../evil.npy", "Manifest.json", name + "x", "arrays/"])
    return f"{name} -> {new}", {(new if n == name else n): b for n, b in members.items()}


def _add(rng: np.random.Generator, members: Members) -> tuple[str, Members]:
    name = _pick(rng, ["arrays/999.npy", "extra.txt", "arrays/0.npy.bak"])
    return name, {**members, name: rng.integers(0, 256, 64, dtype=np.uint8).tobytes()}


def _edit_field(rng: np.random.Generator, members: Members) -> tuple[str, Members]:
    info = json.loads(members["manifest.json"])
    leaves = list(_leaves(info, ()))
    path, value = leaves[int(rng.integers(len(leaves)))]
    new = _new_value(rng, value)
    _set(info, path, new)
    shown = "/".join(map(str, path))
    return f"{shown}: {value!r} -> {new!r}"[:200], {
        **members,
        "manifest.json": json.dumps(info).encode(),
    }


def _edit_array(rng: np.random.Generator, members: Members) -> tuple[str, Members]:
    name = _pick(rng, [n for n in members if n.startswith("arrays/")])
    array = np.load(io.BytesIO(members[name]), allow_pickle=False).copy()
    if not array.size:
        return f"{name} (empty, unchanged)", members
    flat = array.reshape(-1).view(np.uint8)
    at = int(rng.integers(flat.size))
    flat[at] ^= int(rng.integers(1, 256))
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return f"{name} byte {at}", {**members, name: buffer.getvalue()}


def _pick(rng: np.random.Generator, items: list[str]) -> str:
    return str(items[int(rng.integers(len(items)))])


def _leaves(node: Any, path: tuple) -> Any:
    """(path, value) of every scalar in ``node`` (nested dicts and lists)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _leaves(value, (*path, index))
    else:
        yield path, node


def _set(node: Any, path: tuple, value: Any) -> None:
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _new_value(rng: np.random.Generator, value: Any) -> Any:
    """A value near ``value`` (off by one, a line, a record, doubled) or of another kind."""
    near = []
    if isinstance(value, int) and not isinstance(value, bool):
        near = [value + 1, value - 1, value + 16, value + 64, value - 64, value * 2, -value]
    elif isinstance(value, float):
        near = [value * 2, value / 2, -value, 0.0, 1e38, 1e-45]
    elif isinstance(value, str):
        near = [value + "x", value[:-1], "", value.upper(), "arrays/0.npy"]
    other = [0, -1, 2**31, 2**64, None, True, "x", [], {}, 1.5, float("nan")]
    pool = near * 3 + other if near else other
    return pool[int(rng.integers(len(pool)))]


#: Mutations of the file's bytes (no digest can be recomputed).
RAW: tuple[Callable[..., tuple[str, bytes]], ...] = (_flip_bytes, _truncate)
#: Mutations of its members, then written with one of the sealings.
MEMBERWISE: tuple[Callable[..., tuple[str, Members]], ...] = (
    _remove,
    _swap,
    _rename,
    _add,
    _edit_field,
    _edit_field,
    _edit_array,
)


def mutate(rng: np.random.Generator, data: bytes, members: Members) -> Mutation:
    """One random mutation of the executable ``data`` (whose members are ``members``)."""
    if rng.random() < 0.35:
        change = RAW[int(rng.integers(len(RAW)))]
        detail, out = change(rng, data, members)
        return Mutation(change.__name__.strip("_"), detail, out, "none")
    edit = MEMBERWISE[int(rng.integers(len(MEMBERWISE)))]
    detail, changed = edit(rng, members)
    sealing = ("none", "arrays", "all")[int(rng.integers(3))]
    if sealing != "none":
        changed = reseal(changed, root=sealing == "all")
    return Mutation(edit.__name__.strip("_"), detail, zip_of(changed), sealing)

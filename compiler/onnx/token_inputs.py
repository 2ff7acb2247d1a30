"""Integer graph inputs - token ids, attention masks, position ids - as the one fp32 input an
executable takes.

A model whose inputs are (1, T) integer tensors (``input_ids``, ``attention_mask``, ...) is
rewritten before import: its k inputs arrive as the rows of one fp32 tensor ``tokens`` of shape
(1, k * D, T), each id written as D base-128 digits (0..127, least significant first; D = 1
for tables of up to 128 rows, 2 up to 16384, 3 up to 2**21), so that the executable's int8
input codes (scale 1, zero point 0, set by the importer) hold them exactly. Gathers, a weighted
sum of the digits and a Cast per input give each its value, name and type back. The embedding
lookups and the mask arithmetic that follow run on the host at the graph input (the input
stage: steps that read only ``tokens``); the mask they make reaches each attention as a host
value (a bool mask crosses host steps as int8 codes 0 and 1: host_regions.CARRIED). Position and
token-type ids that the exporter computed from constants are folded at compile time.

What each row is (:class:`TokenInput`) is kept in the model's ``metadata_props`` under
:data:`METADATA_KEY`, so that whoever holds the prepared model (calibration, ``make sim``) can
make or check inputs for it (:class:`TokenInputs`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import CompileError

__all__ = ["METADATA_KEY", "TOKENS_INPUT", "TokenInput", "TokenInputs", "pack_token_inputs"]

METADATA_KEY = "cosim.token_inputs"
TOKENS_INPUT = "tokens"
_INTEGER: dict[int, str] = {TensorProto.INT64: "int64", TensorProto.INT32: "int32"}
_TYPES = {name: code for code, name in _INTEGER.items()}
#: ops an id passes through unchanged on its way to the embedding Gather
_THROUGH = {"Cast", "Unsqueeze", "Squeeze", "Reshape", "Identity", "Flatten", "Expand"}
_BASE = 128  # an int8 code holds one digit
_EXACT = _BASE**3  # the largest table: ids of 3 digits


@dataclass(frozen=True)
class TokenInput:
    """One integer input: ``ids`` index an embedding table of ``vocab`` rows; a ``mask`` is 0
    (padding) or 1."""

    name: str
    dtype: str  # int64 or int32
    kind: str  # ids or mask
    vocab: int  # rows of the table (2 for a mask)


@dataclass(frozen=True)
class TokenInputs:
    """The integer inputs of a model, in the order of the rows of ``tokens``."""

    inputs: tuple[TokenInput, ...]
    length: int  # T

    @property
    def digits(self) -> int:
        """D: base-128 digits per id."""
        largest, d = max(t.vocab for t in self.inputs), 1
        while _BASE**d < largest:
            d += 1
        return d

    @property
    def shape(self) -> tuple[int, int, int]:
        return (1, len(self.inputs) * self.digits, self.length)

    def _packed(self, rows: list[np.ndarray]) -> np.ndarray:
        """(1, k * D, T) float32 of the k integer rows, each as D base-128 digits."""
        ids = np.stack(rows).astype(np.int64)
        digits = [(ids // _BASE**j) % _BASE for j in range(self.digits)]
        return np.stack(digits, axis=1).reshape(1, -1, self.length).astype(np.float32)

    def describe(self) -> str:
        return ", ".join(
            f"{t.name} ({t.kind}{f', vocab {t.vocab}' if t.kind == 'ids' else ''})"
            for t in self.inputs
        )

    def default(self, seed: int) -> tuple[np.ndarray, str]:
        """Seeded inputs, packed, and the report's words for them: ids uniform in the vocab
        (position ids 0..T-1), masks all ones with a padded tail of seeded length."""
        rng = np.random.default_rng(seed)
        rows, words = [], []
        for t in self.inputs:
            if t.kind == "mask":
                pad = int(rng.integers(1, max(1, self.length // 4) + 1))
                rows.append(np.r_[np.ones(self.length - pad), np.zeros(pad)])
                words.append(f"{t.name} ones with the last {pad} of {self.length} padded")
            elif "position" in t.name:
                rows.append(np.arange(self.length))
                words.append(f"{t.name} 0..{self.length - 1}")
            else:
                rows.append(rng.integers(0, t.vocab, self.length))
                words.append(f"{t.name} uniform in [0, {t.vocab})")
        return self._packed(rows), f"seeded token inputs (seed {seed}): " + "; ".join(words)

    def pack(self, arrays: dict[str, np.ndarray], what: str) -> np.ndarray:
        """``arrays`` (input name -> integer array of T values; a missing mask is all ones)
        checked against the vocabularies and packed; ValueError in one line naming ``what``."""
        unknown = sorted(set(arrays) - {t.name for t in self.inputs})
        if unknown:
            names = ", ".join(t.name for t in self.inputs)
            raise ValueError(f"{what}: no input named {unknown[0]!r}; the model takes {names}")
        rows = []
        for t in self.inputs:
            if t.name not in arrays:
                if t.kind != "mask":
                    raise ValueError(f"{what}: {t.name} is missing")
                rows.append(np.ones(self.length, np.int64))
                continue
            rows.append(self._checked(t, np.asarray(arrays[t.name]), what))
        return self._packed(rows)

    def unpack(self, packed: np.ndarray) -> dict[str, np.ndarray]:
        """The integer inputs in ``packed`` (any shape of k * D * T values), by name."""
        digits = np.asarray(packed).reshape(len(self.inputs), self.digits, self.length)
        weights = _BASE ** np.arange(self.digits, dtype=np.int64)
        ids = np.rint(digits).astype(np.int64) * weights[None, :, None]
        return {t.name: ids[k].sum(axis=0) for k, t in enumerate(self.inputs)}

    def _checked(self, t: TokenInput, a: np.ndarray, what: str) -> np.ndarray:
        if not np.issubdtype(a.dtype, np.integer):
            raise ValueError(f"{what}: {t.name} has dtype {a.dtype}; use integers (int64)")
        if a.shape not in ((self.length,), (1, self.length)):
            raise ValueError(
                f"{what}: {t.name} has shape {a.shape}; the model takes ({self.length},) "
                f"or (1, {self.length})"
            )
        a = a.reshape(-1)
        if a.min() < 0 or a.max() >= t.vocab:
            bad = int(a[(a < 0) | (a >= t.vocab)][0])
            supported = "0 or 1" if t.kind == "mask" else f"ids in [0, {t.vocab})"
            raise ValueError(f"{what}: {t.name} holds {bad}; the model takes {supported}")
        return a


def token_inputs_of(model: onnx.ModelProto) -> TokenInputs | None:
    """The integer inputs a packed model was made from (None: a model of a float input)."""
    for prop in model.metadata_props:
        if prop.key == METADATA_KEY:
            data = json.loads(prop.value)
            inputs = tuple(TokenInput(**t) for t in data["inputs"])
            return TokenInputs(inputs, int(data["length"]))
    return None


def pack_token_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its integer inputs packed into ``tokens`` (see the module docstring);
    a model without integer inputs as it is."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    ints = [i for i in graph.input if i.name not in inits and _is_integer(i)]
    if not ints:
        return model
    floats = [i for i in graph.input if i.name not in inits and not _is_integer(i)]
    if floats:
        raise CompileError(
            floats[0].name,
            "graph input",
            "a float input beside integer ones is not supported",
            "integer token inputs only, or one float input",
        )
    spec = TokenInputs(tuple(_token_input(model, i) for i in ints), _length(ints[0], ints[0].name))
    for value in ints[1:]:
        if _length(value, value.name) != spec.length:
            raise CompileError(
                value.name,
                "graph input",
                f"has {_length(value, value.name)} tokens, {ints[0].name} {spec.length}",
                "integer inputs of one length",
            )
    _rewrite(model, spec)
    return model


def _is_integer(value: onnx.ValueInfoProto) -> bool:
    return value.type.tensor_type.elem_type in _INTEGER


def _length(value: onnx.ValueInfoProto, name: str) -> int:
    dims = value.type.tensor_type.shape.dim
    if len(dims) != 2 or dims[1].dim_value < 1:
        shape = tuple(d.dim_value or d.dim_param or "?" for d in dims)
        raise CompileError(
            name, "graph input", f"integer input of shape {shape}", "(1, T) with a static T"
        )
    return int(dims[1].dim_value)


def _token_input(model: onnx.ModelProto, value: onnx.ValueInfoProto) -> TokenInput:
    """What ``value`` is: ids of the embedding table a Gather reads them into, or a mask."""
    dtype = _INTEGER[value.type.tensor_type.elem_type]
    vocab = _table_rows(model, value.name)
    if vocab is not None and vocab > _EXACT:
        raise CompileError(
            value.name, "graph input", f"indexes a table of {vocab} rows", f"at most {_EXACT}"
        )
    if vocab is not None:
        return TokenInput(value.name, dtype, "ids", vocab)
    if "mask" in value.name.lower():
        return TokenInput(value.name, dtype, "mask", 2)
    raise CompileError(
        value.name,
        "graph input",
        "is an integer input that indexes no embedding table and is no attention mask",
        "token ids read by a Gather of an embedding table, or an input named *mask*",
    )


def _table_rows(model: onnx.ModelProto, name: str) -> int | None:
    """Rows of the constant table the first Gather reading ``name`` (through casts and
    reshapes) indexes, or None."""
    tables = {t.name: tuple(t.dims) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].HasField("t"):
            tables[node.output[0]] = tuple(node.attribute[0].t.dims)
    frontier, seen = [name], set()
    while frontier:
        value = frontier.pop()
        seen.add(value)
        for node in model.graph.node:
            if value not in node.input:
                continue
            if node.op_type == "Gather" and node.input[1] == value and node.input[0] in tables:
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                return int(tables[node.input[0]][axis])
            if node.op_type in _THROUGH and node.input[0] == value:
                frontier += [o for o in node.output if o and o not in seen]
    return None


def _constants(graph: onnx.GraphProto) -> set[str]:
    return {t.name for t in graph.initializer}


def _stage_first(
    nodes: list[onnx.NodeProto], known: set[str], ids: set[str]
) -> list[onnx.NodeProto]:
    """``nodes`` with the input stage first - every node computed from the token inputs and
    constants alone, in order - so that it forms one host region at the graph input however
    the exporter ordered the nodes (GPT-2's position ids after its first layer's nodes).
    Within the stage, the nodes that read no embedding of the ``ids`` come first (the mask
    arithmetic): a node after the embedding lookup may run on the accelerator (a LayerNorm
    on the norm unit), and an integer mask cannot cross to a second host region."""
    stage, rest = [], []
    for node in nodes:
        if all(i in known for i in node.input if i):
            stage.append(node)
            known.update(o for o in node.output if o)
        else:
            rest.append(node)
    looked_up = set(ids)
    for node in stage:
        if looked_up.intersection(node.input):
            looked_up.update(node.output)
    first = [n for n in stage if not looked_up.intersection(n.output)]
    return first + [n for n in stage if looked_up.intersection(n.output)] + rest


def _rewrite(model: onnx.ModelProto, spec: TokenInputs) -> None:
    graph = model.graph
    names = {t.name for t in spec.inputs}
    kept = [i for i in graph.input if i.name not in names]
    unpack = []
    for row, t in enumerate(spec.inputs):
        terms: list[str] = []
        for j in range(spec.digits):  # in int64 from the first Cast: host nodes, exact
            index, digit = f"{TOKENS_INPUT}.row{row}.{j}", f"{t.name}#digit{j}"
            at = row * spec.digits + j
            graph.initializer.append(numpy_helper.from_array(np.asarray(at, np.int64), index))
            unpack += [
                helper.make_node("Gather", [TOKENS_INPUT, index], [f"{digit}#f"], axis=1),
                helper.make_node("Cast", [f"{digit}#f"], [digit], to=TensorProto.INT64),
            ]
            if j:
                weight = f"{TOKENS_INPUT}.weight{j}"
                if weight not in {i.name for i in graph.initializer}:
                    value = np.asarray(_BASE**j, np.int64)
                    graph.initializer.append(numpy_helper.from_array(value, weight))
                unpack.append(helper.make_node("Mul", [digit, weight], [f"{digit}#w"]))
                digit = f"{digit}#w"
            if terms:
                unpack.append(helper.make_node("Add", [terms[-1], digit], [f"{digit}#sum"]))
                digit = f"{digit}#sum"
            terms.append(digit)
        unpack.append(helper.make_node("Cast", [terms[-1]], [t.name], to=_TYPES[t.dtype]))
    packed = helper.make_tensor_value_info(TOKENS_INPUT, TensorProto.FLOAT, list(spec.shape))
    del graph.input[:]
    graph.input.extend([packed, *kept])
    ids = {t.name for t in spec.inputs if t.kind == "ids"}
    nodes = _stage_first([*unpack, *graph.node], {TOKENS_INPUT} | _constants(graph), ids)
    del graph.node[:]
    graph.node.extend(nodes)
    data = {"inputs": [t.__dict__ for t in spec.inputs], "length": spec.length}
    props = {p.key: p.value for p in model.metadata_props}
    helper.set_model_props(model, {**props, METADATA_KEY: json.dumps(data)})

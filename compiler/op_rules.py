"""The compiler's side of every op, in one table keyed like :data:`arch.ops.OP_SPECS`.

An op's attrs, params, arity, output shape, scale rule and integer semantics are its
:class:`~arch.ops.spec.OpSpec`'s (:mod:`arch.ops`). What only the compiler needs is here, one
:class:`OpRule` per op: the IR verifier's check (:mod:`compiler.ir_checks`, fp32 stage), the
quantizer that gives it int8 params (:mod:`compiler.quantizers`) and the accelerator layer
kind it is placed as (or the host). The ONNX-level ops that live only between import and
canonicalize (:data:`IMPORT_OPS`) have a rule too, with their attrs and arity.

Every other op table of the compiler (``ir.OPS``, the verifier's attrs and arity, the ops
that keep their input's scale, the placement kinds) is a view of these two tables. Building
:data:`RULES` checks that every op has its parts and fails at import naming the op.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from arch.executable.format import LAYER_KINDS, LayerKind
from arch.ops import OP_SPECS
from arch.ops.check import NodeCheck

from . import ir_checks as check
from . import quantizers as q

if TYPE_CHECKING:
    from .ir import Graph, Node

__all__ = [
    "ARITY",
    "ATTRS",
    "FUSED_BY_QUANTIZE",
    "IMPORT_OPS",
    "KEEPS_SCALE",
    "KINDS",
    "OPS",
    "RULES",
    "TABLE_PRODUCERS",
    "TAKES_INPUT_SCALE",
    "VIEW_KINDS",
    "OpRule",
]

Shape = tuple[int, ...]

#: Layer kinds that run no instructions: their output is a view of bytes other layers write
#: (flatten: its input's; concat: its inputs write into slices of it), or bytes the DRAM image
#: holds from the start (constant).
ViewKind = Literal["alias", "concat", "slice", "constant"]
VIEW_KINDS: tuple[ViewKind, ...] = get_args(ViewKind)

#: Checks an fp32 node of a canonical op beyond its OpSpec's shape rule: its float params.
ParamCheck = Callable[[NodeCheck, list[Shape]], None]
#: Checks an fp32 node of an import-only op (attrs, params) and gives its output shape.
ImportCheck = Callable[[NodeCheck, list[Shape]], Shape]
Quantizer = Callable[["Graph", "Node"], None]


@dataclass(frozen=True)
class OpRule:
    """What the compiler does with one op."""

    #: verify, fp32 stage: a canonical op's float params (its OpSpec checks its attrs and
    #: gives its shape; a quantized node is :func:`arch.reference.check_node`'s to check)
    fp32_params: ParamCheck | None
    #: sets the node's int8 params once its tensors have scales; None: canonicalize folds the
    #: op away before quantize
    quantize: Quantizer | None
    #: the accelerator layer kind (one of ``LAYER_KINDS`` or :data:`VIEW_KINDS`); None: the
    #: host runs it
    kind: LayerKind | ViewKind | None = None
    #: its STORE can apply the int8 table of an activation after it (quantize fuses the
    #: ``table`` node into it)
    takes_table: bool = False
    #: an import-only op's attrs, (fewest, most) inputs and check; a canonical op's are its
    #: OpSpec's
    attrs: frozenset[str] | None = None
    arity: tuple[int, int] | None = None
    check: ImportCheck | None = None


_CANONICAL: dict[str, OpRule] = {
    "conv": OpRule(check.weighted, q.weighted, "gemm", takes_table=True),
    "gemm": OpRule(check.weighted, q.weighted, "gemm", takes_table=True),
    "maxpool": OpRule(check.no_params, q.no_params, "pool"),
    "avgpool": OpRule(check.no_params, q.avgpool, "pool"),
    "global_avgpool": OpRule(check.no_params, q.global_avgpool, "pool"),
    "add": OpRule(check.batch_matmul, q.add, "add", takes_table=True),
    "scale": OpRule(check.no_params, q.scale, "scale", takes_table=True),
    "flatten": OpRule(check.no_params, q.no_params, "alias"),
    "concat": OpRule(check.no_params, q.no_params, "concat"),
    "channel_slice": OpRule(check.no_params, q.no_params, "slice"),
    "upsample": OpRule(check.no_params, q.no_params, "upsample"),
    # the same copies into ACC and strided stores
    "depth_to_space": OpRule(check.no_params, q.no_params, "upsample"),
    "split_heads": OpRule(check.no_params, q.no_params, "alias"),
    # its producer's transposing stores wrote the bytes
    "split_heads_t": OpRule(check.no_params, q.no_params, "alias"),
    "merge_heads": OpRule(check.no_params, q.no_params, "alias"),
    # a map's NHWC pixels are its tokens' bytes
    "map_to_tokens": OpRule(check.no_params, q.no_params, "alias"),
    "tokens_to_map": OpRule(check.no_params, q.no_params, "alias"),
    "select_token": OpRule(check.no_params, q.no_params, "alias"),  # one token's pixel
    # a gemm per head whose weights are the second activation
    "batch_matmul": OpRule(check.batch_matmul, q.batch_matmul, "matmul"),
    "softmax": OpRule(check.no_params, q.no_params),  # fp32, a final one only
    # on the norm unit (configs with norm_unit; else placement sends them to the host)
    "layer_norm": OpRule(check.norm_affine, q.norm, "norm"),
    "rms_norm": OpRule(check.norm_affine, q.norm, "norm"),
    "row_softmax": OpRule(check.softmax_bias, q.row_softmax, "norm"),  # output scale fixed
    # its codes are in the DRAM image (the class token, position embeddings)
    "constant": OpRule(check.constant, q.constant, "constant"),
    "host": OpRule(check.host, q.keep_params),  # its ONNX model keeps its params
}


def _import_only(
    check: ImportCheck, attrs: set[str], arity: tuple[int, int], quantize: Quantizer | None = None
) -> OpRule:
    return OpRule(None, quantize, attrs=frozenset(attrs), arity=arity, check=check)


#: The ONNX-level ops that only live between import and canonicalize (fp32 stage).
_IMPORT_ONLY: dict[str, OpRule] = {
    "batchnorm": _import_only(check.per_channel, {"epsilon"}, (1, 1)),
    "relu": _import_only(check.same_shape, set(), (1, 1)),
    "relu6": _import_only(check.same_shape, set(), (1, 1)),
    "matmul": _import_only(check.matmul, set(), (1, 1)),
    "bias_add": _import_only(check.per_channel, set(), (1, 1)),
    # a Mul by one constant per channel (a layer scale): folded into the weights before it
    "channel_mul": _import_only(check.per_channel, set(), (1, 1)),
    "sum": _import_only(check.summed, set(), (2, 2)),
    "identity": _import_only(check.same_shape, set(), (1, 1)),
    "reshape": _import_only(check.reshape, {"shape"}, (1, 1)),
    # canonicalize keeps it; quantize fuses it into its producer (no params of its own)
    "table": _import_only(check.table, {"function", "args"}, (1, 1), q.no_params),
}


def _checked(canonical: dict[str, OpRule], import_only: dict[str, OpRule]) -> dict[str, OpRule]:
    """Both tables as one, after checking that every op has its parts (TypeError naming the
    op and the part otherwise)."""
    for op in OP_SPECS.keys() - canonical.keys():
        raise TypeError(f"op {op!r} has an OpSpec but no compiler rule (compiler/op_rules.py)")
    for op in canonical.keys() - OP_SPECS.keys():
        raise TypeError(f"op {op!r} has a compiler rule but no OpSpec (arch/ops)")
    kinds = (*LAYER_KINDS, *VIEW_KINDS)
    for op, rule in canonical.items():
        if rule.quantize is None:
            raise TypeError(f"op {op!r}: its compiler rule has no quantizer")
        if rule.kind is not None and rule.kind not in kinds:
            raise TypeError(f"op {op!r}: layer kind {rule.kind!r} is not one of {kinds}")
        if rule.takes_table and "act" not in OP_SPECS[op].attrs:
            raise TypeError(f"op {op!r}: takes a table but its OpSpec has no 'act' attr")
        if rule.attrs is not None or rule.arity is not None or rule.check is not None:
            raise TypeError(
                f"op {op!r}: its attrs, arity and shape are its OpSpec's, not the rule's"
            )
        if rule.fp32_params is None:
            raise TypeError(f"op {op!r}: its compiler rule has no fp32 param check")
    for op, rule in import_only.items():
        if op in OP_SPECS:
            raise TypeError(f"import-only op {op!r} is also a canonical op")
        if rule.attrs is None or rule.arity is None or rule.check is None or rule.kind is not None:
            raise TypeError(f"import-only op {op!r}: its rule needs attrs, arity, check, no kind")
    return {**canonical, **import_only}


#: Every op the IR holds, canonical ops first, by name.
RULES: dict[str, OpRule] = _checked(_CANONICAL, _IMPORT_ONLY)
#: The ops of a canonical graph (what the back end sees).
OPS: tuple[str, ...] = tuple(OP_SPECS)
#: ONNX-level ops that only live between import and canonicalize (fp32 stage).
IMPORT_OPS: tuple[str, ...] = tuple(_IMPORT_ONLY)
#: Import ops that canonicalize keeps and quantize fuses into their producer.
FUSED_BY_QUANTIZE: tuple[str, ...] = tuple(op for op in IMPORT_OPS if RULES[op].quantize)
#: The attrs of every op's nodes, exactly these.
ATTRS: dict[str, frozenset[str]] = {op: spec.attrs for op, spec in OP_SPECS.items()} | {
    op: rule.attrs for op, rule in _IMPORT_ONLY.items() if rule.attrs is not None
}
#: The attrs a node of an op may also carry (a default when absent).
OPTIONAL_ATTRS: dict[str, frozenset[str]] = {
    op: spec.optional_attrs for op, spec in OP_SPECS.items()
}
#: The (fewest, most) inputs of every op.
ARITY: dict[str, tuple[int, int]] = {op: spec.arity for op, spec in OP_SPECS.items()} | {
    op: rule.arity for op, rule in _IMPORT_ONLY.items() if rule.arity is not None
}
#: Ops whose output has the scale and zero point of every input (they move int8 codes).
KEEPS_SCALE: frozenset[str] = frozenset(op for op, s in OP_SPECS.items() if s.keeps_scale)
#: Of those, the one-input ops: their output's scale is their input's and back (a concat's is
#: calibrated, and its inputs take it).
TAKES_INPUT_SCALE: frozenset[str] = frozenset(
    op for op in KEEPS_SCALE if OP_SPECS[op].arity == (1, 1)
)
#: Ops whose STORE can apply a table (the table nodes fuse into them).
TABLE_PRODUCERS: frozenset[str] = frozenset(op for op, r in RULES.items() if r.takes_table)
#: The accelerator layer kind of each op the accelerator runs.
KINDS: dict[str, LayerKind | ViewKind] = {
    op: r.kind for op, r in RULES.items() if r.kind is not None
}

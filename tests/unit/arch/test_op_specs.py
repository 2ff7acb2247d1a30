"""Every op is defined once and every table that tells ops apart agrees with the definition:
the arch specs (arch/ops), the reference's views, the compiler's rules (compiler/op_rules.py),
and the back end's per-kind tables (schedule builders, tile rules)."""

from __future__ import annotations

import re
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from arch import reference
from arch.executable.format import HOST_OPS, LAYER_KINDS
from arch.ops import OP_SPECS
from arch.ops.spec import registry
from arch.ops.views import HEAD_VIEWS
from compiler import constants, ir, op_rules
from compiler.passes import partition, schedule, tile


def test_every_op_has_one_spec_and_the_reference_tables_are_its_views() -> None:
    ops = set(OP_SPECS)
    assert set(reference.REFERENCE_OPS) == ops
    for table in (reference.PARAMS_OF_OP, reference.ATTRS_OF_OP, reference.ARITY_OF_OP):
        assert set(table) == ops
    for op, spec in OP_SPECS.items():
        assert spec.name == op
        assert callable(spec.evaluate) and callable(spec.output_shape), op
        assert reference.PARAMS_OF_OP[op] == dict(spec.params)
        assert reference.ATTRS_OF_OP[op] == spec.attrs
        assert reference.ARITY_OF_OP[op] == spec.arity
    assert set(HEAD_VIEWS) <= ops and set(HOST_OPS) <= ops


def test_every_canonical_op_has_a_check_a_quantizer_and_a_placement() -> None:
    assert ir.OPS == op_rules.OPS == tuple(OP_SPECS)
    assert set(op_rules.RULES) == set(OP_SPECS) | set(op_rules.IMPORT_OPS)
    kinds = set(LAYER_KINDS) | set(op_rules.VIEW_KINDS)
    for op in OP_SPECS:
        rule = op_rules.RULES[op]
        assert callable(rule.fp32_params) and callable(rule.quantize), op
        assert rule.check is None, op  # its shape is its OpSpec's
        # on the accelerator as a layer kind, or a host step (a final Softmax, a host region)
        assert rule.kind in kinds or (rule.kind is None and op in HOST_OPS), op
    # every device layer kind is some op's placement
    assert set(op_rules.KINDS.values()) == kinds
    assert set(HOST_OPS) >= partition.HOST_OPS


def test_every_import_only_op_has_its_rule() -> None:
    assert not set(op_rules.IMPORT_OPS) & set(OP_SPECS)
    for op in op_rules.IMPORT_OPS:
        rule = op_rules.RULES[op]
        assert callable(rule.check) and rule.kind is None, op
        assert op_rules.ATTRS[op] == rule.attrs and op_rules.ARITY[op] == rule.arity, op
    # what canonicalize keeps of them, quantize fuses: those have a quantizer
    assert op_rules.FUSED_BY_QUANTIZE == ("table",)
    assert op_rules.RULES["table"].quantize is not None


def test_every_layer_kind_has_a_schedule_builder_a_tile_rule_and_param_sets() -> None:
    assert sorted(set(LAYER_KINDS) ^ set(schedule.BUILDERS)) == []
    assert sorted(set(LAYER_KINDS) ^ set(tile.TILERS)) == []
    assert sorted(set(LAYER_KINDS) ^ set(constants.PARAM_SETS)) == []


def test_the_ir_docstring_lists_every_op() -> None:
    assert ir.__doc__ is not None
    for op in OP_SPECS:
        assert re.search(rf"^{op} ", ir.__doc__, re.MULTILINE), op


def test_a_missing_rule_fails_at_import_naming_the_op() -> None:
    canonical = dict(op_rules._CANONICAL)
    del canonical["upsample"]
    with pytest.raises(TypeError, match="op 'upsample' has an OpSpec but no compiler rule"):
        op_rules._checked(canonical, op_rules._IMPORT_ONLY)
    no_quantizer = op_rules._CANONICAL | {"gemm": replace(op_rules.RULES["gemm"], quantize=None)}
    with pytest.raises(TypeError, match="op 'gemm': its compiler rule has no quantizer"):
        op_rules._checked(no_quantizer, op_rules._IMPORT_ONLY)
    bad_kind = op_rules._CANONICAL | {"add": replace(op_rules.RULES["add"], kind="adder")}
    with pytest.raises(TypeError, match="op 'add': layer kind 'adder' is not one of"):
        op_rules._checked(bad_kind, op_rules._IMPORT_ONLY)
    no_act = op_rules._CANONICAL | {"avgpool": replace(op_rules.RULES["avgpool"], takes_table=True)}
    with pytest.raises(TypeError, match="op 'avgpool': takes a table but its OpSpec has no 'act'"):
        op_rules._checked(no_act, op_rules._IMPORT_ONLY)
    bare = op_rules._IMPORT_ONLY | {"relu": replace(op_rules.RULES["relu"], attrs=None)}
    with pytest.raises(TypeError, match="import-only op 'relu': its rule needs attrs"):
        op_rules._checked(op_rules._CANONICAL, bare)


def test_a_malformed_spec_fails_naming_the_op_and_the_field() -> None:
    good = OP_SPECS["maxpool"]
    with pytest.raises(TypeError, match="op 'maxpool': field 'evaluate' must be a function"):
        replace(good, evaluate=None)
    with pytest.raises(TypeError, match="op 'maxpool': field 'arity' must be"):
        replace(good, arity=(2, 1))
    with pytest.raises(TypeError, match="op 'maxpool': field 'params' 'w' has no numpy dtype"):
        replace(good, params={"w": "int7"})
    with pytest.raises(TypeError, match="op 'maxpool': field 'attrs'"):
        replace(good, attrs={"kernel"})
    with pytest.raises(TypeError, match="op 'maxpool': field 'residual' needs a second input"):
        replace(good, residual=True)
    with pytest.raises(TypeError, match="op 'maxpool' is defined twice"):
        registry([good], [replace(good, keeps_scale=False)])


# One node of each op that keeps its input's scale, on a (1, 4, 4, 6) input x (and y).
_KEEPERS = {
    "maxpool": ("maxpool", {"kernel": (2, 2), "stride": (1, 1), "pads": (0, 0, 0, 0)}),
    "flatten": ("flatten", {}),
    "concat": ("concat", {}),
    "channel_slice": ("channel_slice", {"start": 1, "channels": 2}),
    "upsample": ("upsample", {"scale": (2, 1)}),
    "depth_to_space": ("depth_to_space", {"block": (2, 1)}),
    "split_heads": ("split_heads", {"heads": 2}),
    "split_heads_t": ("split_heads_t", {"heads": 2}),
    "merge_heads": ("merge_heads", {}),
    "map_to_tokens": ("map_to_tokens", {}),
    "tokens_to_map": ("tokens_to_map", {"size": (4, 4)}),
    "select_token": ("select_token", {"index": 3}),
}


@pytest.mark.parametrize("op", sorted(_KEEPERS))
def test_an_op_that_keeps_its_scale_only_moves_codes(op: str) -> None:
    """The flag agrees with the evaluator: every output code is an input code (random inputs;
    an op that rescaled would make codes no input has)."""
    rng = np.random.default_rng(sum(map(ord, op)))
    x = rng.integers(-128, 128, size=(1, 4, 4, 6), dtype=np.int8)
    if op in ("split_heads", "split_heads_t", "tokens_to_map", "select_token"):
        x = x.reshape(1, 16, 1, 6)
    inputs = [x, rng.integers(-128, 128, size=x.shape, dtype=np.int8)] if op == "concat" else [x]
    name, attrs = _KEEPERS[op]
    node = SimpleNamespace(name="n", op=name, inputs=["x", "y"][: len(inputs)], attrs=attrs)
    graph = SimpleNamespace(tensors={"out": SimpleNamespace(shape=(1, x.size))})
    node.output, node.params = "out", {}
    out = OP_SPECS[op].evaluate(graph, node, inputs)  # type: ignore[arg-type]
    assert out.dtype == np.int8
    assert set(out.ravel().tolist()) <= set(np.concatenate([i.ravel() for i in inputs]).tolist())


def test_the_scale_keepers_are_the_flagged_ops() -> None:
    assert set(_KEEPERS) == op_rules.KEEPS_SCALE
    assert {op for op in _KEEPERS if OP_SPECS[op].arity == (1, 1)} == op_rules.TAKES_INPUT_SCALE

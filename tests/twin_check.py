"""The fake-quantized twin's check for tests of float models (``sim/quality/twin.py``): every
code within the twin's rule, and bounds on the share of equal codes set from measured values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from arch.reference import RefGraph
from sim.quality.twin import INTEGER_ALGORITHMS, twin_agreement

#: Equal codes of the layers without a second rounding (measured: 0.9996 ... 1.0 on the zoo
#: and the torch fixtures, per model) and of a table act's layer (measured: 0.557 (a SiLU of
#: EfficientNet at 64x64, a table step of 3 codes) ... 1.0).
LEAST_EQUAL = 0.999
LEAST_EQUAL_TABLE = 0.5
#: Equal codes of a norm-unit layer (integer algorithms; measured on default_norm: 0.875 - a
#: softmax over rows of 4 in MobileViT, 2 of 16 codes - and 0.976 ... 0.998 elsewhere).
LEAST_EQUAL_ALGORITHM = 0.85


def assert_within_rule(rows: list[dict[str, Any]], least_equal: float = LEAST_EQUAL) -> None:
    """Every code within the rule; ``least_equal`` of the codes of the layers the device
    computes exactly (no second rounding, no integer algorithm) equal, :data:`LEAST_EQUAL_TABLE`
    of each table act layer's and :data:`LEAST_EQUAL_ALGORITHM` of each norm-unit layer's."""
    assert rows, "no tensor compared"
    for row in rows:
        assert row["max_code_diff"] <= max(1, row["second_step"]), row
        assert row["outside_rule"] == 0, row
        if row["second_step"]:
            assert row["equal"] >= LEAST_EQUAL_TABLE, row
        elif row["op"] in INTEGER_ALGORITHMS:
            assert row["equal"] >= LEAST_EQUAL_ALGORITHM, row
    plain = [r for r in rows if not r["second_step"] and r["op"] not in INTEGER_ALGORITHMS]
    count = sum(r["count"] for r in plain)
    assert not count or sum(r["equal"] * r["count"] for r in plain) / count >= least_equal, rows


def assert_twin_agrees(
    source: onnx.ModelProto, graph: RefGraph, xs: Sequence[np.ndarray]
) -> list[dict[str, Any]]:
    """:func:`assert_within_rule` of the twin agreement over ``xs``; every graph output (or
    the ONNX tensor it is a view of) compared but a softmax's (fp32, no codes)."""
    rows = twin_agreement(source, graph, xs)
    assert_within_rule(rows)
    compared = {r["tensor"] for r in rows}
    softmaxed = {n.output for n in graph.nodes if n.op == "softmax"}
    outputs = {name.split("#")[0] for name in set(graph.outputs) - softmaxed}
    assert outputs <= compared | {n.split("#")[0] for n in compared}, (graph.outputs, compared)
    return rows

"""constant: a tensor the graph holds as int8 codes (param ``value``, the output's shape) - a
ViT's class token, position embeddings. No input: its codes are in the device program's DRAM
image from the start (quantized at the output's scale, which a concat it feeds gives it).
"""

from __future__ import annotations

import numpy as np

from arch.ops.check import MAX_ELEMENTS, NodeCheck
from arch.ops.spec import OpSpec, RefGraph, RefNode, Shape

__all__ = ["CONSTANT", "SPECS"]


def _constant(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    return node.params["value"].copy()


def _valued(c: NodeCheck, xs: list[Shape]) -> Shape:
    """Its value's shape: (1, C, H, W) (tokens (1, T, 1, F) among them)."""
    value = c.node.params.get("value")
    if not isinstance(value, np.ndarray):
        c.fail("param 'value' is missing")
    if value.ndim != 4 or value.shape[0] != 1 or value.size == 0:
        c.fail(f"param 'value' must be (1, C, H, W), not {value.shape}")
    if value.size > MAX_ELEMENTS:
        c.fail(f"param 'value' has {value.size} elements, more than {MAX_ELEMENTS}")
    return tuple(int(d) for d in value.shape)


CONSTANT = OpSpec(
    name="constant",
    attrs=frozenset(),
    params={"value": "int8"},
    arity=(0, 0),
    keeps_scale=False,
    output_shape=_valued,
    evaluate=_constant,
)
SPECS = (CONSTANT,)

"""Data moves on the RTL (tiny config): a hybrid model's map <-> tokens views, a layer scale
folded into its linear layer and one token selected for the head, a ViT stem's class token and
positions - one device program each, bit-exact on the RTL and the ISA simulator with equal
outputs."""

from __future__ import annotations

import pytest

from arch.executable.format import HostStep
from tests import token_graphs
from tests.network.test_partitioned_rtl import rtl_and_isa

pytestmark = pytest.mark.simulator


def test_map_token_views_on_rtl(tmp_path):
    model = token_graphs.map_token_round_trip(size=3, dim=8, seed=5, head=True)
    exe, rtl, _isa = rtl_and_isa(model, 6, tmp_path)
    assert len(exe.programs) == 1 and not [s for s in exe.steps if isinstance(s, HostStep)]
    views = {n.op for n in exe.reference.nodes} & {"map_to_tokens", "tokens_to_map", "select_token"}
    assert views == {"map_to_tokens", "tokens_to_map", "select_token"}
    assert all(la.device == "accel" and la.cycles > 0 for la in rtl.layers)


def test_class_token_and_positions_on_rtl(tmp_path):
    """timm's ViT stem (Conv, tokens, class-token Concat, position Add, an MLP, the class
    token's output) on the tiny RTL: one device program whose image holds the class token and
    the positions, bit-exact, the ISA simulator's outputs."""
    model = token_graphs.timm_vit_block(size=8, patch=4, dim=8, seed=4)
    exe, rtl, _isa = rtl_and_isa(model, 7, tmp_path)
    assert len(exe.programs) == 1 and not [s for s in exe.steps if isinstance(s, HostStep)]
    assert [n.op for n in exe.reference.nodes].count("constant") == 2
    assert all(la.device == "accel" and la.cycles > 0 for la in rtl.layers)

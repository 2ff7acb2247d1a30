"""Data moves on the RTL (tiny config): a hybrid model's map <-> tokens views, a layer scale
folded into its linear layer and one token selected for the head - one device program,
bit-exact on the RTL and the ISA simulator with equal outputs."""

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

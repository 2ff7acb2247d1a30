"""Attention on the RTL: BERT-style encoder blocks on the tiny config - the MatMul of two
activations per head (weights loaded by descriptor from the second activation, rows past the
sequence padded with 0), linear layers over tokens, GELU tables, residual adds - bit-exact on
the RTL and the ISA simulator with equal outputs, for several head counts and sequence lengths
that are not multiples of the array size; k^T written by k's transposing stores."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from tests.network.test_partitioned_rtl import rtl_and_isa
from zoo.transformers import bert

pytestmark = pytest.mark.simulator


@pytest.mark.parametrize(
    ("tokens", "hidden", "heads"),
    [(5, 8, 2), (9, 12, 3), (4, 16, 1), (7, 16, 4)],
)
def test_encoder_block_on_rtl(tokens, hidden, heads, tmp_path):
    model = bert(tokens=tokens, hidden=hidden, heads=heads, layers=1, mlp=2 * hidden, seed=9)
    _exe, rtl, isa = rtl_and_isa(model, tokens, tmp_path)
    products = [la for la in rtl.layers if la.op == "batch_matmul"]
    assert len(products) == 2 and all(la.device == "accel" for la in products)
    assert all(la.cycles > 0 for la in products)
    assert [la.macs for la in products] == [la.macs for la in isa.layers if la.op == "batch_matmul"]
    assert sum(la.macs for la in rtl.layers if la.device == "host") == 0
    # k^T is stored transposed by k's linear layer: the host runs LayerNorm and Softmax only
    assert not [la.op for la in rtl.layers if la.device == "host" and "Transpose" in la.op]


def test_torch_encoder_export_on_rtl(tmp_path):
    """torch's own export of nn.TransformerEncoderLayer (the default exporter): its packed
    projection, both products per head and the FFN on the tiny RTL, bit-exact, the ISA
    simulator's outputs, no MAC on the host."""
    path = Path(__file__).resolve().parents[1] / "fixtures" / "torch" / "encoder_default.onnx"
    _exe, rtl, _isa = rtl_and_isa(onnx.load(path), 11, tmp_path)
    assert sum(la.macs for la in rtl.layers if la.device == "host") == 0
    assert [la.op for la in rtl.layers if la.device == "accel"].count("batch_matmul") == 2

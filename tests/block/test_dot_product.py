"""Smoke regression for the tool chain: Amaranth -> Verilog -> Verilator -> cocotb vs numpy."""

import pytest

from hdl_gen.dot_product import DotProduct
from sim.verilate.build import run_cocotb
from tests.block.harness import build_block


def build_dot_product(lanes: int, in_bits: int):
    return build_block(DotProduct(lanes, in_bits), "dot_product")


@pytest.mark.simulator
@pytest.mark.parametrize(("lanes", "in_bits", "seed"), [(4, 8, 1), (16, 8, 2), (3, 5, 3)])
def test_dot_product_matches_numpy(lanes, in_bits, seed, tmp_path):
    model = build_dot_product(lanes, in_bits)
    env = {"DOT_LANES": str(lanes), "DOT_IN_BITS": str(in_bits), "DOT_COUNT": "300"}
    run_cocotb(
        model, "tests.block.cocotb_dot_product", tmp_path, extra_env={**env, "DOT_SEED": str(seed)}
    )


@pytest.mark.simulator
def test_second_build_is_cached():
    build_dot_product(4, 8)
    again = build_dot_product(4, 8)
    assert again.cached, f"expected a cache hit for {again.build_dir}"

"""Block test: the processing element (weight banks, pass-through, wrap-around accumulation)."""

import pytest

from hdl_gen.pe import ProcessingElement
from sim.verilate.build import run_cocotb
from tests.block.harness import build_block


@pytest.mark.simulator
def test_pe_matches_python_model(tmp_path):
    model = build_block(ProcessingElement(), "pe")
    run_cocotb(model, "tests.block.cocotb_pe", tmp_path, extra_env={"PE_SEED": "5"})

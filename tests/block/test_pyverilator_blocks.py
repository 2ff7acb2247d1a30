"""Block level through the pyverilator block API (sim/verilate/block.py), beside the cocotb block
tests: the processing element and the dot product against independent Python/numpy models with
seeded random stimulus, a VCD trace read back with pywellen, and the errors a user can run into.

Both blocks are built with VCD tracing, so their builds share one set of Verilator runtime
objects; the accelerator (no tracing) is the pyverilator backend's build, also used by
tests/instruction/test_pyverilator_vs_cocotb.py."""

from __future__ import annotations

import numpy as np
import pytest
import pywellen

from arch import isa
from arch.config import PRESETS
from hdl_gen.dot_product import DotProduct
from hdl_gen.pe import ProcessingElement
from sim.backends import pyverilator as pyverilator_backend
from sim.backends.dram import DpiDram
from sim.verilate.block import Block, SignalError, open_component, open_verilog
from sim.verilate.build import BuildError
from tests.block.cocotb_util import pack

pytestmark = pytest.mark.simulator


@pytest.fixture(scope="module")
def pe():
    with open_component(ProcessingElement(), "pe", waves="vcd") as dut:
        yield dut


@pytest.fixture(scope="module")
def dot():
    with open_component(DotProduct(16, 8), "dot_product", waves="vcd") as dut:
        yield dut


def wrap32(value: int) -> int:
    return (value + (1 << 31)) % (1 << 32) - (1 << 31)


def test_pe_matches_python_model(pe: Block) -> None:
    rng = np.random.default_rng(7)
    pe.reset()
    weights = [int(w) for w in rng.integers(-128, 128, 2)]
    for bank in (0, 1):  # known weights in both banks (reset does not clear them)
        pe["w_en"], pe["w_bank"], pe["w_data"] = 1, bank, weights[bank]
        pe.step()
    for cycle in range(500):
        a, bank = int(rng.integers(-128, 128)), int(rng.integers(0, 2))
        psum = int(rng.integers(-(1 << 31), 1 << 31))
        write = bool(rng.random() < 0.3)
        w_bank, w_data = int(rng.integers(0, 2)), int(rng.integers(-128, 128))
        pe["a_in"], pe["bank_in"], pe["psum_in"] = a, bank, psum
        pe["w_en"], pe["w_bank"], pe["w_data"] = int(write), w_bank, w_data
        assert pe.step() == 1
        # The rising edge registered these inputs with the weights held before it.
        expected = (wrap32(psum + a * weights[bank]), a)
        got = (pe.signed("psum_out"), pe.signed("a_out"))
        assert got == expected, f"cycle {cycle}: expected (psum, a) {expected}, got {got}"
        if write:
            weights[w_bank] = w_data


def test_dot_product_with_bubbles_and_backpressure(dot: Block) -> None:
    """256-bit operand words, random valid/ready, results in order, compared with numpy."""
    lanes, bits, count = 16, 8, 300
    rng = np.random.default_rng(3)
    vectors = [
        (rng.integers(-128, 128, lanes), rng.integers(-128, 128, lanes)) for _ in range(count)
    ]
    expected = [int(np.dot(a.astype(np.int64), b.astype(np.int64))) for a, b in vectors]
    dot["operands__valid"], dot["result__ready"] = 0, 0
    dot.reset(3)
    sent, received, pending = 0, [], False
    for _cycle in range(count * 8):
        if not pending and sent < count and rng.random() < 0.7:
            dot["operands__payload"] = pack(np.concatenate(vectors[sent]), bits)
            dot["operands__valid"], pending = 1, True
        elif not pending:
            dot["operands__valid"] = 0
        dot["result__ready"] = int(rng.random() < 0.6)
        # Handshakes are decided by the values in front of the next rising edge.
        if pending and dot["operands__ready"]:
            sent, pending = sent + 1, False
        if dot["result__valid"] and dot["result__ready"]:
            received.append(dot.signed("result__payload"))
        dot.step()
        if len(received) == count:
            break
    assert sent == count, f"only {sent} of {count} operand pairs accepted: input stalled"
    assert received == expected


def test_step_until_stops_at_the_first_valid_result(dot: Block) -> None:
    a, b = np.arange(-8, 8), np.arange(16)[::-1] - 3
    dot["result__ready"], dot["operands__valid"] = 0, 0
    dot.reset()
    assert dot.step(10, until=["result__valid"]) == 10  # nothing in flight
    dot["operands__payload"], dot["operands__valid"] = pack(np.concatenate([a, b]), 8), 1
    before = dot.cycle
    assert dot.step(1000, until=["result__valid"]) == 2  # two pipeline stages
    assert dot.cycle == before + 2
    assert dot.signed("result__payload") == int(np.dot(a, b))


def test_trace_writes_a_vcd_with_the_clock_and_registered_outputs(pe: Block, tmp_path) -> None:
    pe.reset()
    pe["w_en"], pe["w_bank"], pe["w_data"] = 1, 0, -5
    pe.step()
    start = pe.cycle
    path = pe.trace(tmp_path / "pe.vcd")
    pe["w_en"], pe["a_in"], pe["bank_in"], pe["psum_in"] = 0, 9, 0, 1000
    pe.step(3)
    pe.stop_trace()
    waves = pywellen.Waveform(str(path))
    signals = {var.full_name: var.signal for var in waves.all_vars()}
    period = 10_000  # 10 ns in the trace's 1 ps unit
    t0 = start * period
    clock = [signals["TOP.clk"].value_at(t0 + n * period // 2) for n in range(6)]
    assert clock == [0, 1, 0, 1, 0, 1]
    psum = signals["TOP.psum_out"]
    # Inputs appear at the start of the cycle, the registered sum at its rising edge.
    assert signals["TOP.a_in"].value_at(t0) == 9
    assert psum.value_at(t0 + period // 2) == 1000 - 45
    assert psum.value_at(t0 + 3 * period) == 1000 - 45


def test_unknown_port_names_close_matches(pe: Block) -> None:
    with pytest.raises(SignalError, match=r"pe has no port 'psum_ot'; did you mean 'psum_out'"):
        pe["psum_ot"]
    with pytest.raises(SignalError, match=r"no port 'bank'.*ports: a_in, a_out, bank_in"):
        pe["bank"] = 1
    with pytest.raises(SignalError, match="no port 'valid'"):
        pe.step(1, until=["valid"])


def test_outputs_cannot_be_driven_and_values_must_fit(pe: Block) -> None:
    with pytest.raises(
        SignalError, match=r"'a_out' is an output of pe, not an input \(inputs: a_in"
    ):
        pe["a_out"] = 1
    with pytest.raises(ValueError, match="300 does not fit the 8-bit input 'a_in'"):
        pe["a_in"] = 300
    pe["a_in"] = -128  # the signed range is accepted
    assert pe["a_in"] == 0x80 and pe.signed("a_in") == -128


def test_accelerator_ports_and_a_trace_needs_a_build_with_waves() -> None:
    config = PRESETS["tiny"]
    model = pyverilator_backend.build_accelerator(config)
    with Block(model) as accel:
        assert accel.ports["perf"].width == isa.PERF_RECORD.nbytes * 8
        assert accel.ports["done"].direction == "output" and accel["done"] == 0
        with pytest.raises(RuntimeError, match="built without waves; open it with waves='vcd'"):
            accel.trace()
        DpiDram(config.dram_bytes, lib=accel.lib).load(np.full(1000, 7, np.uint8))
    # The next model of the same library finds the DRAM buffer still there, and must clear it.
    with Block(model) as accel:
        dram = DpiDram(config.dram_bytes, lib=accel.lib)
        dram.load(np.ones(10, np.uint8))
        assert dram.read(1000).tolist() == [1] * 10 + [0] * 990


def test_build_failure_names_the_log(tmp_path) -> None:
    bad = tmp_path / "broken.v"
    bad.write_text(
        "module broken(input wire clk, output wire q);\n  assign q = clk &;\nendmodule\n"
    )
    with pytest.raises(
        BuildError, match=r"broken_pyv \(test\) failed(.|\n)*build\.log(.|\n)*syntax"
    ):
        open_verilog([bad], "broken", tag="test")

"""The synthesis area estimate (`make synth`): committed reports are current, and the numbers agree
with what the config says the hardware must contain.

Synthesizing the whole default Accelerator takes over a minute in WebAssembly Yosys, so here the
tiny report is regenerated in full and the default one only in part (its ProcessingElement, and a
standalone SystolicArray); `make synth` / `python -m hdl_gen.synth --check` checks all of it.
"""

import inspect
import json

import pytest

from arch import isa
from arch.config import PRESETS, AccelConfig
from hdl_gen import synth
from hdl_gen.fetch import Fetch
from hdl_gen.load_unit import LoadUnit
from hdl_gen.pe import ProcessingElement
from hdl_gen.systolic_array import SystolicArray


def committed(name: str) -> dict:
    path = synth.area_dir(name) / "area.json"
    assert path.exists(), f"{path} missing: run `make synth`"
    return json.loads(path.read_text())


def standalone(component, top: str) -> synth.Area:
    (netlist,), _times = synth.yosys_json(component, top)
    return synth.subtree_areas(netlist, top)[top]


@pytest.fixture(scope="module")
def tiny_report() -> dict:
    return synth.synthesize(PRESETS["tiny"])[0]


@pytest.fixture(scope="module")
def arrays() -> dict[str, synth.Area]:
    return {name: standalone(SystolicArray(PRESETS[name]), "array") for name in ("tiny", "default")}


def test_committed_tiny_area_is_current(tiny_report):
    for filename, text in synth.render(tiny_report).items():
        path = synth.area_dir("tiny") / filename
        assert path.exists(), f"{path} missing: run `make synth`"
        assert path.read_text() == text, f"{path} is stale: run `make synth`"


def test_committed_default_pe_is_current():
    c = PRESETS["default"]
    pe = standalone(ProcessingElement(c.in_bits, c.w_bits, c.acc_bits), "pe").to_dict()
    report = committed("default")
    assert report["config"] == c.name, "rtl/default/area.json is stale: run `make synth`"
    assert report["components"]["ProcessingElement"] == {
        "label": report["components"]["ProcessingElement"]["label"],
        "modules": ["pe"],
        **pe,
    }, "rtl/default/area.json is stale: run `make synth`"


def test_pe_registers_and_one_multiplier():
    # Two weight banks, the activation passed right, the partial sum passed down (the bank bit
    # comes from the array's anti-diagonal delay line).
    c = PRESETS["default"]
    pe = standalone(ProcessingElement(c.in_bits, c.w_bits, c.acc_bits), "pe")
    assert pe.ff_bits == 2 * c.w_bits + c.in_bits + c.acc_bits
    assert dict(pe.multipliers) == {f"{c.in_bits}x{c.w_bits}->{c.in_bits + c.w_bits}": 1}


@pytest.mark.parametrize("name, count", [("tiny", 16), ("default", 256)])
def test_one_8x8_multiplier_per_pe(arrays, name, count):
    # int8 x int8 needs 16 product bits (wreduce narrows the 32-bit multiply).
    assert dict(arrays[name].multipliers) == {"8x8->16": count}


def test_tiny_report_counts_the_array_multipliers(tiny_report):
    assert tiny_report["components"]["SystolicArray"]["multipliers_by_shape"] == {"8x8->16": 16}
    assert committed("default")["components"]["SystolicArray"]["multipliers_by_shape"] == {
        "8x8->16": 256
    }


def test_array_flip_flops_scale_with_the_pe_count(arrays):
    ratio = arrays["default"].ff_bits / arrays["tiny"].ff_bits
    assert 16 / 2 < ratio < 16 * 2, ratio
    for name, area in arrays.items():
        c = PRESETS[name]
        pe_bits = 2 * c.w_bits + c.in_bits + c.acc_bits
        skew = sum(r + 1 for r in range(c.rows)) * c.in_bits
        bank_line = c.rows + c.cols - 1  # one bank bit per anti-diagonal
        deskew = sum(c.cols - 1 - col for col in range(c.cols)) * c.acc_bits
        upper = c.rows * c.cols * pe_bits + skew + bank_line + deskew
        # At most every register written in the source; at least that minus the unused ones (the
        # last column's activation outputs) and the top row's partial-sum bits above the
        # product's width (copies of its sign bit: the top row's registers have no reset, so opt
        # merges them).
        top_row_sign_copies = c.cols * (c.acc_bits - c.in_bits - c.w_bits)
        lower = upper - c.rows * c.in_bits - top_row_sign_copies
        assert lower <= area.ff_bits <= upper, (name, area.ff_bits, lower, upper)


def expected_memory_bits(c: AccelConfig) -> int:
    """Every memory the config and the design's buffer depths imply, in bits."""
    local = (c.act_kib + c.wgt_kib + c.acc_kib) * 8192 + c.param_lines * c.cols * 16 * 8

    def fifo(width: int, depth: int) -> int:
        # SyncFIFOBuffered keeps depth - 1 entries in memory, the last one in its output register.
        return width * (depth - 1)

    beat = c.dram_bytes_per_cycle * 8
    queues = 3 * fifo(isa.INSN_BITS + 32, c.queue_depth)  # instruction word + program index
    inflight = inspect.signature(LoadUnit).parameters["inflight"].default
    prefetch = inspect.signature(Fetch).parameters["prefetch"].default
    desc_depth = max(4, isa.DESC_BYTES // c.dram_bytes_per_cycle)
    read_buffers = fifo(beat, prefetch) + 2 * fifo(beat, desc_depth) + fifo(beat, inflight)
    offset_bits = (c.dram_bytes_per_cycle - 1).bit_length()
    mem_bits = (len(isa.Mem) - 1).bit_length()
    # a line on its way: local address, valid, byte offset, its LOAD's memory and pad value,
    # whether it carries the LOAD's token; and the program index of each such LOAD
    pending = fifo(16 + 1 + offset_bits + mem_bits + 8 + 1, inflight)
    pushes = fifo(
        isa.INSN_INDEX_BITS, inspect.signature(LoadUnit).parameters["push_records"].default
    )
    return local + queues + read_buffers + pending + pushes


def test_tiny_memory_bits_match_the_config(tiny_report):
    components = tiny_report["components"]
    expected = expected_memory_bits(PRESETS["tiny"])
    assert components["Accelerator"]["memory_bits"] == expected
    assert components["Accelerator_flat"]["memory_bits"] == expected


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_committed_memory_bits_match_the_config(name):
    components = committed(name)["components"]
    assert components["Accelerator"]["memory_bits"] == expected_memory_bits(PRESETS[name])
    c = PRESETS[name]
    assert components["queues"]["memory_bits"] == 3 * (isa.INSN_BITS + 32) * (c.queue_depth - 1)


def test_rows_add_up_to_the_accelerator(tiny_report):
    components = tiny_report["components"]
    parts = ("Fetch", "queues", "LoadUnit", "ComputeUnit", "StoreUnit", "ReadArbiter")
    parts += ("TokenCounter", "top_level")
    for key in ("cells", "ff_bits", "memory_bits", "multipliers"):
        assert sum(components[p][key] for p in parts) == components["Accelerator"][key], key
    # Flattening only ever merges or removes logic.
    assert components["Accelerator_flat"]["cells"] <= components["Accelerator"]["cells"]


def test_unknown_preset_is_rejected(capsys):
    assert synth.main(["no-such-preset"]) == 2
    assert "unknown config" in capsys.readouterr().err

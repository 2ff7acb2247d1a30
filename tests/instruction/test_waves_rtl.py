"""Windowed waveforms read back from real dumps (pywellen): the traced instructions are the
program's, the window bounds are where they should be, every signal of the save file exists,
the layer markers sit where the cycle counter says, and an accelerator error leaves a dump."""

from __future__ import annotations

import fnmatch
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from arch import isa
from arch.config import PRESETS
from compiler.compile import compile_model
from sim.runtime.run import RunError, run
from sim.waves.dump import UNITS, Dump
from sim.waves.window import WaveRequest

pytestmark = pytest.mark.simulator

UNIT_OF_QUEUE = {isa.Queue.LOAD: "load", isa.Queue.COMPUTE: "compute", isa.Queue.STORE: "store"}


@pytest.fixture(scope="module")
def mlp():
    exe = compile_model("mlp", PRESETS["tiny"], seed=3).executable
    shape = exe.input.shape
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    return exe, x


def program_from_image(exe) -> list[tuple[str | None, int]]:
    """(unit, opcode) of every instruction, decoded from the DRAM image the RTL runs."""
    [program] = exe.programs
    base, count = program.launch.insn_base, program.instructions
    out = []
    for index in range(count):
        at = base + index * isa.INSN_BYTES
        word = int.from_bytes(program.image[at : at + isa.INSN_BYTES].tobytes(), "little")
        insn = isa.decode_insn(word, index)
        queue = isa.queue_of(insn.opcode, insn.fields)
        out.append((UNIT_OF_QUEUE.get(queue) if queue is not None else None, insn.opcode.value))
    return out


def savefile_signals(path: Path) -> list[str]:
    """Signal names in a .gtkw file (lines that are neither directives nor comments)."""
    names = []
    for line in path.read_text().splitlines():
        if not line or line[0] in "[*@-^!":
            continue
        names.append(re.sub(r"\[\d+:0\]$", "", re.sub(r"^\+\{[^}]*\} ", "", line)))
    return names


@pytest.fixture(scope="module")
def layer_run(mlp, tmp_path_factory):
    exe, x = mlp
    layer = exe.layers[1]
    directory = tmp_path_factory.mktemp("waves")
    result = run(
        exe,
        x,
        "rtl",
        workdir=directory / "sim",
        waves=WaveRequest(layer=layer.name, directory=directory),
        name="mlp",
    )
    return exe, layer, result


def test_layer_window_traces_exactly_the_layers_instructions(layer_run):
    exe, layer, result = layer_run
    assert result.bit_exact
    # FST everywhere (lz4 and zlib are the project's own): this is the dump read back below
    assert Path(result.waves["file"]).suffix == ".fst"
    dump = Dump(Path(result.waves["file"]))
    start, stop = layer.insn_range
    program = program_from_image(exe)
    traced = dump.instructions()
    for unit in UNITS:
        expected = [(i, op) for i, (u, op) in enumerate(program) if u == unit and start <= i < stop]
        seen = [(i, op) for i, op in traced[unit] if start <= i < stop]
        assert seen == expected, f"{unit}: traced {seen[:5]}..., program {expected[:5]}..."
    assert any(traced[unit] for unit in UNITS)


def test_layer_window_bounds(layer_run):
    _exe, layer, result = layer_run
    start, stop = layer.insn_range
    dump = Dump(Path(result.waves["file"]))
    progress = dump.changes(
        [
            "tb_top.dut.accel.insn_started",
            "tb_top.dut.accel.insn_frontier",
            "tb_top.dut.perf.cycles",
        ]
    )
    started = progress["tb_top.dut.accel.insn_started"]
    frontier = progress["tb_top.dut.accel.insn_frontier"]
    # Opens when the first instruction >= start has begun: before it none had.
    assert started[0][1] > start and started[0][1] - 1 < stop
    # Closes when every instruction below stop has retired, not earlier.
    assert frontier[-1][1] >= stop
    assert all(value < stop for _t, value in frontier[:-1])
    # The traced cycles lie around the layer's cycle window from the PERF records.
    first, last = result.waves["traced_cycles"]
    cycles = progress["tb_top.dut.perf.cycles"]
    assert (cycles[0][1], cycles[-1][1]) == (first, last)
    layer_start, layer_end = next(r.cycle_window for r in result.layers if r.name == layer.name)
    assert layer_start <= first < layer_end < last


def test_savefile_signals_exist_and_markers_sit_on_layer_boundaries(layer_run):
    _exe, layer, result = layer_run
    dump = Dump(Path(result.waves["file"]))
    savefile = Path(result.waves["savefile"])
    names = savefile_signals(savefile)
    assert len(names) > 50
    missing = [name for name in names if name not in dump.names()]
    assert not missing, f"signals in {savefile.name} but not in the dump: {missing}"
    for line in savefile.read_text().splitlines():
        if line.startswith("^"):
            assert Path(line.split(" ", 1)[1]).exists(), line
    # Marker A is the layer's start (before the window opened: on its left edge), B its end,
    # named so in GTKWave; the cycle counter reads the end's count at marker B's time.
    text = savefile.read_text()
    layer_start, layer_end = next(r.cycle_window for r in result.layers if r.name == layer.name)
    assert f"[markername] A{layer.name} start (cycle {layer_start}" in text
    assert re.search(
        rf"^\[markername\] B{re.escape(layer.name)} end \(cycle {layer_end}\)", text, re.M
    )
    marker_a, marker_b = map(
        int, re.search(r"^\*[-\d.]+ -?\d+ (-?\d+) (-?\d+)", text, re.M).groups()
    )
    first_traced = Dump(Path(result.waves["file"])).span()[0]
    assert marker_a == first_traced
    cycles = dump.changes(["tb_top.dut.perf.cycles"])["tb_top.dut.perf.cycles"]
    assert dict(cycles)[marker_b] == layer_end
    # One time unit per cycle: the dump's time advances one clock period (1 ns) per count.
    (t0, c0), (t1, c1) = cycles[0], cycles[-1]
    assert (t1 - t0) == (c1 - c0) * 1000  # in the dump's 1 ps steps


def test_cycle_window_is_exact_and_smaller_than_the_whole_run(mlp, tmp_path):
    exe, x = mlp
    window = run(
        exe,
        x,
        "rtl",
        workdir=tmp_path / "a",
        waves=WaveRequest(cycles=(1000, 1500), directory=tmp_path),
        name="cycles",
    )
    assert window.bit_exact, window.first_mismatch
    dump = Dump(Path(window.waves["file"]))
    cycles = dump.changes(["tb_top.dut.perf.cycles"])["tb_top.dut.perf.cycles"]
    assert cycles[0][1] == 1000 and cycles[-1][1] == 1500
    whole = run(
        exe, x, "rtl", workdir=tmp_path / "b", waves=WaveRequest(directory=tmp_path), name="all"
    )
    assert whole.bit_exact, whole.first_mismatch
    assert whole.waves["traced_cycles"][1] >= whole.cycles
    assert window.waves["bytes"] < whole.waves["bytes"] / 3
    assert window.cycles == whole.cycles  # tracing changes nothing the design does
    for name, value in whole.outputs.items():
        np.testing.assert_array_equal(window.outputs[name], value)


def test_accelerator_error_leaves_a_dump_up_to_the_error(tmp_path):
    exe = compile_model("mlp", PRESETS["tiny"], seed=1).executable
    [program] = exe.programs
    index = exe.layers[1].insn_range[0] + 1
    address = program.launch.insn_base + index * isa.INSN_BYTES
    program.image[address] = (program.image[address] & 0xF0) | 13  # an illegal opcode
    shape = exe.input.shape
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    with pytest.raises(RunError) as info:
        run(
            exe,
            x,
            "rtl",
            workdir=tmp_path,
            waves=WaveRequest(cycles=(0, 10**9), directory=tmp_path),
        )
    message = str(info.value)
    assert "ILLEGAL_OPCODE" in message and "waveform:" in message
    dump = Dump(Path(message.split("waveform: ")[1].strip()))
    errors = dump.changes(["tb_top.error", "tb_top.error_index"])
    assert errors["tb_top.error"][-1][1] == 1
    assert errors["tb_top.error_index"][-1][1] == index
    assert info.value.cycle is not None


def test_cli_failure_dump_traces_the_cycles_before_the_error(tmp_path, capsys, monkeypatch):
    from types import SimpleNamespace

    from sim.app import retrace

    exe = compile_model("mlp", PRESETS["tiny"], seed=1).executable
    [program] = exe.programs
    index = exe.layers[2].insn_range[0]
    address = program.launch.insn_base + index * isa.INSN_BYTES
    program.image[address] = (program.image[address] & 0xF0) | 14  # an illegal opcode
    shape = exe.input.shape
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    with pytest.raises(RunError) as info:
        run(exe, x, "rtl", workdir=tmp_path / "plain")
    window = retrace.failure_cycles(info.value.cycle)
    monkeypatch.setattr("sim.waves.window.WAVES_DIR", tmp_path)
    args = SimpleNamespace(backend="rtl", no_failure_waves=False, max_cycles=10**6)
    failing = retrace.Retrace(exe, x, tmp_path, WaveRequest(cycles=window, directory=tmp_path))
    retrace.failure_dump(args, failing, lambda text: print(text, file=sys.stderr))
    err = capsys.readouterr().err
    assert "re-running with tracing" in err and "ILLEGAL_OPCODE" in err
    [dump] = [*tmp_path.glob("*.fst"), *tmp_path.glob("*.vcd")]  # VCD where FST cannot link
    cycles = Dump(dump).changes(["tb_top.dut.perf.cycles"])["tb_top.dut.perf.cycles"]
    assert cycles[0][1] == window[0] and cycles[-1][1] == info.value.cycle


def test_vcd_on_request(mlp, tmp_path, monkeypatch):
    exe, x = mlp
    # What `make sim ... WAVES=vcd` once exported: cocotb reads WAVES as a yes/no flag.
    monkeypatch.setenv("WAVES", "vcd")
    result = run(
        exe,
        x,
        "rtl",
        workdir=tmp_path,
        waves=WaveRequest(fmt="vcd", cycles=(2000, 2300), directory=tmp_path),
        name="v",
    )
    assert result.bit_exact, result.first_mismatch
    path = Path(result.waves["file"])
    assert path.suffix == ".vcd" and path.read_text(errors="replace").startswith("$")
    cycles = Dump(path).changes(["tb_top.dut.perf.cycles"])["tb_top.dut.perf.cycles"]
    assert (cycles[0][1], cycles[-1][1]) == (2000, 2300)
    assert Path(result.waves["savefile"]).exists()


def test_mismatch_dump_marks_the_store_of_the_first_wrong_value(tmp_path):
    """Weight bytes of fc2 altered in the DRAM image: the RTL stores values the reference does
    not have; the layer's dump gets a marker where the first of them was written."""
    exe = compile_model("mlp", PRESETS["tiny"], seed=3).executable
    [program] = exe.programs
    layer = exe.layers[1]
    [weights] = [r for r in program.regions if r.name == f"{layer.name}#weights"]
    rng = np.random.default_rng(19)
    at = weights.addr + rng.choice(weights.nbytes, size=32, replace=False)
    program.image[at] ^= 0x5A  # (one byte may meet a zero activation and change nothing)
    x = rng.standard_normal(exe.input.shape).astype(np.float32)
    result = run(
        exe,
        x,
        "rtl",
        workdir=tmp_path / "sim",
        waves=WaveRequest(layer=layer.name, directory=tmp_path),
        name="wrong",
    )
    bad = result.first_mismatch
    assert bad is not None and bad.name == layer.name and bad.mismatch_addr is not None
    address = bad.mismatch_addr
    text = Path(result.waves["savefile"]).read_text()
    label = f"{layer.name}: first wrong value stored (DRAM 0x{address:x})"
    [line] = [x for x in text.splitlines() if x.startswith("[markername]") and label in x]
    letter = "ABCDEFGHIJKLMNOPQRSTUVWXYZ".index(line.split()[1][0])
    times = [int(t) for t in re.search(r"^\*[-\d.]+ -?\d+ (.*)$", text, re.M)[1].split()]
    at_time = times[letter]
    # At the marker the write port writes that byte, with the value the RTL left in DRAM.
    dump = Dump(Path(result.waves["file"]))
    port = "tb_top.dut.dram_wr__"
    names = [f"{port}valid", f"{port}payload.addr", f"{port}payload.data"]
    changes = dump.changes(names)
    value = {n: [v for t, v in changes[n] if t <= at_time][-1] for n in names}
    bus = PRESETS["tiny"].dram_bytes_per_cycle
    assert value[f"{port}valid"] == 1
    assert value[f"{port}payload.addr"] // bus == address // bus
    stored = value[f"{port}payload.data"] >> (8 * (address % bus)) & 0xFF
    got = int(re.search(r"got (-?\d+)", bad.mismatch)[1])  # the first wrong value, as read back
    assert stored == got & 0xFF


def test_size_estimate_before_a_dump_is_near_the_dump(tmp_path, capsys, monkeypatch):
    """The line the CLI prints before a dump (the window's cycles x the selection's bits x bytes
    per bit and cycle) is within 2x of the file written: from the prior (measured on another
    dump: the whole run, seed 3) on the first run, from the first run's measured rate on the
    second."""
    from sim.app import cli, session

    monkeypatch.setattr("sim.waves.window.WAVES_DIR", tmp_path)
    args = ["--model", "mlp", "--config", "tiny", "--seed", "5", "--waves", "fst"]
    sizes = []
    for n in range(2):
        request = WaveRequest(fmt="fst", cycles=(2000, 5000), directory=tmp_path)
        monkeypatch.setattr(session, "wave_request", lambda _request, r=request: r)
        assert cli.main([*args, "--out", str(tmp_path / f"run{n}")]) == 0
        err = capsys.readouterr().err
        [line] = [x for x in err.splitlines() if x.startswith("waveform: cycles 2000:5000")]
        estimate = float(re.search(r"about ([\d.,]+) MB of FST", line)[1].replace(",", ""))
        report = json.loads((tmp_path / f"run{n}" / "report.json").read_text())
        sizes.append((estimate, report["wave_window"]["bytes"] / 1e6, line))
    (prior, real0, first), (estimate, real, second) = sizes
    assert "a prior" in first and "measured on the last dump" in second
    assert real0 / 2 < prior < real0 * 2, (prior, real0)
    assert real / 2 < estimate < real * 2, (estimate, real)


@pytest.fixture(scope="module")
def header():
    """The traced tiny build's dump header: every signal it can write."""
    from sim.backends.rtl import RtlBackend

    return Dump(RtlBackend().wave_header(PRESETS["tiny"], "fst"))


@pytest.mark.parametrize("signals", ["dut.accel.load.*", "all"])
def test_wave_signals_write_the_selection(mlp, tmp_path, header, signals):
    """The dump holds exactly the signals the selection names (matched here with fnmatch over
    the build's names) and the clock; the save file names only signals the dump holds."""
    exe, x = mlp
    result = run(
        exe,
        x,
        "rtl",
        workdir=tmp_path / "sim",
        waves=WaveRequest(cycles=(1000, 1400), directory=tmp_path, signals=signals),
        name="sel",
    )
    assert result.bit_exact, result.first_mismatch
    dump = Dump(Path(result.waves["file"]))
    names = header.names()
    if signals == "all":
        expected = names
    else:
        expected = {n for n in names if fnmatch.fnmatchcase(n, f"tb_top.{signals}")}
        expected.add("tb_top.clk")
    assert dump.names() == expected
    assert result.waves["signal_count"] == len(expected)
    assert result.waves["signal_bits"] == sum(header.widths()[n] for n in expected)
    shown = savefile_signals(Path(result.waves["savefile"]))
    assert shown and set(shown) <= dump.names()


def test_cli_refuses_a_pattern_matching_no_signal(tmp_path, capsys):
    from sim.app import cli

    args = ["--model", "mlp", "--config", "tiny", "--out", str(tmp_path / "run")]
    code = cli.main([*args, "--wave-signals", "dut.accel.load.*,dut.nonesuch*"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("error: WAVE_SIGNALS pattern 'dut.nonesuch*' matches none of the")

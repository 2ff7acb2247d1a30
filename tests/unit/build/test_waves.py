"""Waveform requests, windows, translate filters and save files (no simulator)."""

from __future__ import annotations

import json
import os

import pytest

from arch import isa
from arch.config import PRESETS
from compiler.compile import compile_model
from hdl_gen.generate import rtl_dir
from sim.app import cli
from sim.waves.savefile import write_filters, write_savefile
from sim.waves.signals import all_traces, full_name
from sim.waves.window import WaveError, WaveRequest, parse_range, resolve


@pytest.fixture(scope="module")
def programs():
    return compile_model("mlp", PRESETS["tiny"], seed=2).executable.programs


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10", "FROM:TO"),
        ("a:b", "FROM:TO"),
        ("5:5", "empty"),
        ("9:3", "empty"),
        ("-1:4", "FROM:TO"),
    ],
)
def test_bad_ranges_are_refused(text, message):
    with pytest.raises(WaveError, match=message):
        parse_range(text, "WAVE_INSN")


def test_ranges_parse():
    assert parse_range(" 3 : 17 ", "WAVE_CYCLES") == (3, 17)


def test_one_window_and_a_known_format():
    with pytest.raises(WaveError, match="choose one wave window"):
        WaveRequest(layer="fc1", cycles=(0, 5))
    with pytest.raises(WaveError, match="fst or vcd"):
        WaveRequest.parse("ghw")


def test_layer_window_is_the_layers_instruction_range(programs):
    layer = programs[0].layers[1]
    window = resolve(WaveRequest(layer=layer.name), programs)
    assert (window.by, window.start, window.stop) == ("insn", *layer.insn_range)
    assert window.plusargs() == [
        "+wave_by=insn",
        f"+wave_from={layer.insn_range[0]}",
        f"+wave_to={layer.insn_range[1]}",
    ]
    assert resolve(WaveRequest(), programs).plusargs() == []


def test_unknown_layer_names_close_ones(programs):
    with pytest.raises(WaveError, match=r"'fc3' is not a layer.*did you mean.*fc1"):
        resolve(WaveRequest(layer="fc3"), programs)


def test_instruction_window_past_the_program_is_refused(programs):
    count = programs[0].instructions
    with pytest.raises(WaveError, match=f"past the program's {count} instructions"):
        resolve(WaveRequest(insns=(0, count + 1)), programs)


def test_filters_translate_every_enum_member_and_fsm_state(tmp_path):
    files = write_filters(tmp_path, rtl_dir("tiny"))
    opcode = dict(line.split(" ", 1) for line in files["opcode"].read_text().splitlines())
    assert opcode == {format(m.value, "x"): m.name for m in isa.Opcode}
    states = json.loads((rtl_dir("tiny") / "fsm_states.json").read_text())
    assert {"IDLE", "ACQUIRE", "RUN", "RELEASE"} == set(states["accel.load.frame_state"].values())
    frame = files["accel.load.frame_state"].read_text().split()
    assert frame == ["0", "IDLE", "1", "ACQUIRE", "2", "RUN", "3", "RELEASE"]


def test_savefile_lists_every_signal_with_markers(tmp_path):
    dump = tmp_path / "x.fst"
    markers = [(100, "end of fc1"), (900, "end of fc")]
    widths = {"tb_top.dut.accel.fetch.pc": 32}
    path = write_savefile(dump, rtl_dir("tiny"), markers, "t", (0, 1000), widths)
    lines = path.read_text().splitlines()
    for trace in all_traces():
        name = full_name(trace)
        assert any(line.endswith(name) or line.endswith(f"{name}[31:0]") for line in lines)
    assert "+{fetch pc} tb_top.dut.accel.fetch.pc[31:0]" in lines
    assert "[*] marker A: end of fc1" in lines and "[*] marker B: end of fc" in lines
    assert any(
        line.startswith("*") and line.split()[1:4] == ["100", "100", "900"] for line in lines
    )


def test_cli_refuses_bad_wave_options(capsys):
    assert cli.main(["--model", "mlp", "--config", "tiny", "--wave-layer", "nope"]) == 2
    assert "WAVE_LAYER 'nope' is not a layer" in capsys.readouterr().err
    assert cli.main(["--model", "mlp", "--config", "tiny", "--wave-insn", "7"]) == 2
    assert "FROM:TO" in capsys.readouterr().err
    argv = ["--model", "mlp", "--config", "tiny", "--backend", "isa", "--waves", "fst"]
    assert cli.main(argv) == 2
    assert "--waves applies only to --backend rtl, not isa" in capsys.readouterr().err


def test_make_waves_without_a_dump_or_gtkwave_says_what_to_do(tmp_path, monkeypatch, capsys):
    from sim.waves import open as open_waves

    monkeypatch.setattr(open_waves, "WAVES_DIR", tmp_path)
    assert open_waves.main([]) == 2
    assert "no waveform dump in" in capsys.readouterr().err
    old, newest = tmp_path / "old.fst", tmp_path / "new.vcd"
    for age, path in ((100, old), (0, newest)):
        path.write_bytes(b"x")
        os.utime(path, (1_700_000_000 - age, 1_700_000_000 - age))  # apart, whatever the clock
    assert open_waves.newest_dump(tmp_path) == newest
    monkeypatch.setenv("PATH", str(tmp_path))  # no gtkwave here
    assert open_waves.main([str(newest)]) == 2
    assert "apt-get install -y gtkwave" in capsys.readouterr().err

"""Save files a person can read: every row has its own name led by its unit (GTKWave shows only
what follows the last dot, so dots are left out), markers carry the layer names and mark where
each layer starts and ends - also a layer that began before the traced window."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from arch.config import PRESETS
from hdl_gen.generate import rtl_dir
from sim.backends.accelerator import accelerator_spec
from sim.waves.capture import layer_markers
from sim.waves.savefile import write_savefile
from sim.waves.signals import all_traces, label


def test_every_row_label_is_unique_dotless_and_led_by_its_unit():
    labels = [label(trace) for trace in all_traces()]
    assert not [name for name, n in Counter(labels).items() if n > 1]
    assert not [name for name in labels if "." in name]
    for trace in all_traces():
        parts = trace.path.split(".")
        if parts[:2] == ["dut", "accel"] and len(parts) > 3 and trace.alias is None:
            assert label(trace).startswith(parts[2] + " "), (trace.path, label(trace))
    tokens = [label(t) for t in all_traces() if "deps__" in t.path]
    assert len(tokens) == 12 and {t.split()[0] for t in tokens} == {"load", "compute", "store"}


@dataclass
class _Layer:
    name: str
    cycle_window: tuple[int, int]


@dataclass
class _Timing:  # the RTL backend's DeviceResult.cycle_time: cycle0 + cycle * steps
    cycle0: int
    steps: int

    def cycle_time(self, cycle: int) -> int:
        return self.cycle0 + cycle * self.steps


def test_one_layer_window_gets_a_start_and_an_end_marker():
    timing = _Timing(7000, 1000)
    layers = [_Layer("fc1", (0, 3008)), _Layer("fc2", (3008, 5883)), _Layer("fc", (5883, 6372))]
    # Traced from a little after fc2 began to a little after it ended (fc1 is not in it).
    span = (timing.cycle_time(3050), timing.cycle_time(5890))
    markers = layer_markers(timing, layers, span)
    assert markers == [
        (span[0], "fc2 start (cycle 3008, outside the window)"),
        (timing.cycle_time(5883), "fc2 end (cycle 5883) | fc start (cycle 5883)"),
        (span[1], "fc end (cycle 6372, outside the window)"),
    ]  # fmt: skip


def test_markers_are_named_in_the_save_file(tmp_path):
    markers = [(100, "fc1 start (cycle 0)"), (900, "fc1 end (cycle 800)")]
    widths = {"tb_top.dut.accel.fetch.pc": 32}
    path = write_savefile(tmp_path / "x.fst", rtl_dir("tiny"), markers, "t", (0, 1000), widths)
    lines = path.read_text().splitlines()
    assert "[markername] Afc1 start (cycle 0)" in lines
    assert "[markername] Bfc1 end (cycle 800)" in lines
    assert "+{load pop_prev} tb_top.dut.accel.load.deps__pop_prev" in lines


def test_traced_builds_run_one_time_unit_per_cycle():
    assert accelerator_spec(PRESETS["tiny"], "vcd").clock_period_ns == 1
    assert accelerator_spec(PRESETS["tiny"]).clock_period_ns == 10  # untraced builds unchanged

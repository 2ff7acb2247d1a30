"""Time bounds on code that is not ours to trust (issue 44): every onnxruntime run (host steps,
the reference's host nodes, calibration) within ``COSIM_HOST_STEP_SECONDS``, every call into a
hook module within ``COSIM_HOOK_SECONDS``; past it the run stops, naming what overstayed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from arch import host_runtime
from arch.config import PRESETS
from arch.reference import evaluate_node
from compiler.compile import compile_model
from sim import knobs
from sim.app.cli import exit_code
from sim.backends import hooks
from sim.runtime.run import run
from tests.unit.run.hostile_models import FOREVER, save_loop_model
from tests.unit.run.test_cli_errors import assert_usage_error, cli, in_process

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def short_bound(monkeypatch):
    """Host runs bounded to half a second (restored after the test)."""
    monkeypatch.setenv(knobs.HOST_STEP_SECONDS.name, "0.5")
    host_runtime.set_time_bound(0.5)
    yield
    host_runtime.set_time_bound(host_runtime.DEFAULT_TIME_BOUND_S)


def spinning(exe, trips: int):
    """``exe`` (compiled from the loop model) with its host step's Loop set to ``trips``."""
    [node] = [n for n in exe.reference.nodes if n.op == "host"]
    model = onnx.ModelProto.FromString(node.params["model"].tobytes())
    [n] = [init for init in model.graph.initializer if init.name == "n"]
    n.CopyFrom(numpy_helper.from_array(np.array(trips, np.int64), "n"))
    node.params["model"] = np.frombuffer(model.SerializeToString(), np.uint8).copy()
    return node


@pytest.fixture(scope="module")
def loop_exe(tmp_path_factory):
    path = save_loop_model(3, tmp_path_factory.mktemp("loop") / "loop.onnx")
    return compile_model(str(path), PRESETS["tiny"], seed=0).executable


def test_a_host_step_that_never_ends_is_stopped_and_named(loop_exe, short_bound):
    node = spinning(loop_exe, FOREVER)
    x = np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32)
    with pytest.raises(host_runtime.HostTimeout) as caught:
        run(loop_exe, x, "isa")
    assert f"host step {node.name!r}" in str(caught.value)
    assert "0.5 s" in str(caught.value)
    assert exit_code(caught.value)[0] == 3


def test_a_short_loop_still_runs_under_the_bound(loop_exe, short_bound):
    node = spinning(loop_exe, 3)
    x = np.random.default_rng(2).standard_normal((1, 8)).astype(np.float32)
    graph = loop_exe.reference
    [feed] = node.inputs
    q = np.clip(np.round(x / graph.tensors[feed].scale), -128, 127).astype(np.int8)
    y = evaluate_node(graph, node, [q])  # Add of 0, 3 times: the input's codes, requantized
    out = graph.tensors[node.output]
    expected = np.clip(np.round(q * graph.tensors[feed].scale / out.scale), -128, 127)
    assert np.array_equal(y.reshape(expected.shape), expected)


def test_calibration_of_a_model_that_never_ends_is_stopped(tmp_path):
    model = save_loop_model(FOREVER, tmp_path / "spin.onnx")
    result = cli(
        "--model",
        str(model),
        "--config",
        "tiny",
        out=tmp_path / "o",
        extra_env={knobs.HOST_STEP_SECONDS.name: "1"},
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 3, result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "calibration" in line and "time bound of 1 s" in line, line


def test_ctrl_c_stops_a_host_run(tmp_path):
    """Ctrl-C reaches a run onnxruntime would keep for 10 minutes (the bound): the process ends
    with KeyboardInterrupt, long before the bound."""
    script = tmp_path / "spin.py"
    script.write_text(
        textwrap.dedent(
            """
            import signal
            import sys
            import numpy as np
            # Ctrl-C as a terminal delivers it, whatever this worker process inherited
            signal.signal(signal.SIGINT, signal.default_int_handler)
            from arch import host_runtime
            from tests.unit.run.hostile_models import FOREVER, loop_model
            host_runtime.set_time_bound(600)
            model = loop_model(FOREVER)
            model.graph.node.pop(0)  # the Loop alone, on input a
            model.graph.input[0].name = "a"
            model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 8
            print("running", flush=True)
            try:
                host_runtime.run(model.SerializeToString(), {"a": np.zeros((1, 8))}, "y")
            except KeyboardInterrupt:
                print("interrupted", flush=True)
                sys.exit(130)
            """
        )
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "running"
    time.sleep(0.5)  # (inside onnxruntime by now, or about to be)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)  # the bound is 600 s
    assert (proc.returncode, out.strip()) == (130, "interrupted")


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan", "inf"])
def test_a_bound_that_is_not_a_number_of_seconds_is_refused(tmp_path, capsys, monkeypatch, value):
    monkeypatch.setenv(knobs.HOST_STEP_SECONDS.name, value)
    result = in_process(capsys, "--model", "mlp", "--out", str(tmp_path / "o"))
    assert_usage_error(result, knobs.HOST_STEP_SECONDS.name, repr(value))
    assert not (tmp_path / "o").exists()  # refused before anything ran


# --- hooks ---------------------------------------------------------------------------------


@pytest.fixture
def hook_dir(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(knobs.HOOK_SECONDS.name, "0.5")
    return tmp_path


def test_a_hook_whose_import_blocks_is_named(hook_dir):
    (hook_dir / "sleepy_import.py").write_text("import time\ntime.sleep(600)\n")
    with pytest.raises(hooks.HookError, match="importing 'sleepy_import'.*time bound of 0.5 s"):
        hooks.load(["sleepy_import"])


def test_an_on_report_that_blocks_is_stopped_and_named(hook_dir):
    (hook_dir / "sleepy_check.py").write_text(
        "import time\n\nasync def hook(dut, ctx):\n    pass\n\n"
        "def on_report(report):\n    while True:\n        time.sleep(1)\n"
    )
    with pytest.raises(hooks.HookTimeout, match="hook 'sleepy_check' ran longer") as caught:
        hooks.check_report({"hooks": {"sleepy_check": {}}})
    assert exit_code(caught.value)[0] == 3


def test_a_quick_on_report_still_reports(hook_dir):
    (hook_dir / "quick_check.py").write_text(
        "async def hook(dut, ctx):\n    pass\n\n"
        "def on_report(report):\n    return str(sum(report['values']))\n"
    )
    values = [int(v) for v in np.random.default_rng(3).integers(1, 100, 5)]
    assert hooks.check_report({"hooks": {"quick_check": {}}, "values": values}) == [
        f"quick_check: {sum(values)}"
    ]


@pytest.mark.parametrize("value", ["", "later", "0", "-2"])
def test_a_hook_bound_that_is_not_a_number_of_seconds_is_refused(monkeypatch, value):
    monkeypatch.setenv(knobs.HOOK_SECONDS.name, value)
    if value == "":
        assert hooks.time_bound() == float(knobs.HOOK_SECONDS.default)
        return
    with pytest.raises(hooks.HookError, match=knobs.HOOK_SECONDS.name):
        hooks.time_bound()

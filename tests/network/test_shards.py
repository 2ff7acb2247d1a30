"""Layer shards and layer ranges (sim/scaleout/shards.py, sim/runtime/checkpoint.py) against the
sequential run.

Each range starts from the reference's DRAM state at its first layer, so the sequential run is an
independent reference: every layer must come out bit-exact with the sequential run's cycles,
cycle window, DRAM bytes and counters (on the RTL: the PERF records), and the outputs equal.
Shards run on a real Dask LocalCluster (worker processes); one test kills a worker while it runs
its shard and checks that Dask re-ran the shard elsewhere.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
from distributed import Client, LocalCluster

from arch.config import PRESETS
from compiler.compile import compile_model
from sim.runtime.run import run
from sim.scaleout import cluster, shards
from tests.network.test_models_rtl import seeded_input

pytestmark = pytest.mark.simulator


def signature(result, counters=True):
    return [
        (
            layer.name,
            layer.device,
            layer.cycles,
            layer.cycle_window,
            layer.dram_read_bytes,
            layer.dram_write_bytes,
            layer.counters if counters else None,
            layer.bit_exact,
        )
        for layer in result.layers
    ]


def assert_same(sharded, sequential, counters=True):
    assert sequential.bit_exact and sharded.bit_exact, sharded.first_mismatch
    assert signature(sharded, counters) == signature(sequential, counters)
    assert sharded.cycles == sequential.cycles > 0
    assert sharded.outputs.keys() == sequential.outputs.keys()
    for name, value in sequential.outputs.items():
        np.testing.assert_array_equal(sharded.outputs[name], value)


@pytest.fixture(scope="module")
def cnn():
    exe = compile_model("cnn", PRESETS["tiny"], image_size=16, seed=3).executable
    return exe, seeded_input(exe, seed=5)


@pytest.fixture(scope="module")
def cnn_rtl(cnn, tmp_path_factory):
    exe, x = cnn
    return run(exe, x, "rtl", workdir=tmp_path_factory.mktemp("sequential"))


@pytest.mark.parametrize("jobs", [2, 3])
def test_sharded_rtl_equals_sequential(cnn, cnn_rtl, jobs, tmp_path):
    exe, x = cnn
    sharded = shards.run(exe, x, "rtl", jobs=jobs, workdir=tmp_path, log=lambda _: None)
    assert len(sharded.shards) == jobs
    assert_same(sharded, cnn_rtl)


def test_sharded_on_an_early_warmed_cluster(cnn, cnn_rtl, tmp_path):
    """``make sim JOBS=2``'s cluster, started while the model compiles: its workers import the
    backend and find the model's build (the client's key) before any shard arrives; a warm-up
    that fails (a config file that does not exist) leaves the worker to fail its own task."""
    exe, x = cnn
    early = cluster.EarlyClient(2, ("rtl", "tiny"))
    try:
        client = early.ready()
        warmed = client.run(lambda: "sim.backends.registry" in __import__("sys").modules)
        assert list(warmed.values()) == [True, True]
        # born with Ctrl-C blocked (the terminal's SIGINT is the CLI's), the caller's mask kept
        blocked = client.run(lambda: signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))
        assert list(blocked.values()) == [True, True]
        assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        keys = client.run(cluster.warm_worker, "rtl", "tiny")
        assert set(keys.values()) == {cluster.build_key("rtl", PRESETS["tiny"])}
        quiet = lambda _: None  # noqa: E731
        sharded = shards.run(exe, x, "rtl", jobs=2, workdir=tmp_path, client=early, log=quiet)
    finally:
        early.close()
    assert_same(sharded, cnn_rtl)
    broken = cluster.EarlyClient(1, ("rtl", str(tmp_path / "missing.json")))
    try:
        assert broken.ready() is not None
    finally:
        broken.close()


@pytest.mark.parametrize("spec", ["conv2", "maxpool:conv3", "3:6", "fc"])
def test_layer_range_on_rtl(cnn, cnn_rtl, spec, tmp_path):
    exe, x = cnn
    part = shards.run(exe, x, "rtl", layers=spec, workdir=tmp_path, log=lambda _: None)
    lo, hi = shards.select(exe, spec)
    wanted = signature(cnn_rtl)[lo:hi]
    # the range's cycle windows start at 0: the windows shift, the layers' cycles do not
    offset = wanted[0][3][0]
    wanted = [(*w[:3], (w[3][0] - offset, w[3][1] - offset), *w[4:]) for w in wanted]
    assert [layer.name for layer in part.layers] == [w[0] for w in wanted]
    assert signature(part) == wanted


def test_sharded_isa_multi_program_with_host_steps(tmp_path):
    """A device -> host -> device -> host -> device graph: shards across programs, host steps
    checked on the reference's tensors, on the ISA simulator (its counters are ideal-model
    statistics, compared through the cycles and DRAM bytes)."""
    from tests.unit.front.test_partition import partitioned_model

    path = tmp_path / "partitioned.onnx"
    import onnx

    onnx.save(partitioned_model(seed=2), path)
    exe = compile_model(str(path), PRESETS["tiny"]).executable
    assert len(exe.programs) > 1
    x = seeded_input(exe, seed=8)
    sequential = run(exe, x, "isa")
    for jobs in (1, 2, len(exe.layers)):
        plan = shards.plan(exe, jobs)
        assert [p for s in plan for p in s.pieces][0].first == 0
        sharded = shards.run(exe, x, "isa", jobs=jobs, log=lambda _: None)
        assert_same(sharded, sequential, counters=False)


def test_killed_worker_is_retried(cnn, cnn_rtl, tmp_path, monkeypatch):
    """Kill the worker process running shard 1 while it simulates: Dask re-runs the shard on a
    worker (a new attempt directory) and the merged run still equals the sequential one."""
    exe, x = cnn
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as local,
        Client(local) as client,
    ):
        monkeypatch.setenv(cluster.SCHEDULER_ENV, local.scheduler_address)
        outcome: dict = {}

        def sharded():
            try:
                outcome["result"] = shards.run(
                    exe, x, "rtl", jobs=2, workdir=tmp_path, log=lambda _: None
                )
            except Exception as exc:  # reported by the assertion below
                outcome["error"] = exc

        thread = threading.Thread(target=sharded)
        thread.start()
        attempts = tmp_path / "shard0"
        # no wall-clock limit (a loaded machine may first build the model): wait while the run lives
        while not (attempts.is_dir() and any(attempts.iterdir())):
            assert thread.is_alive(), f"the run ended before shard 1 started: {outcome}"
            time.sleep(0.05)
        victim = next(
            worker
            for worker, keys in client.processing().items()
            for key in keys
            if str(key).startswith("shard0-")
        )
        pid = client.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)
        thread.join()  # Dask retries a lost task a bounded number of times, then fails it
    assert "error" not in outcome, outcome.get("error")
    assert len(list(attempts.iterdir())) == 2  # the killed attempt and the retry
    assert_same(outcome["result"], cnn_rtl)

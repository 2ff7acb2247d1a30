"""Shard planning, LAYERS parsing, the JOBS/LAYERS errors of the command line, and the
dask-jobqueue example configuration (no simulator)."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
from pathlib import Path

import dask.config
import numpy as np
import pytest
import yaml

from arch.config import PRESETS
from compiler.compile import compile_model
from sim.backends.isa_machine import Machine
from sim.runtime.checkpoint import hollow, load_cycles
from sim.scaleout import cluster, shards

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def exe():
    return compile_model("cnn", PRESETS["tiny"], image_size=16, seed=3).executable


def brute_force(exe, jobs):
    """The smallest largest shard cost over every way to cut the layers into ``jobs`` shards,
    a shard that starts inside its program paying for its warm-up layer's loads."""
    costs = [shards.layer_estimate(exe, 0, n) for n in range(len(exe.layers))]
    warm = [load_cycles(exe, 0, n) for n in range(len(exe.layers))]
    best = None
    for cuts in itertools.combinations(range(1, len(costs)), jobs - 1):
        bounds = [0, *cuts, len(costs)]
        largest = max(
            sum(costs[a:b]) + (warm[a - 1] if a else 0) for a, b in itertools.pairwise(bounds)
        )
        best = largest if best is None else min(best, largest)
    return best


@pytest.mark.parametrize("jobs", [1, 2, 3, 4, 6])
def test_plan_is_optimal_and_covers_every_layer_once(exe, jobs):
    plan = shards.plan(exe, jobs)
    assert len(plan) == jobs
    pieces = [p for shard in plan for p in shard.pieces]
    covered = [n for p in pieces for n in range(p.first, p.stop)]
    assert covered == list(range(len(exe.layers)))
    assert max(shard.estimate for shard in plan) == brute_force(exe, jobs)
    for piece in pieces:  # a warm-up layer before every shard but the first
        assert piece.start == max(0, piece.first - 1)


def test_more_jobs_than_layers_gives_one_layer_each(exe):
    assert len(shards.plan(exe, 50)) == len(exe.layers)


def test_select(exe):
    names = [layer.name for layer in exe.layers]
    assert shards.select(exe, names[2]) == (2, 3)
    assert shards.select(exe, f"{names[1]}:{names[3]}") == (1, 4)
    assert shards.select(exe, "1:3") == (1, 3)
    assert shards.select(exe, ":2") == (0, 2)
    assert shards.select(exe, "4:") == (4, len(names))
    for bad in ("conv9", "3:3", "5:2", f"{names[0]}:nope", "0:99", "a:b:c"):
        with pytest.raises(shards.ShardError, match="LAYERS"):
            shards.select(exe, bad)
    with pytest.raises(shards.ShardError, match="did you mean conv1"):
        shards.select(exe, "conv_1")


@pytest.mark.parametrize("keep_loads", [False, True])
def test_hollow_keeps_queues_and_flags(exe, keep_loads):
    """Every hollowed instruction is a SYNC of the original's queue with its dependency
    flags; END stays, and with keep_loads (a warm-up layer) LOADs and PERFs too."""
    from arch import isa

    program = exe.programs[0]
    base = program.launch.insn_base
    words = program.image[base : base + program.instructions * isa.INSN_BYTES]
    out = hollow(words, keep_loads=keep_loads)
    kept = (isa.Opcode.END, isa.Opcode.LOAD, isa.Opcode.PERF) if keep_loads else (isa.Opcode.END,)
    for n in range(program.instructions):
        row = slice(n * isa.INSN_BYTES, (n + 1) * isa.INSN_BYTES)
        old = isa.decode_insn(int.from_bytes(words[row].tobytes(), "little"))
        new = isa.decode_insn(int.from_bytes(out[row].tobytes(), "little"))
        if old.opcode in kept:
            assert new == old
            continue
        assert new.opcode is isa.Opcode.SYNC and new.queue == old.queue
        flags = [k for k in old.fields if k.startswith("deps.")]
        assert [new[k] for k in flags] == [old[k] for k in flags]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--jobs", "0"], "error: JOBS (--jobs) must be a positive number of shards, not 0"),
        (["--layers", "conv9"], "error: LAYERS 'conv9' is not a layer of this model"),
        (["--jobs", "2", "--wave-layer", "conv1"], "error: a waveform traces one run"),
    ],
)
def test_cli_refuses_bad_jobs_and_layers(args, message):
    base = [sys.executable, "-m", "sim.app.cli", "--model", "cnn", "--config", "tiny"]
    done = subprocess.run(
        [*base, "--backend", "rtl", *args], capture_output=True, text=True, cwd=REPO
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]  # one line
    assert done.stderr.startswith(message)


def test_unknown_dask_cluster_kind(monkeypatch):
    monkeypatch.setenv(cluster.CLUSTER_ENV, "kubernetes")
    with (
        pytest.raises(cluster.ClusterError, match="use one of slurm, pbs, lsf"),
        cluster.open_client(1),
    ):
        pass


@pytest.fixture
def keeps_sigint():
    """dask-jobqueue installs a SIGINT handler of its own: the test puts the one before back."""
    handler = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, handler)


@pytest.mark.parametrize(
    "kind, directive", [("slurm", "#SBATCH"), ("lsf", "#BSUB"), ("pbs", "#PBS")]
)
def test_jobqueue_example_config(kind, directive, keeps_sigint):
    """docs/dask-jobqueue.yaml gives dask-jobqueue a worker job script: one core, the memory
    and prologue it sets, a dask worker with one thread."""
    import dask_jobqueue

    example = yaml.safe_load((REPO / "docs" / "dask-jobqueue.yaml").read_text())
    with dask.config.set(dask.config.merge(dask.config.config, example)):
        cls = getattr(dask_jobqueue, cluster.JOBQUEUE_CLUSTERS[kind])
        with cls(scheduler_options={"host": "127.0.0.1"}) as batch:
            script = batch.job_script()
    assert directive in script
    assert "cd /path/to/systolic-cosim" in script
    assert "/path/to/systolic-cosim/.venv/bin/python -m distributed.cli.dask_worker" in script
    assert "--nthreads 1" in script and "--memory-limit 4.00GiB" in script


def test_load_cycles_are_the_bytes_the_isa_simulator_loads(exe):
    """A layer's warm-up cost: the bytes its LOADs move (lines the ISA simulator reads from DRAM
    or fills with padding), at the config's bandwidth, rounded up."""
    from arch import isa

    program = exe.programs[0]
    c = exe.config
    descs = [
        program.image[at : at + isa.DESC_BYTES].tobytes()
        for at in range(
            program.launch.desc_base,
            program.launch.desc_base + program.launch.desc_count * isa.DESC_BYTES,
            isa.DESC_BYTES,
        )
    ]
    dram = np.zeros(c.dram_bytes, np.uint8)  # the image, and the tensors it leaves out
    dram[: program.image.size] = program.image
    for n, layer in enumerate(program.layers):
        machine = Machine(c, dram.copy())
        lo, hi = layer.insn_range
        for index in range(lo, hi):
            at = program.launch.insn_base + index * isa.INSN_BYTES
            insn = isa.decode_insn(
                int.from_bytes(program.image[at : at + isa.INSN_BYTES], "little")
            )
            if insn.opcode is isa.Opcode.LOAD:
                machine.execute(index, insn, descs)
        stats = machine.stats
        assert stats.load_bytes, layer.name  # every layer loads something
        loaded = sum(stats.load_bytes.values()) + stats.pad_lines * c.act_line_bytes
        assert load_cycles(exe, 0, n) == -(-loaded // c.dram_bytes_per_cycle), layer.name


def test_cli_jobs_runs_shards_on_the_cluster_started_during_compile(tmp_path):
    # --jobs 2 starts the Dask cluster before compiling (sim.scaleout.cluster.EarlyClient); the
    # run's
    # report has both shards, every layer bit-exact, and the process ends (the cluster closed).
    out = tmp_path / "run"
    base = [sys.executable, "-m", "sim.app.cli", "--model", "cnn", "--config", "tiny"]
    done = subprocess.run(
        [*base, "--backend", "isa", "--jobs", "2", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["total"]["shards"] == 2
    assert report["total"]["bit_exact"] is True
    assert all(layer["bit_exact"] for layer in report["layers"])


def test_cli_jobs_with_a_cluster_that_cannot_start(monkeypatch, tmp_path):
    monkeypatch.setenv(cluster.CLUSTER_ENV, "kubernetes")
    base = [sys.executable, "-m", "sim.app.cli", "--model", "cnn", "--config", "tiny"]
    done = subprocess.run(
        [*base, "--backend", "isa", "--jobs", "2", "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 2
    assert "DASK_CLUSTER='kubernetes' is not a dask-jobqueue cluster" in done.stderr
    assert "Traceback" not in done.stderr

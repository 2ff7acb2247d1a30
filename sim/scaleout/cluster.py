"""The distributed engine of shards and sweeps: Dask (``dask.distributed``), no scheduler of ours.

Where the work runs (:func:`open_client`):

- by default a ``LocalCluster`` on this machine: one single-threaded worker process per job, at
  most one per core;
- ``DASK_SCHEDULER=tcp://host:port``: an existing cluster (``dask scheduler`` + ``dask worker``
  started by hand, or any dask-jobqueue cluster's ``scheduler_address``);
- ``DASK_CLUSTER=slurm`` (or ``pbs``, ``lsf``, ``sge``, ``htcondor``, ``oar``, ``moab``): a
  dask-jobqueue cluster configured by the ``jobqueue.<name>`` section of the Dask config
  (``~/.config/dask/jobqueue.yaml``, or the file ``DASK_CONFIG`` names; an example is
  ``docs/dask-jobqueue.yaml``), scaled to the number of jobs.

A task is a plain function of plain data (:func:`run_device`): the device runs (DRAM image and
launch registers), the config as JSON and the Verilator build's cache key. The worker builds the
model or reuses the cached build (``build/verilator/``, keyed by content: on a shared file system
one build serves every worker; the build's file lock keeps two workers from building it at
once) and refuses to run a build whose key differs from the client's (other RTL, flags or
toolchain on that machine). A worker that dies (killed, out of memory) is Dask's to handle: the
scheduler re-runs its tasks on another worker, up to ``distributed.scheduler.allowed-failures``
(default 3) times.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from arch.config import AccelConfig
from sim import knobs
from sim.backends.base import DeviceResult, DeviceRun, RunOptions
from sim.scaleout import worker_setup
from sim.verilate.lifeline import die_with_parent

SCHEDULER_ENV = knobs.SCHEDULER.name
CLUSTER_ENV = knobs.CLUSTER.name
JOBQUEUE_CLUSTERS = {
    "slurm": "SLURMCluster",
    "pbs": "PBSCluster",
    "lsf": "LSFCluster",
    "sge": "SGECluster",
    "htcondor": "HTCondorCluster",
    "oar": "OARCluster",
    "moab": "MoabCluster",
}


class ClusterError(RuntimeError):
    """The cluster cannot be reached or set up; the message names the setting."""


class BuildMismatch(RuntimeError):
    """A worker's Verilator build differs from the client's."""


class WorkerFailed(RuntimeError):
    """A task whose workers kept dying (Dask gave up after its allowed failures)."""


class Task:
    """A submitted task: :meth:`result` waits for it; a task whose workers kept dying is
    :class:`WorkerFailed`, naming it."""

    def __init__(self, label: str, future: Any) -> None:
        self.label, self.future = label, future

    def result(self) -> Any:
        from distributed.scheduler import KilledWorker

        try:
            return self.future.result()
        except KilledWorker as exc:
            raise WorkerFailed(
                f"{self.label}: its worker died on every try ({exc}); see the workers' logs "
                "(out of memory?) or raise distributed.scheduler.allowed-failures"
            ) from None


def build_key(backend: str, config: AccelConfig) -> str | None:
    """Build (or reuse) the backend's Verilator model here and return its cache key (None for
    a backend that builds nothing)."""
    from sim.backends.registry import get_backend

    return get_backend(backend).build(config)


def run_device(
    backend: str, config_json: str, runs: Sequence[DeviceRun], key: str | None, workdir: str
) -> list[DeviceResult]:
    """The task a worker runs: ``runs`` on ``backend`` in one simulator process, after building
    or reusing the model whose cache key must be ``key``. Each attempt has its own directory
    under ``workdir`` (a retried task never meets the files of a killed one)."""
    from sim.backends.registry import get_backend

    die_with_parent()  # a worker (and its simulator) ends with the process that started it
    config = AccelConfig.from_json(config_json)
    if key is not None:
        here = build_key(backend, config)
        if here != key:
            raise BuildMismatch(
                f"worker build key {here} differs from the client's {key}: the worker has other "
                "RTL, flags or toolchain; install the same checkout on every worker"
            )
    attempt = Path(workdir) / uuid.uuid4().hex[:8]
    options = RunOptions(workdir=attempt, timeline=True)  # spans for the run's timeline.json
    return get_backend(backend).run(config, runs, options)


def _jobqueue(kind: str, workers: int) -> Any:
    if kind not in JOBQUEUE_CLUSTERS:
        raise ClusterError(
            f"{CLUSTER_ENV}={kind!r} is not a dask-jobqueue cluster; use one of "
            f"{', '.join(JOBQUEUE_CLUSTERS)} (or {SCHEDULER_ENV}=tcp://host:port)"
        )
    import dask_jobqueue  # (imported on the main thread first: see EarlyClient)

    cluster = getattr(dask_jobqueue, JOBQUEUE_CLUSTERS[kind])()
    cluster.scale(workers)
    return cluster


@contextlib.contextmanager
def _ctrl_c_held_from_workers() -> Iterator[None]:
    """SIGINT blocked on this thread while a LocalCluster is made: its IO loop thread inherits
    the mask, and the worker processes that thread spawns (at the start and on a restart) keep
    it through exec, from their first instruction until their preload ignores the signal. A
    terminal's Ctrl-C then reaches the CLI alone, which closes the cluster; a worker still
    importing would print ``Fatal Python error: init_import_site`` or a KeyboardInterrupt
    traceback. This thread's mask is restored after (a Ctrl-C held meanwhile arrives then)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()  # (its start unblocks SIGINT on the thread that asks)
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def open_client(workers: int) -> Iterator[Any]:
    """A ``distributed.Client`` for ``workers`` parallel jobs (see the module docstring)."""
    from distributed import Client, LocalCluster

    address = knobs.SCHEDULER.get() or None
    kind = knobs.CLUSTER.get() or None
    with contextlib.ExitStack() as stack:
        try:
            if address:
                client = stack.enter_context(Client(address, timeout="20s"))
            else:
                if kind:
                    cluster = stack.enter_context(_jobqueue(kind.lower(), workers))
                else:
                    with _ctrl_c_held_from_workers():
                        cluster = stack.enter_context(
                            LocalCluster(
                                n_workers=max(1, min(workers, os.cpu_count() or 1)),
                                threads_per_worker=1,
                                processes=True,
                                dashboard_address=None,
                                silence_logs=logging.ERROR,
                                preload=[worker_setup.__name__],  # Ctrl-C is the CLI's
                            )
                        )
                client = stack.enter_context(Client(cluster))
        except (OSError, TimeoutError, ValueError) as exc:
            where = f"{SCHEDULER_ENV}={address}" if address else kind or "a LocalCluster"
            raise ClusterError(f"cannot start or reach the Dask cluster ({where}): {exc}") from None
        yield client


def warm_worker(backend: str, config: str) -> str | None:
    """Import what a task needs and build (or find) the backend's model for ``config`` (a
    preset name or JSON file), so that a worker's first task starts at once (it takes ~0.5 s
    in a fresh worker process); returns the cache key."""
    from arch.config import load_config

    die_with_parent()
    return build_key(backend, load_config(config))


class EarlyClient:
    """:func:`open_client` on a thread of its own, started before the caller needs it (a run
    starts the cluster while it compiles); :meth:`client` waits for it, :meth:`close` shuts it
    down. The thread that opened the client also closes it (Dask's client context is bound
    to its thread). ``warm``: (backend, config) to :func:`warm_worker` on every worker once
    the cluster is up."""

    def __init__(self, workers: int, warm: tuple[str, str] | None = None) -> None:
        if knobs.CLUSTER.get():
            # dask-jobqueue installs signal handlers when imported: only the main thread may
            import dask_jobqueue  # noqa: F401
        self._client: Future[Any] = Future()
        self._warming: list[Any] = []  # one warm-up task per worker (Dask futures)
        self._closing = threading.Event()
        self._thread = threading.Thread(
            target=self._hold, args=(workers, warm), name="dask start", daemon=True
        )
        self._thread.start()

    def _hold(self, workers: int, warm: tuple[str, str] | None) -> None:
        try:
            with open_client(workers) as client:
                if warm is not None:
                    # Tasks, not ``client.run``: a build in the event loop would stop the
                    # worker's heartbeats, and close() would wait for it.
                    run = uuid.uuid4().hex[:8]  # (a shared cluster serves other clients too)
                    self._warming = [
                        client.submit(
                            warm_worker, *warm, workers=[at], pure=False, key=f"warm{n}-{run}"
                        )
                        for n, at in enumerate(client.scheduler_info()["workers"])
                    ]
                self._client.set_result(client)
                self._closing.wait()
        except BaseException as exc:  # noqa: BLE001 - raised to whoever asks for the client
            if not self._client.done():
                self._client.set_exception(exc)

    def client(self) -> Any:
        """The open client (raises :class:`ClusterError` if the cluster did not start)."""
        return self._client.result()

    def ready(self) -> Any:
        """:meth:`client`, once the workers' warm-up tasks have ended (a worker that could not
        warm up fails its own task later, with its own message)."""
        from distributed import wait

        client = self.client()
        wait(self._warming)
        return client

    def close(self) -> None:
        """Shut the cluster down (after its start, if it is still starting). A Ctrl-C or
        SIGTERM while it closes is raised once it is down (the workers end with it; an
        interrupted close would leave Dask's exit hook to close it, printing a traceback)."""
        self._closing.set()
        stopped: KeyboardInterrupt | None = None
        while self._thread.is_alive():
            try:
                self._thread.join()
            except KeyboardInterrupt as exc:
                stopped = exc
        if stopped is not None:
            raise stopped

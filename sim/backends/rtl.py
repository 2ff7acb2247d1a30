"""The rtl backend: device programs on the Verilator RTL under cocotb.

A batch of programs runs in one simulator process (sim/backends/cocotb_job.py): this side writes
the images and a job file, runs cocotb, and reads back each run's DRAM, status and counters.
"""

from __future__ import annotations

import json
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from arch.config import AccelConfig
from sim import knobs
from sim.backends import dram_stall, hooks, rtl_timeline
from sim.backends.accelerator import JOB_FORMATS, build_accelerator, rtl_source
from sim.backends.base import DeviceResult, DeviceRun, RunOptions
from sim.coverage import functional
from sim.verilate.build import BuiltModel, run_cocotb
from sim.verilate.trace_header import trace_header


class RtlBackend:
    """Verilator + cocotb (the regression's backend); see :func:`run_programs`."""

    name = "rtl"
    runs_rtl = True
    own_process = True
    traces = True
    hooks = True
    writes_log = True

    def run(
        self, config: AccelConfig, runs: Sequence[DeviceRun], options: RunOptions
    ) -> list[DeviceResult]:
        return run_programs(
            config,
            runs,
            options.workdir,
            progress=options.progress,
            trace=options.trace,
            timeline=options.timeline,
        )

    def rtl_dir(self, config: AccelConfig) -> Path:
        return rtl_source(config).parent

    def build(self, config: AccelConfig) -> str:
        return build_accelerator(config).key

    def wave_header(self, config: AccelConfig, fmt: str) -> Path | None:
        return trace_header(build_accelerator(config, fmt))


def run_programs(
    config: AccelConfig,
    runs: Sequence[DeviceRun],
    workdir: Path | None = None,
    model: BuiltModel | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
    trace: tuple[Path, list[str], Path | None] | None = None,
    timeline: bool = False,
) -> list[DeviceResult]:
    """Run each program on the RTL (one simulator process for the batch). ``progress`` is
    called about every half second with ``{cycles, layers_done, wall_s}`` of a run that has
    ``perf_records``. ``trace`` = (dump file, window plusargs, signal selection file or None for
    all) traces the run (a batch of one run; the model is then built with waves in the dump's
    format). ``timeline``: each result
    holds its instructions' spans and token moves, from the testbench's events
    (:mod:`sim.backends.rtl_timeline`)."""
    if trace is not None and len(runs) != 1:
        raise ValueError("a traced batch must hold exactly one run")
    waves = trace[0].suffix.lstrip(".") if trace is not None else None
    hooks.load(hooks.names())  # a bad HOOKS fails here, in one line, before any build
    model = model or build_accelerator(config, waves)
    workdir = Path(workdir or tempfile.mkdtemp(prefix="cosim-rtl-"))
    workdir.mkdir(parents=True, exist_ok=True)
    entries: list[dict[str, Any]] = []
    for n, run in enumerate(runs):
        image_path = workdir / f"image{n}.bin"
        # (not ndarray.tofile: on a full disk its OSError has no errno, an internal error)
        image_path.write_bytes(np.ascontiguousarray(run.image, dtype=np.uint8).tobytes())
        entries.append(
            {
                "image": str(image_path),
                **run.launch.as_dict(),
                "max_cycles": run.max_cycles,
                "dump": str(workdir / f"dram{n}.bin"),
                "dump_size": run.dump_size or run.image.size,
                "result": str(workdir / f"result{n}.json"),
                "dram_stall": str(dram_stall.from_env(run.dram_stall)),
            }
        )
        if run.perf_records is not None:
            entries[-1].update(
                progress=str(workdir / "progress.json"),
                perf_base=run.perf_records[0],
                perf_count=run.perf_records[1],
            )
    job = workdir / "job.json"
    job.write_text(
        json.dumps(
            {
                "dram_bytes": config.dram_bytes,
                "bus_bytes": config.dram_bytes_per_cycle,
                **JOB_FORMATS,
                "runs": entries,
            }
        )
    )
    events = workdir / "timeline.txt"
    events.unlink(missing_ok=True)
    plusargs = [*(trace[1] if trace else ()), *([f"+{rtl_timeline.PLUSARG}={events}"] * timeline)]
    with _ProgressWatcher(workdir / "progress.json", progress):
        run_cocotb(
            model,
            "sim.backends.cocotb_job",
            workdir,
            extra_env={knobs.JOB.name: str(job)},
            trace_file=trace[0] if trace else None,
            trace_select=trace[2] if trace else None,
            plusargs=plusargs,
        )
    recorded = rtl_timeline.read(events) if timeline else []
    results = []
    for n, (run, entry) in enumerate(zip(runs, entries, strict=True)):
        status = json.loads(Path(entry["result"]).read_text())
        dram = np.fromfile(entry["dump"], dtype=np.uint8)
        status["stray_writes"] = tuple(status["stray_writes"])
        results.append(DeviceResult(dram=dram, **status))
        if n < len(recorded):
            results[-1].spans, results[-1].tokens = recorded[n].spans, recorded[n].tokens
        # What the program contained and how it ended, when coverage is on (make coverage).
        functional.sample(config, run.image, run.launch, results[-1])
    return results


class _ProgressWatcher:
    """Polls the progress file the simulator writes and hands each new state to a callback."""

    def __init__(self, path: Path, callback: Callable[[dict[str, Any]], None] | None) -> None:
        self.path, self.callback = path, callback
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        last = None
        while not self.stop.wait(0.5):
            try:
                text = self.path.read_text()
            except OSError:
                continue
            if text and text != last and self.callback is not None:
                last = text
                try:
                    self.callback(json.loads(text))
                except json.JSONDecodeError:
                    continue

    def __enter__(self) -> _ProgressWatcher:
        self.path.unlink(missing_ok=True)
        if self.callback is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.callback is not None:
            self.thread.join()

"""Run accelerator programs on the Verilator RTL under cocotb.

:func:`build_accelerator` builds (or reuses) the simulator for a config; :func:`run_programs`
runs a batch of programs in one simulator process and returns the DRAM contents, status and
performance counters of each.
"""

from __future__ import annotations

import json
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hdl_gen.config import PRESETS, AccelConfig
from hdl_gen.sim_top import TOP_NAME
from sim.isa_sim import Launch
from sim.verilator_build import BUILD_ROOT, REPO_ROOT, BuildSpec, BuiltModel, build, run_cocotb

RTL_ROOT = REPO_ROOT / "rtl"
DRAM_STORAGE_V = REPO_ROOT / "sim" / "hdl" / "cosim_dram_storage.v"
DRAM_STORAGE_CPP = REPO_ROOT / "sim" / "csrc" / "cosim_dram.cpp"
TOP_PORTS = (
    "clk",
    "rst",
    "start",
    "insn_base",
    "desc_base",
    "desc_count",
    "running",
    "done",
    "error",
    "error_code",
    "error_index",
    "perf",
)


def rtl_source(config: AccelConfig) -> Path:
    """The committed RTL of a preset (``make rtl``), else RTL generated into build/gen/."""
    for name, preset in PRESETS.items():
        if preset == config:
            return RTL_ROOT / name / f"{TOP_NAME}.v"
    from hdl_gen.generate import render

    path = BUILD_ROOT / "gen" / config.name / f"{TOP_NAME}.v"
    text = render(config)[f"{TOP_NAME}.v"]
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


def build_accelerator(config: AccelConfig, waves: str | None = None) -> BuiltModel:
    public = tuple(f'public_flat_rw -module "{TOP_NAME}" -var "{port}"' for port in TOP_PORTS)
    spec = BuildSpec(
        design="accel",
        config_name=config.name,
        sources=(rtl_source(config), DRAM_STORAGE_V),
        toplevel=TOP_NAME,
        public=public,
        waves=waves,
        cpp_sources=(DRAM_STORAGE_CPP,),
    )
    return build(spec)


@dataclass
class RtlRun:
    """One program: a DRAM image (placed at address 0) and where the program is in it."""

    image: np.ndarray
    launch: Launch
    max_cycles: int = 50_000_000
    dump_size: int | None = None  # bytes of DRAM to read back (default: the image size)
    perf_records: tuple[int, int] | None = None  # (address, count) of PERF records: progress


@dataclass
class RtlResult:
    done: bool
    error: bool
    timeout: bool
    error_code: str
    error_index: int
    perf: dict[str, int]
    sim_seconds: float
    dram: np.ndarray = field(repr=False)

    @property
    def cycles(self) -> int:
        return self.perf["cycles"]


def run_programs(
    config: AccelConfig,
    runs: list[RtlRun],
    workdir: Path | None = None,
    model: BuiltModel | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> list[RtlResult]:
    """Run each program on the RTL (one simulator process for the batch). ``progress`` is
    called about every half second with ``{cycles, layers_done, wall_s}`` of a run that has
    ``perf_records``."""
    model = model or build_accelerator(config)
    workdir = Path(workdir or tempfile.mkdtemp(prefix="cosim-rtl-"))
    workdir.mkdir(parents=True, exist_ok=True)
    entries: list[dict[str, Any]] = []
    for n, run in enumerate(runs):
        image_path = workdir / f"image{n}.bin"
        np.ascontiguousarray(run.image, dtype=np.uint8).tofile(image_path)
        entries.append(
            {
                "image": str(image_path),
                "insn_base": run.launch.insn_base,
                "desc_base": run.launch.desc_base,
                "desc_count": run.launch.desc_count,
                "max_cycles": run.max_cycles,
                "dump": str(workdir / f"dram{n}.bin"),
                "dump_size": run.dump_size or run.image.size,
                "result": str(workdir / f"result{n}.json"),
            }
        )
        if run.perf_records is not None:
            entries[-1].update(
                progress=str(workdir / "progress.json"),
                perf_base=run.perf_records[0],
                perf_count=run.perf_records[1],
            )
    job = workdir / "job.json"
    job.write_text(json.dumps({"dram_bytes": config.dram_bytes, "runs": entries}, indent=1))
    with _ProgressWatcher(workdir / "progress.json", progress):
        run_cocotb(model, "sim.cocotb_job", workdir, extra_env={"COSIM_JOB": str(job)})
    results = []
    for entry in entries:
        status = json.loads(Path(entry["result"]).read_text())
        dram = np.fromfile(entry["dump"], dtype=np.uint8)
        results.append(RtlResult(dram=dram, **status))
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

"""Run accelerator programs on the Verilator RTL under cocotb.

:func:`build_accelerator` builds (or reuses) the simulator for a config; :func:`run_programs`
runs a batch of programs in one simulator process and returns the DRAM contents, status and
performance counters of each.
"""

from __future__ import annotations

import json
import tempfile
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
) -> list[RtlResult]:
    """Run each program on the RTL (one simulator process for the batch)."""
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
    job = workdir / "job.json"
    job.write_text(json.dumps({"dram_bytes": config.dram_bytes, "runs": entries}, indent=1))
    run_cocotb(model, "sim.cocotb_job", workdir, extra_env={"COSIM_JOB": str(job)})
    results = []
    for entry in entries:
        status = json.loads(Path(entry["result"]).read_text())
        dram = np.fromfile(entry["dump"], dtype=np.uint8)
        results.append(RtlResult(dram=dram, **status))
    return results

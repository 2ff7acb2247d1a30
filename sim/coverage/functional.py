"""Functional coverage: what the programs the RTL ran contained and how they ended, as
cocotb-coverage coverpoints and crosses with bins taken from the ISA (arch/isa.py).

Sampled in the test process after each RTL batch (sim/backends/rtl.py) while ``COSIM_COVERAGE``
is set: the instructions that ran and the descriptors they used, decoded from the DRAM image, the
end status (error code at the failing instruction's opcode), and the PERF counters (token waits,
queues full, DRAM stalls). Only what ran fills a bin (:func:`executed`): every instruction up to
END, or up to the one that stopped the program; none of a run that timed out; of the descriptor
table, the entries a LOAD or STORE among those named. Each process exports its database when
it exits (``<dir>/functional/<id>.xml``); :func:`load` merges them with cocotb-coverage's
``merge_coverage``.
"""

from __future__ import annotations

import atexit
import html
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import numpy as np

from arch import isa
from arch.config import AccelConfig
from sim.verilate.instrument import coverage_dir

OPCODES = [op.name for op in isa.Opcode]
ERRORS = [code.name for code in isa.ErrorCode]
SIZES = ["1", "below_dim", "dim", "above_dim"]  # a count against the array's rows/cols
FLAGS = [
    "none" if not n else ",".join(f for i, f in enumerate(isa.DEP_FLAGS) if n >> i & 1)
    for n in range(1 << len(isa.DEP_FLAGS))
]
CLAMPS = ["full", "relu", "relu6_like", "other"]
ACCUM_MODES = [
    f"bias={b},res={r},gate={g},acc={a}"
    for b in (0, 1)
    for r in (0, 1)
    for g in (0, 1)
    for a in (0, 1)
    if r or not g  # a gate needs the residual
]
PADDING = ["none", "y", "x", "y_and_x"]
LOOPS = [str(n) for n in range(isa.DESC_LOOPS + 1)]
UNIT_WAITS = ["load_token_wait", "compute_token_wait", "store_token_wait"]
_NO_DESCRIPTOR = ("GEMM", "ACCUM", "POOL", "DWCONV", "CONV", "SYNC", "PERF", "END")
#: (opcode, error code) pairs no program can produce, and why: ignored by the opcode x error
#: cross (``ign_bins``) and listed with their reasons in the report. (DRAM_RANGE is possible at
#: any opcode: a bad launch stops at instruction 0, whatever it is.)
IMPOSSIBLE_OP_ERRORS: dict[tuple[str, str], str] = {
    **{
        (op, "ILLEGAL_OPCODE"): "ILLEGAL_OPCODE names an undecodable word, not a decoded opcode"
        for op in OPCODES
    },
    **{(op, "BAD_DESCRIPTOR"): f"{op} names no descriptor" for op in _NO_DESCRIPTOR},
    **{(op, "LOCAL_RANGE"): f"{op} addresses no local memory" for op in ("SYNC", "PERF", "END")},
    ("END", "DEADLOCK"): "END waits for no token and needs no queue room",
    **{
        ("ILLEGAL", code): f"{code} names a decoded instruction; fetch stops at the first "
        "undecodable word"
        for code in ("BAD_DESCRIPTOR", "LOCAL_RANGE", "DEADLOCK")
    },
    ("-", "ILLEGAL_OPCODE"): "an undecodable word at the index is ILLEGAL, not '-'",
    **{
        ("-", code): f"{code} names a decoded instruction ('-': none at the index)"
        for code in ("BAD_DESCRIPTOR", "LOCAL_RANGE", "DEADLOCK", "BAD_FIELD")
    },
    ("-", "WATCHDOG"): "WATCHDOG names fetch's pc, which never passes END",
}


def size_bin(value: int, dim: int) -> str:
    if value == 1:
        return "1"
    return "below_dim" if value < dim else "dim" if value == dim else "above_dim"


WINDOWS = ("1", "2-4", "5+")  # pool window sizes


def _point_bins() -> dict[str, tuple[str, list[Any]]]:
    """The single coverpoints: sampler name -> (coverpoint name under ``top.``, its bins)."""
    points: dict[str, tuple[str, Sequence[Any]]] = {
        "opcode": ("insn.opcode", [*OPCODES, "ILLEGAL"]),
        "tokens": ("insn.tokens", FLAGS),
        "desc_mem": ("desc.mem", [m.name for m in isa.Mem]),
        "desc_loops": ("desc.loops_used", LOOPS),
        "desc_padding": ("desc.padding", PADDING),
        "desc_negative": ("desc.negative_stride", ["no", "yes"]),
        "gemm_m": ("gemm.m", SIZES),
        "gemm_k": ("gemm.k_iter", ["1", "2-3", "4+"]),
        "gemm_n": ("gemm.n_iter", ["1", "2-3", "4+"]),
        "gemm_acc": ("gemm.accumulate", ["0", "1"]),
        "store_clamp": ("store.clamp", CLAMPS),
        "store_table": ("store.table", ["no", "yes"]),
        "store_zp": ("store.out_zp", ["zero", "nonzero"]),
        "store_transpose": ("store.transpose", ["no", "yes"]),
        "store_bias": ("store.bias", ["no", "yes"]),
        "store_res": ("store.res", ["no", "yes"]),
        "accum_mode": ("accum.mode", ACCUM_MODES),
        "pool_mode": (
            "pool.mode_window",
            [f"{m.name}:{w}" for m in isa.PoolMode for w in WINDOWS],
        ),
        "dw_kernel": ("dwconv.kernel", [f"{h}x{w}" for h in (1, 2, 3) for w in (1, 2, 3)]),
        "dw_stride": ("dwconv.stride", ["1", "2", "3+"]),
        "dw_mode": ("dwconv.mode", ["sum", "max"]),
        "conv_kernel": ("conv.kernel", ["1x1", "3x3", "5x5", "7x7", "other"]),
        "conv_stride": ("conv.stride", ["1", "2", "3"]),
        "conv_last_row": ("conv.last_row", ["whole", "partial"]),
        "status_error": ("status.error", ERRORS),
        "dram_stall": ("perf.dram_stall", ["none", "some"]),
        "queue_full": ("perf.queue_full", ["never", "sometimes"]),
        "token_wait": (
            "perf.token_wait",
            [f"{unit}:{w}" for unit in UNIT_WAITS for w in ("none", "some")],
        ),
    }
    return {fn: (name, list(bins)) for fn, (name, bins) in points.items()}


def _define() -> dict[str, Any]:
    """The coverpoints (defined once per process) as sampling functions."""
    from cocotb_coverage.coverage import CoverCross, CoverPoint

    def point(name: str, bins: list[Any]) -> Any:
        def sample(value: str) -> None: ...

        return CoverPoint(f"top.{name}", xf=lambda value: value, bins=bins)(sample)

    samplers = {fn: point(name, bins) for fn, (name, bins) in _point_bins().items()}

    @CoverPoint("top.insn.op_for_tokens", xf=lambda op, flags: op, bins=OPCODES)
    @CoverPoint("top.insn.flags_for_op", xf=lambda op, flags: flags, bins=FLAGS)
    @CoverCross(
        "top.insn.opcode_x_tokens", items=["top.insn.op_for_tokens", "top.insn.flags_for_op"]
    )
    def op_tokens(op: str, flags: str) -> None: ...

    @CoverPoint("top.status.error_opcode", xf=lambda op, code: op, bins=[*OPCODES, "ILLEGAL", "-"])
    @CoverPoint("top.status.error_code", xf=lambda op, code: code, bins=ERRORS[1:])
    @CoverCross(
        "top.status.opcode_x_error",
        items=["top.status.error_opcode", "top.status.error_code"],
        ign_bins=list(IMPOSSIBLE_OP_ERRORS),
    )
    def op_error(op: str, code: str) -> None: ...

    return {**samplers, "op_tokens": op_tokens, "op_error": op_error}


_SAMPLERS: dict[str, Any] | None = None


def _samplers() -> dict[str, Any]:
    """The sampling functions; the first call also arranges this process's export."""
    global _SAMPLERS
    if _SAMPLERS is None:
        _SAMPLERS = _define()
        atexit.register(_export)
    return _SAMPLERS


def _export() -> None:
    from cocotb_coverage.coverage import coverage_db

    directory = coverage_dir()
    if directory is not None and len(coverage_db):
        (directory / "functional").mkdir(parents=True, exist_ok=True)
        coverage_db.export_to_xml(str(directory / "functional" / f"{uuid.uuid4().hex}.xml"))


def _decode(image: np.ndarray, launch: isa.Launch) -> tuple[list[isa.Instruction], bool]:
    """The instructions from ``insn_base`` up to END; ``True`` if an illegal word ended it.
    A misaligned ``insn_base`` fetches nothing (the accelerator stops with DRAM_RANGE)."""
    insns: list[isa.Instruction] = []
    if launch.insn_base % isa.INSN_BYTES:
        return insns, False
    for at in range(launch.insn_base, image.size - isa.INSN_BYTES + 1, isa.INSN_BYTES):
        word = int.from_bytes(image[at : at + isa.INSN_BYTES].tobytes(), "little")
        try:
            insn = isa.decode_insn(word)
        except isa.IsaError:
            return insns, True
        insns.append(insn)
        if insn.opcode is isa.Opcode.END:
            break
    return insns, False


def _descriptor(image: np.ndarray, launch: isa.Launch, n: int) -> dict[str, Any] | None:
    """Entry ``n`` of the descriptor table, None if it is outside the table, the image or
    undecodable."""
    at = launch.desc_base + n * isa.DESC_BYTES
    if not 0 <= n < launch.desc_count or at + isa.DESC_BYTES > image.size:
        return None
    word = int.from_bytes(image[at : at + isa.DESC_BYTES].tobytes(), "little")
    try:
        return isa.decode_record(isa.DESCRIPTOR, word)
    except isa.IsaError:
        return None


def executed(insns: list[isa.Instruction], result: Any) -> list[isa.Instruction]:
    """The instructions of a finished program that ran (``result``: a DeviceResult): all up to
    END if it was done, up to and including the one that stopped it, none if it timed out."""
    if result.done:
        return insns
    if result.error:
        return insns[: max(result.error_index, -1) + 1]
    return []


def used_descriptors(
    image: np.ndarray, launch: isa.Launch, ran: list[isa.Instruction]
) -> list[dict[str, Any]]:
    """The descriptors the instructions that ran named (each once), in table order."""
    named = sorted({insn["desc"] for insn in ran if "desc" in insn.fields})
    found = (_descriptor(image, launch, n) for n in named)
    return [desc for desc in found if desc is not None]


def _iters(value: int) -> str:
    return "1" if value <= 1 else "2-3" if value <= 3 else "4+"


def _flags(insn: isa.Instruction) -> str:
    n = sum(int(insn[f"deps.{flag}"]) << i for i, flag in enumerate(isa.DEP_FLAGS))
    return FLAGS[n]


def _clamp(lo: int, hi: int, zp: int) -> str:
    if (lo, hi) == (-128, 127):
        return "full"
    if lo == zp and hi == 127:
        return "relu"
    return "relu6_like" if lo == zp else "other"


def _sample_insn(s: dict[str, Any], insn: isa.Instruction, config: AccelConfig) -> None:
    op = insn.opcode
    s["opcode"](op.name)
    s["tokens"](_flags(insn))
    s["op_tokens"](op.name, _flags(insn))  # END with a flag: BAD_FIELD
    if op is isa.Opcode.GEMM:
        s["gemm_m"](size_bin(insn["m"], config.rows))
        s["gemm_k"](_iters(insn["k_iter"]))
        s["gemm_n"](_iters(insn["n_iter"]))
        s["gemm_acc"](str(insn["accumulate"]))
    elif op is isa.Opcode.STORE:
        s["store_clamp"](_clamp(insn["clamp_lo"], insn["clamp_hi"], insn["out_zp"]))
        s["store_table"]("yes" if insn["use_table"] else "no")
        s["store_zp"]("nonzero" if insn["out_zp"] else "zero")
        s["store_transpose"]("yes" if insn["transpose"] else "no")
        s["store_bias"]("yes" if insn["use_bias"] else "no")
        s["store_res"]("yes" if insn["use_res"] else "no")
    elif op is isa.Opcode.ACCUM:
        mode = (
            f"bias={insn['use_bias']},res={insn['use_res']},gate={insn['use_gate']},"
            f"acc={insn['accumulate']}"
        )
        if mode in ACCUM_MODES:
            s["accum_mode"](mode)
    elif op is isa.Opcode.POOL:
        w = insn["window"]
        s["pool_mode"](f"{insn['mode'].name}:{'1' if w <= 1 else '2-4' if w <= 4 else '5+'}")
    elif op is isa.Opcode.CONV:
        kernel = f"{insn['kh']}x{insn['kw']}"
        s["conv_kernel"](kernel if kernel in ("1x1", "3x3", "5x5", "7x7") else "other")
        s["conv_stride"](str(insn["stride"]))
        s["conv_last_row"]("partial" if insn["out_w"] and insn["m"] % insn["out_w"] else "whole")
    elif op is isa.Opcode.DWCONV:
        s["dw_kernel"](f"{insn['kh']}x{insn['kw']}")
        s["dw_stride"](str(insn["stride"]) if insn["stride"] < 3 else "3+")
        s["dw_mode"]("max" if insn["max"] else "sum")


def _sample_desc(s: dict[str, Any], desc: dict[str, Any]) -> None:
    s["desc_mem"](desc["mem"].name)
    counts = [desc[f"loops[{n}].count"] for n in range(isa.DESC_LOOPS)]
    s["desc_loops"](str(sum(1 for c in counts if c > 1)))
    y, x = desc["height"] > 0, desc["width"] > 0
    s["desc_padding"]("y_and_x" if y and x else "y" if y else "x" if x else "none")
    negative = any(desc[f"loops[{n}].dram_stride"] < 0 for n in range(isa.DESC_LOOPS))
    s["desc_negative"]("yes" if negative else "no")


def sample(config: AccelConfig, image: np.ndarray, launch: isa.Launch, result: Any) -> None:
    """Sample one finished program (``result``: a DeviceResult) when coverage is on."""
    if coverage_dir() is None:
        return
    s = _samplers()
    insns, illegal = _decode(image, launch)
    ran = executed(insns, result)
    for insn in ran:
        _sample_insn(s, insn, config)
    if illegal and result.error and result.error_index == len(insns):
        s["opcode"]("ILLEGAL")  # the undecodable word is what stopped it
    for desc in used_descriptors(image, launch, ran):
        _sample_desc(s, desc)
    s["status_error"](result.error_code)
    if result.error:
        index = result.error_index
        op = insns[index].opcode.name if index < len(insns) else "ILLEGAL" if illegal else "-"
        s["op_error"](op, result.error_code)
    perf = result.perf
    s["dram_stall"]("some" if perf.get("dram_stall") else "none")
    s["queue_full"]("sometimes" if perf.get("fetch_stall") else "never")
    for unit in UNIT_WAITS:
        s["token_wait"](f"{unit}:{'some' if perf.get(unit) else 'none'}")


def load(files: Sequence[Path]) -> dict[str, dict[str, int]]:
    """Coverpoint name -> {bin: hits}, merged over ``files`` (cocotb-coverage's merge)."""
    if not files:
        return {}
    from cocotb_coverage.coverage import merge_coverage

    merged = Path(files[0]).parent.parent / "functional.xml"
    merge_coverage(lambda _message: None, str(merged), *map(str, files))
    points: dict[str, dict[str, int]] = {}
    for element in ElementTree.parse(merged).getroot().iter():
        if "bin" in element.attrib:
            name = element.attrib["abs_name"].rsplit(".bin", 1)[0]
            points.setdefault(name, {})[element.attrib["bin"]] = int(element.attrib["hits"])
    return points


def summary(points: dict[str, dict[str, int]]) -> dict[str, dict[str, Any]]:
    """Per coverpoint: bins, bins hit, percent, and the holes (bins never hit)."""
    out = {}
    for name, bins in sorted(points.items()):
        hit = sum(1 for hits in bins.values() if hits)
        out[name] = {
            "bins": len(bins),
            "hit": hit,
            "percent": 100.0 * hit / len(bins) if bins else 0.0,
            "holes": [b for b, hits in bins.items() if not hits],
        }
    return out


def ignored_html() -> str:
    """The bins left out of the crosses because no program can reach them, with the reasons."""
    rows = "".join(
        f"<tr><td>{html.escape(str(pair))}</td><td>{html.escape(why)}</td></tr>"
        for pair, why in IMPOSSIBLE_OP_ERRORS.items()
    )
    return (
        "<h3>top.status.opcode_x_error: bins ignored as impossible</h3>"
        f"<table border=1><tr><th>bin</th><th>why</th></tr>{rows}</table>"
    )


def to_html(points: dict[str, dict[str, int]]) -> str:
    """The coverpoints as HTML tables (holes marked), then the ignored bins."""
    if not points:
        return "<p>No functional coverage recorded.</p>"
    parts = []
    for name, info in summary(points).items():
        rows = "".join(
            f"<tr><td>{html.escape(b)}</td><td>{hits}</td><td>{'' if hits else 'HOLE'}</td></tr>"
            for b, hits in points[name].items()
        )
        parts.append(
            f"<h3>{html.escape(name)}: {info['hit']}/{info['bins']} ({info['percent']:.0f}%)</h3>"
            f"<table border=1><tr><th>bin</th><th>hits</th><th></th></tr>{rows}</table>"
        )
    return "".join(parts) + ignored_html()

"""Hand-written accelerator programs for tests: place tensors in DRAM, emit descriptors and
instructions, and read results back. Expected values are computed by the tests themselves with
the integer reference ops, never by the code under test.

Tensors live in DRAM channels-last with channels padded to whole lines, so one DMA line holds
``rows`` consecutive channels of one pixel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from arch import asm, isa
from arch import reference_ops as ref
from arch.config import AccelConfig
from arch.isa import Launch
from sim.backends.isa_machine import Machine

PROGRAM_BASE = 0x1000
PROGRAM_SPACE = 0xF000  # program + descriptors live below 0x10000
GAP = 64  # free bytes before every allocation: guard bands for the runs (sim/runtime/guard.py)


@dataclass
class Accumulators:
    """Random ACCUM inputs for ``m`` lines of one channel block - int8 lines ``x``, per-channel
    ``res_mult``, ``res_shift`` and ``bias`` - and the accumulators an ACCUM of them leaves,
    ``bias + requant(x, res_mult, res_shift)`` (from ``arch.reference_ops``)."""

    m: int
    x: np.ndarray
    res_mult: np.ndarray
    res_shift: np.ndarray
    bias: np.ndarray
    acc: np.ndarray


def random_accumulators(d: int, rng: np.random.Generator, bias_bound: int) -> Accumulators:
    """1..29 lines of ``d`` channels, biases in [-bias_bound, bias_bound)."""
    m = int(rng.integers(1, 30))
    x = rng.integers(-128, 128, (m, d), dtype=np.int8)
    res_mult = rng.integers(1 << 20, 1 << 24, d)
    res_shift = rng.integers(0, 6, d)
    bias = rng.integers(-bias_bound, bias_bound, d)
    residual = ref.requantize(x, res_mult, res_shift, axis=1)
    acc = ref.add_wrap32(np.broadcast_to(bias, (m, d)), residual)
    return Accumulators(m, x, res_mult, res_shift, bias, acc)


@dataclass
class Tensor:
    """An int8 NHWC tensor in DRAM: ``h`` x ``w`` pixels of ``c`` channels (c a multiple of dim)."""

    addr: int
    h: int
    w: int
    c: int

    @property
    def row_bytes(self) -> int:
        return self.w * self.c


@dataclass
class Builder:
    config: AccelConfig
    dram: np.ndarray = field(init=False)
    program: asm.Program = field(default_factory=asm.Program)
    top: int = 0x10000
    #: (name, address, bytes) of everything placed in DRAM; the rest is free for guard bands
    regions: list[tuple[str, int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.dram = np.zeros(self.config.dram_bytes, dtype=np.uint8)

    @property
    def dim(self) -> int:
        return self.config.rows

    # ---- DRAM ----------------------------------------------------------------------------------
    def alloc(self, nbytes: int, align: int = 64, name: str = "buffer") -> int:
        addr = -(-(self.top + GAP) // align) * align
        self.top = addr + nbytes
        self.regions.append((f"{name}{len(self.regions)}", addr, nbytes))
        return addr

    def put(self, blob: np.ndarray) -> int:
        raw = np.ascontiguousarray(blob).view(np.uint8).ravel()
        addr = self.alloc(raw.size, name="input")
        self.dram[addr : addr + raw.size] = raw
        return addr

    def put_nchw(self, x: np.ndarray) -> Tensor:
        """Store an int8 (C, H, W) tensor channels-last."""
        c, h, w = x.shape
        assert c % self.dim == 0, "pad channels to whole lines in the test"
        return Tensor(self.put(x.transpose(1, 2, 0).astype(np.int8)), h, w, c)

    def empty(self, h: int, w: int, c: int) -> Tensor:
        return Tensor(self.alloc(h * w * c, name="output"), h, w, c)

    def read_nchw(self, t: Tensor) -> np.ndarray:
        raw = self.dram[t.addr : t.addr + t.h * t.w * t.c].view(np.int8)
        return raw.reshape(t.h, t.w, t.c).transpose(2, 0, 1)

    def put_params(self, **columns: np.ndarray) -> int:
        """PARAM lines for per-channel arrays (bias, mult, shift, res_mult, res_shift)."""
        n = len(next(iter(columns.values())))
        assert n % self.dim == 0
        entries = np.zeros((n, isa.PARAM_ENTRY_BYTES), dtype=np.uint8)
        for ch in range(n):
            word = isa.encode_record(isa.PARAM_ENTRY, {k: int(v[ch]) for k, v in columns.items()})
            entries[ch] = np.frombuffer(word.to_bytes(isa.PARAM_ENTRY_BYTES, "little"), np.uint8)
        return self.put(entries)

    # ---- program -------------------------------------------------------------------------------
    def desc(self, *args: Any, **kwargs: Any) -> int:
        self.program.descs.append(isa.descriptor(*args, **kwargs))
        return len(self.program.descs) - 1

    def emit(self, opcode: str, deps: str = "", **fields: Any) -> isa.Instruction:
        insn = isa.make(opcode, deps, **fields)
        self.program.insns.append(insn)
        return insn

    def load_lines(
        self, mem: str, local: int, dram: int, lines: int, line_bytes: int, deps: str = ""
    ) -> None:
        """LOAD ``lines`` contiguous DRAM lines into consecutive local lines."""
        d = self.desc(mem, local, dram, [(lines, line_bytes, 1)])
        self.emit("load", deps, desc=d)

    def load_params(self, addr: int, lines: int, local: int = 0, deps: str = "") -> None:
        line_bytes = self.dim * isa.PARAM_ENTRY_BYTES
        self.load_lines("PARAM", local, addr, lines, line_bytes, deps)

    def accumulate_lines(
        self,
        src: int,
        m: int,
        n_iter: int = 1,
        strides: tuple[int, int] | None = None,
        act_lines: int | None = None,
    ) -> None:
        """LOAD ``act_lines`` (default ``n_iter * m``) ACT lines from ``src`` to line 0 and
        ACCUM ``n_iter`` blocks of ``m`` of them as ``bias + requant(line, res_mult,
        res_shift)`` with PARAM line j for block j (loaded before); ``strides``: the ACC and
        ACT n strides. The ACCUM hands its token to the store queue."""
        lines = n_iter * m if act_lines is None else act_lines
        self.load_lines("ACT", 0, src, lines, self.dim, deps="push_next")
        acc_stride, act_stride = strides if strides is not None else (0, 0)
        self.emit(
            "accum",
            "pop_prev,push_next",
            acc_addr=0,
            act_addr=0,
            param_addr=0,
            m=m,
            n_iter=n_iter,
            acc_n_stride=acc_stride,
            act_n_stride=act_stride,
            use_bias=1,
            use_res=1,
        )

    def barrier(self) -> None:
        """Everything before (including stores to DRAM) completes before anything after starts."""
        self.emit("sync", "push_prev", queue="STORE")
        self.emit("sync", "pop_next,push_prev", queue="COMPUTE")
        self.emit("sync", "pop_next", queue="LOAD")

    def finish(self) -> Launch:
        self.program.insns.append(isa.make("end"))
        insns, descs = self.program.insn_bytes(), self.program.desc_bytes()
        desc_base = -(-(PROGRAM_BASE + len(insns)) // isa.DESC_BYTES) * isa.DESC_BYTES
        assert desc_base + len(descs) <= PROGRAM_BASE + PROGRAM_SPACE, "program too large"
        for base, blob in ((PROGRAM_BASE, insns), (desc_base, descs)):
            self.dram[base : base + len(blob)] = np.frombuffer(blob, dtype=np.uint8)
        placed = [r for r in self.regions if r[0] not in ("program", "descriptors")]
        self.regions = [
            ("program", PROGRAM_BASE, len(insns)),
            ("descriptors", desc_base, len(descs)),
            *placed,
        ]
        return Launch(PROGRAM_BASE, desc_base, len(self.program.descs))

    def run_isa(self) -> Machine:
        launch = self.finish()
        machine = Machine(self.config, self.dram)
        machine.run(launch)
        return machine


# ---- kernels: one layer each, all compute-queue ordering through tokens --------------------------


def conv2d(
    b: Builder,
    x: Tensor,
    w: np.ndarray,
    params: int,
    *,
    stride: int,
    pad: int,
    clamp: tuple[int, int] = (-128, 127),
    residual: Tensor | None = None,
    bias_last: bool = False,
    bias_in_store: bool = False,
    token_on_load: bool = False,
) -> Tensor:
    """Conv (O, C, KH, KW) int8 weights over ``x`` via DMA im2col; bias (+ residual) by ACCUM,
    requantize and clamp by STORE. Everything fits on chip at once (small test shapes).
    ``bias_last``: GEMM overwrites ACC first and ACCUM adds to it (both accumulate modes).
    ``bias_in_store``: the STORE adds the bias (use_bias) and the residual (use_res), there is
    no ACCUM and the GEMM overwrites ACC (as the compiler emits).
    ``token_on_load``: the last LOAD hands the token to COMPUTE (as the compiler emits), not a
    SYNC after it (see test_sync_token_rtl.py)."""
    d = b.dim
    o, c, kh, kw = w.shape
    oh, ow = (x.h + 2 * pad - kh) // stride + 1, (x.w + 2 * pad - kw) // stride + 1
    m, cb, ob = oh * ow, c // d, o // d
    chunks = kh * kw * cb
    # Weight tiles ordered (k chunk, n block), each `rows` lines of `cols` weights.
    tiles = np.zeros((chunks, ob, d, d), dtype=np.int8)
    for ky in range(kh):
        for kx in range(kw):
            for ci in range(cb):
                k = (ky * kw + kx) * cb + ci
                for j in range(ob):
                    tiles[k, j] = w[j * d : (j + 1) * d, ci * d : (ci + 1) * d, ky, kx].T
    w_addr = b.put(tiles)
    out = b.empty(oh, ow, o)
    b.load_params(params, ob)
    b.load_lines("WGT", 0, w_addr, chunks * ob * d, d)
    for ky in range(kh):
        for kx in range(kw):
            for ci in range(cb):
                k = (ky * kw + kx) * cb + ci
                base = x.addr + ((ky - pad) * x.w + (kx - pad)) * x.c + ci * d
                loops = [
                    (oh, stride * x.row_bytes, ow, stride, 0),
                    (ow, stride * x.c, 1, 0, stride),
                ]
                desc = b.desc(
                    "ACT", k * m, base, loops, y0=ky - pad, x0=kx - pad, height=x.h, width=x.w
                )
                last = b.emit("load", desc=desc)
    res_base = chunks * m
    if residual is not None:
        loops = [(ob, d, m), (m, residual.c, 1)]
        last = b.emit("load", desc=b.desc("ACT", res_base, residual.addr, loops))
    if token_on_load:
        last.fields["deps.push_next"] = 1
    else:
        b.emit("sync", "push_next", queue="LOAD")
    accum = {
        "acc_addr": 0,
        "act_addr": res_base,
        "param_addr": 0,
        "m": m,
        "n_iter": ob,
        "acc_n_stride": m,
        "act_n_stride": m,
        "use_bias": 1,
        "use_res": int(residual is not None),
        "accumulate": int(bias_last),
    }
    gemm = {
        "wgt_addr": 0,
        "act_addr": 0,
        "acc_addr": 0,
        "m": m,
        "k_iter": chunks,
        "n_iter": ob,
        "act_k_stride": m,
        "acc_n_stride": m,
        "accumulate": int(not bias_last),
    }
    if bias_in_store:
        b.emit("gemm", "pop_prev,push_next", **(gemm | {"accumulate": 0}))
    else:
        first, second = (
            (("gemm", gemm), ("accum", accum)) if bias_last else (("accum", accum), ("gemm", gemm))
        )
        b.emit(first[0], "pop_prev", **first[1])
        b.emit(second[0], "push_next", **second[1])
    store = b.desc("ACC", 0, out.addr, [(ob, d, m), (m, out.c, 1)])
    b.emit(
        "store",
        "pop_prev",
        desc=store,
        param_addr=0,
        param_loop=2,
        clamp_lo=clamp[0],
        clamp_hi=clamp[1],
        use_bias=int(bias_in_store),
        use_res=int(bias_in_store and residual is not None),
        res_addr=res_base,
    )
    return out


def pool2d(
    b: Builder,
    x: Tensor,
    params: int,
    *,
    kernel: int,
    stride: int,
    pad: int,
    mode: str,
    clamp: tuple[int, int] = (-128, 127),
    split: bool = False,
) -> Tensor:
    """Max or sum pooling: DMA gathers each window (padding -128 for max), POOL reduces it,
    STORE requantizes (identity for max, 1/area-ish for average) and clamps. ``split``: the
    window's first kernel row and the rest are gathered apart and reduced by two POOLs, the
    second accumulating into the first's result."""
    d = b.dim
    oh, ow = (x.h + 2 * pad - kernel) // stride + 1, (x.w + 2 * pad - kernel) // stride + 1
    m, cb = oh * ow, x.c // d
    out = b.empty(oh, ow, x.c)
    pad_value = -128 if mode == "MAX" else 0
    parts = [(0, 1), (1, kernel)] if split and kernel > 1 else [(0, kernel)]
    b.load_params(params, cb)
    offset, pools = 0, []
    for n, (r0, r1) in enumerate(parts):
        window = (r1 - r0) * kernel
        for ci in range(cb):
            base = x.addr + ((r0 - pad) * x.w - pad) * x.c + ci * d
            loops = [
                (oh, stride * x.row_bytes, ow * window, stride, 0),
                (ow, stride * x.c, window, 0, stride),
                (r1 - r0, x.row_bytes, kernel, 1, 0),
                (kernel, x.c, 1, 0, 1),
            ]
            desc = b.desc(
                "ACT",
                offset + ci * m * window,
                base,
                loops,
                y0=r0 - pad,
                x0=-pad,
                height=x.h,
                width=x.w,
                pad_value=pad_value,
            )
            last = n == len(parts) - 1 and ci == cb - 1
            b.emit("load", "push_next" if last else "", desc=desc)
        pools.append({"act_addr": offset, "window": window, "act_n_stride": m * window})
        offset += cb * m * window
    for n, pool in enumerate(pools):
        deps = ",".join(
            (["pop_prev"] if n == 0 else []) + (["push_next"] if n == len(pools) - 1 else [])
        )
        b.emit(
            "pool",
            deps,
            acc_addr=0,
            m=m,
            n_iter=cb,
            acc_n_stride=m,
            mode=mode,
            accumulate=int(n > 0),
            **pool,
        )
    store = b.desc("ACC", 0, out.addr, [(cb, d, m), (m, out.c, 1)])
    b.emit(
        "store",
        "pop_prev",
        desc=store,
        param_addr=0,
        param_loop=2,
        clamp_lo=clamp[0],
        clamp_hi=clamp[1],
    )
    return out

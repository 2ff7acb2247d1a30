"""Random valid programs for the instruction-level comparisons (RTL vs ISA simulator).

Each program is two to four kernels, convolutions and pools in turn, separated by barriers and
drawn from its own seed: convolutions (1x1 / 3x3, stride 1 / 2, optional residual, bias added
before or after the GEMM, the token to COMPUTE on the last LOAD or on a LOAD-queue SYNC) and
pools (max and sum, kernels 1..3 and global, stride 1 / 2 / kernel, padding, one POOL or two
accumulating), with signed multipliers, shifts over 0..62, every clamp kind (none, ReLU,
ReLU6-like, random) and spatial sizes at the edges (1, dim-1, dim, dim+1) or random.

Several seeds run per test; they are printed, and ``RANDOM_PROGRAMS_SEED=<seed>`` runs exactly
that one (``RANDOM_PROGRAMS_SEED=random`` draws fresh ones).
"""

from __future__ import annotations

import secrets

import numpy as np

from arch import reference_ops as ref
from arch.config import AccelConfig
from sim import knobs
from tests.programs import Builder, Tensor, conv2d, pool2d

SEED_VARIABLE = knobs.RANDOM_PROGRAMS_SEED.name


def program_seeds(count: int, base: int) -> list[int]:
    """``count`` seeds derived from ``base``, or the one in ``$RANDOM_PROGRAMS_SEED``; printed."""
    chosen = knobs.RANDOM_PROGRAMS_SEED.get()
    if chosen == "random":
        base = secrets.randbits(32)
    if chosen and chosen != "random":
        seeds = [int(chosen)]
    else:
        seeds = [int(s) for s in np.random.SeedSequence(base).generate_state(count)]
    print(f"random programs: seeds {seeds} (rerun one with {SEED_VARIABLE}=<seed>)")
    return seeds


def _requant(rng: np.random.Generator, channels: int, scale: float) -> tuple[np.ndarray, ...]:
    """Signed multipliers with shifts over 0..62, mostly sized so ``value * scale`` lands
    near the int8 range (some saturate, some round to 0), a quarter of them fully random."""
    shift = rng.integers(0, 63, channels)
    sign = rng.choice([-1, 1], channels)
    target = np.ldexp(64.0 / scale, shift) * rng.uniform(0.25, 4.0, channels)
    mult = sign * np.clip(np.round(target), 1, 2**31 - 1).astype(np.int64)
    wild = rng.random(channels) < 0.25
    mult[wild] = rng.integers(-(2**31), 2**31, int(wild.sum()))
    return mult, shift


def _clamp(rng: np.random.Generator) -> tuple[int, int]:
    kind = rng.integers(0, 4)
    if kind == 0:
        return (-128, 127)
    if kind == 1:
        return (0, 127)  # ReLU
    if kind == 2:
        return (0, int(rng.integers(1, 128)))  # ReLU6: the quantized 6.0
    lo = int(rng.integers(-128, 128))
    return (lo, int(rng.integers(lo, 128)))


def _size(rng: np.random.Generator, d: int) -> int:
    edges = [1, d - 1, d, d + 1]
    return int(rng.choice(edges)) if rng.random() < 0.6 else int(rng.integers(2, 8))


def _conv(b: Builder, rng: np.random.Generator, x: Tensor, sync_token: bool) -> Tensor:
    d = b.dim
    kernel, stride = int(rng.choice([1, 3])), int(rng.integers(1, 3))
    cout = d * int(rng.integers(1, 3))
    pad = kernel // 2
    w = rng.integers(-128, 128, (cout, x.c, kernel, kernel), dtype=np.int8)
    scale = 74.0 * 74.0 * np.sqrt(x.c * kernel * kernel)  # typical |accumulator|
    mult, shift = _requant(rng, cout, scale)
    columns = {
        "bias": rng.integers(-int(scale), int(scale) + 1, cout),
        "mult": mult,
        "shift": shift,
    }
    residual = None
    if rng.random() < 0.5:
        oh, ow = ((s + 2 * pad - kernel) // stride + 1 for s in (x.h, x.w))
        res_mult, res_shift = _requant(rng, cout, 64.0 * 64.0 / scale)
        columns |= {"res_mult": res_mult, "res_shift": res_shift}
        residual = b.put_nchw(rng.integers(-128, 128, (cout, oh, ow), dtype=np.int8))
    params = b.put_params(**columns)
    placement = rng.integers(0, 3)  # the bias: ACCUM before the GEMM, after it, or in STORE
    return conv2d(
        b,
        x,
        w,
        params,
        stride=stride,
        pad=pad,
        clamp=_clamp(rng),
        residual=residual,
        bias_last=bool(placement == 1),
        bias_in_store=bool(placement == 2),
        token_on_load=not sync_token,
    )


def _pool(b: Builder, rng: np.random.Generator, x: Tensor) -> Tensor:
    mode = str(rng.choice(["MAX", "SUM"]))
    if rng.random() < 0.2 and x.h * x.w <= 255:  # global: the window is one POOL field
        kernel, stride, pad = x.h, x.h, 0
    else:
        kernel = int(rng.integers(1, 4))
        stride = int(rng.choice([1, 2, kernel]))
        pad = int(rng.integers(0, 2)) if kernel > 1 else 0
        kernel = min(kernel, x.h + 2 * pad)
    area = kernel * kernel
    channels = x.c
    if rng.random() < 0.5:  # the usual: identity for max, 1/area for average
        mult, shift = (1, 0) if mode == "MAX" else ref.quantize_multiplier(1 / area)
        mult_col, shift_col = np.full(channels, mult), np.full(channels, shift)
    else:
        mult_col, shift_col = _requant(rng, channels, 64.0 * (area if mode == "SUM" else 1))
    params = b.put_params(mult=mult_col, shift=shift_col)
    return pool2d(
        b,
        x,
        params,
        kernel=kernel,
        stride=stride,
        pad=pad,
        mode=mode,
        clamp=_clamp(rng),
        split=bool(rng.integers(0, 2)),
    )


def random_program(config: AccelConfig, seed: int) -> tuple[str, Builder]:
    """A name (kernel kinds and the seed) and the program of ``seed``."""
    rng = np.random.default_rng(seed)
    d, b = config.rows, Builder(config)
    size = _size(rng, d)
    x = b.put_nchw(rng.integers(-128, 128, (d * int(rng.integers(1, 3)), size, size), np.int8))
    first = int(rng.integers(0, 2))
    kinds = [("conv", "pool")[(first + n) % 2] for n in range(int(rng.integers(2, 5)))]
    # A stream of its own, so the draws of every other choice stay as they were before a
    # LOAD-queue SYNC could be drawn (test_sync_token_rtl.py: the RTL once ran it as a LOAD).
    syncs = np.random.default_rng([seed, 1])
    for n, kind in enumerate(kinds):
        if n:
            b.barrier()
        if kind == "conv":
            x = _conv(b, rng, x, sync_token=bool(syncs.integers(0, 2)))
        else:
            x = _pool(b, rng, x)
    return f"seed{seed}_{'_'.join(kinds)}", b


def random_programs(config: AccelConfig, seeds: list[int]) -> dict[str, Builder]:
    return dict(random_program(config, seed) for seed in seeds)

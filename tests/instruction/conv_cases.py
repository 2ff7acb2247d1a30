"""CONV cases for the ISA simulator and RTL tests (``tests/instruction/test_conv.py``,
``tests/unit/isa_sim/test_isa_machine.py``): programs with their expected outputs from
``arch.reference_ops.conv2d``, and bad programs with the error each must stop with.

Random input images of ``k_iter`` channel blocks, already padded, loaded into ACT as ``k_iter``
tiles of ``in_h * pitch`` lines ``act_k_stride`` apart (sometimes with a gap of random lines
between tiles that must not leak in); weights laid out in WGT in the CONV's k-block order;
kernels 1x1 to 7x7, strides 1..3, ``m`` sometimes not a multiple of ``out_w`` (a partial last
output row), random ACT/WGT/ACC/PARAM addresses (sometimes the last lines of each memory). An
ACCUM first fills the accumulators with random biases: a CONV with accumulate=0 must overwrite
them, one with accumulate=1 adds to them, and a second CONV with other weights accumulates onto
the first. A STORE requantizes the accumulators to int8.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arch import isa
from arch import reference_ops as ref
from tests.programs import Builder

CONFIGS = ["tiny", "default"]
KERNELS = [(1, 1), (3, 3), (1, 3), (3, 1), (2, 2), (5, 5), (7, 7), (2, 3), (3, 2)]
INT8_STD = 128 / np.sqrt(3)  # standard deviation of a uniform random int8


@dataclass
class Expected:
    out: int  # DRAM address of the stored (m, n_iter*cols) int8 outputs
    want: np.ndarray
    macs: int  # array MACs of the CONVs
    rows_streamed: int  # ACT rows that entered the array (array_active)
    weight_rows: int  # WGT lines written into the array (weight_load)


def _weight_lines(w: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """WGT lines of (O, C, kh, kw) weights in the CONV's order: tile (k, j) with
    k = (ky*kw + kx)*k_iter + c is ``rows`` lines; line r holds W[j*cols + col, c*rows + r, ky, kx]
    over col. Written out loop by loop (not as the simulator computes it)."""
    o, ch, kh, kw = w.shape
    k_iter, n_iter = ch // rows, o // cols
    lines = np.zeros((kh * kw * k_iter * n_iter * rows, cols), np.int8)
    for ky in range(kh):
        for kx in range(kw):
            for c in range(k_iter):
                k = (ky * kw + kx) * k_iter + c
                for j in range(n_iter):
                    for r in range(rows):
                        line = (k * n_iter + j) * rows + r
                        lines[line] = w[j * cols : (j + 1) * cols, c * rows + r, ky, kx]
    return lines


def _last_act_offset(m, out_w, kh, kw, stride, k_iter, act_k_stride):
    """The largest ACT line offset (from act_addr) the CONV reads, by walking every read."""
    pitch = isa.window_span(out_w, kw, stride)
    return max(
        c * act_k_stride + ((i // out_w) * stride + ky) * pitch + (i % out_w) * stride + kx
        for c in range(k_iter)
        for ky in range(kh)
        for kx in range(kw)
        for i in range(m)
    )


def _split(rng, total: int, need: list[int], at_end: bool) -> list[int]:
    """Addresses of regions of ``need`` lines placed in order in ``total`` lines with random
    gaps; with ``at_end`` the last region ends at the last line."""
    slack = total - sum(need)
    assert slack >= 0, (total, need)
    addrs, at = [], 0
    for n, size in enumerate(need):
        last = n == len(need) - 1
        gap = slack if last and at_end else int(rng.integers(0, slack + 1))
        at += gap
        slack -= gap
        addrs.append(at)
        at += size
    return addrs


def _im2col(image, rows, *, m, out_w, kh, kw, stride):
    """ACT lines of the same products for a GEMM: k block (ky*kw + kx)*k_iter + c holds, for
    output pixel i, channel block c of input pixel (y*stride + ky, x*stride + kx)."""
    k_iter = image.shape[0] // rows
    lines = np.zeros((kh * kw * k_iter * m, rows), np.int8)
    for ky in range(kh):
        for kx in range(kw):
            for c in range(k_iter):
                k = (ky * kw + kx) * k_iter + c
                for i in range(m):
                    y, x = divmod(i, out_w)
                    pixel = image[c * rows : (c + 1) * rows, y * stride + ky, x * stride + kx]
                    lines[k * m + i] = pixel
    return lines


def _conv_case(
    config,
    rng,
    *,
    kh,
    kw,
    stride,
    k_iter,
    n_iter,
    out_w,
    m,
    gap,
    at_end,
    first_acc,
    second,
    as_gemm=False,
):
    """ACCUM random biases into the ACC tile, run a CONV (and a second, accumulating one with
    other weights), STORE; return the builder and what the output must be. ``as_gemm``: the
    same products as GEMMs over an im2col copy of the image (same data, weights and tiles)."""
    rows, cols = config.rows, config.cols
    pitch = isa.window_span(out_w, kw, stride)
    out_h = -(-m // out_w)
    in_h = (out_h - 1) * stride + kh
    tile = in_h * pitch
    act_k_stride = tile + gap
    o = n_iter * cols
    image = rng.integers(-128, 128, (k_iter * rows, in_h, pitch), dtype=np.int8)
    kernels = [rng.integers(-128, 128, (o, k_iter * rows, kh, kw), dtype=np.int8)]
    if second:
        kernels.append(rng.integers(-128, 128, (o, k_iter * rows, kh, kw), dtype=np.int8))
    bias = rng.integers(-(1 << 16), 1 << 16, o)
    reduction = kh * kw * k_iter * rows * len(kernels)
    base = int(round(np.log2(INT8_STD**2 * np.sqrt(reduction)))) + 25  # outputs ~ +-50
    mult = rng.integers(1 << 30, 1 << 31, o)
    shift = rng.integers(base, base + 2, o)

    # ACT: tile c (its lines row-major over the padded image) at c*act_k_stride, random lines
    # in the gaps between tiles and after the last.
    last_read = _last_act_offset(m, out_w, kh, kw, stride, k_iter, act_k_stride)
    span = (k_iter - 1) * act_k_stride + tile + int(rng.integers(0, 4))
    act = rng.integers(-128, 128, (span, rows), dtype=np.int8)
    for c in range(k_iter):
        block = image[c * rows : (c + 1) * rows].reshape(rows, tile).T
        act[c * act_k_stride : c * act_k_stride + tile] = block
    if as_gemm:
        act = _im2col(image, rows, m=m, out_w=out_w, kh=kh, kw=kw, stride=stride)
        span, last_read = len(act), len(act) - 1
    [act_addr] = _split(rng, config.act_lines, [last_read + 1], at_end)
    span = min(span, config.act_lines - act_addr)  # at the end: the lines past ACT are unread

    wgt_need = kh * kw * k_iter * n_iter * rows
    wgt_addrs = _split(rng, config.wgt_lines, [wgt_need] * len(kernels), at_end)
    [acc_addr] = _split(rng, config.acc_lines, [n_iter * m], at_end)
    [param_addr] = _split(rng, config.param_lines, [n_iter], at_end)

    b = Builder(config)
    params = b.put_params(bias=bias, mult=mult, shift=shift)
    b.load_params(params, n_iter, local=param_addr)
    for kernel, addr in zip(kernels, wgt_addrs, strict=True):
        b.load_lines("WGT", addr, b.put(_weight_lines(kernel, rows, cols)), wgt_need, cols)
    b.load_lines("ACT", act_addr, b.put(act[:span]), span, rows, deps="push_next")
    b.emit(
        "accum",
        "pop_prev",
        acc_addr=acc_addr,
        act_addr=0,
        param_addr=param_addr,
        m=m,
        n_iter=n_iter,
        acc_n_stride=m,
        act_n_stride=0,
        use_bias=1,
        use_res=0,
        accumulate=0,
    )
    acc = np.zeros((o, out_h * out_w), np.int64)
    if first_acc:
        acc += bias[:, None]
    for n, (kernel, addr) in enumerate(zip(kernels, wgt_addrs, strict=True)):
        common = dict(wgt_addr=addr, act_addr=act_addr, acc_addr=acc_addr, m=m, n_iter=n_iter)
        deps, accumulate = "push_next" if n == len(kernels) - 1 else "", int(first_acc or n > 0)
        if as_gemm:
            k_blocks = kh * kw * k_iter
            b.emit(
                "gemm",
                deps,
                **common,
                k_iter=k_blocks,
                act_k_stride=m,
                acc_n_stride=m,
                accumulate=accumulate,
            )
        else:
            b.emit(
                "conv",
                deps,
                **common,
                k_iter=k_iter,
                act_k_stride=act_k_stride,
                out_w=out_w,
                kh=kh,
                kw=kw,
                stride=stride,
                accumulate=accumulate,
            )
        conv = ref.conv2d(image[None], kernel, stride=stride)[0]  # (o, out_h, out_w)
        assert conv.shape == (o, out_h, out_w)
        acc = ref.add_wrap32(acc, conv.reshape(o, -1)).astype(np.int64)
    out = b.alloc(m * o)
    b.emit(
        "store",
        "pop_prev",
        desc=b.desc("ACC", acc_addr, out, [(n_iter, cols, m), (m, o, 1)]),
        param_addr=param_addr,
        param_loop=2,
        clamp_lo=-128,
        clamp_hi=127,
    )
    acc = acc[:, :m].T  # (pixel, output channel): the first m pixels, row-major
    want = ref.to_int8(ref.clamp(ref.requantize(acc, mult, shift, axis=1), -128, 127))
    tiles = len(kernels) * kh * kw * k_iter * n_iter  # of all the CONVs
    return b, Expected(out, want, tiles * m * rows * cols, tiles * m, tiles * rows)


def conv_cases(config, seed, count, kernels=KERNELS, as_gemm=False):
    """``count`` cases; each draws its data from its own generator (seed, n), so ``as_gemm``
    gives the same cases as GEMMs over im2col copies."""
    rng = np.random.default_rng(seed)
    programs, expected = {}, {}
    for n in range(count):
        kh, kw = kernels[n % len(kernels)]
        stride = 1 + n % 3
        k_iter, n_iter = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        second = n % 2 == 1
        sets = 2 if second else 1
        while kh * kw * k_iter * n_iter * config.rows * sets > config.wgt_lines:
            if k_iter >= n_iter:
                k_iter -= 1
            else:
                n_iter -= 1
        out_w = int(rng.integers(1, 7))
        out_h = int(rng.integers(1, 5))
        m = out_w * out_h
        if n % 3 == 2 and out_w > 1:
            m -= int(rng.integers(1, out_w))  # a partial last output row
        if n == 0:
            out_w, m = 1, 1  # a single output pixel
        gap = int(rng.integers(1, 6)) if n % 2 == 0 else 0
        name = f"k{kh}x{kw}_s{stride}_c{k_iter}_n{n_iter}_m{m}w{out_w}_{n}"
        programs[name], expected[name] = _conv_case(
            config,
            np.random.default_rng([seed, n]),
            kh=kh,
            kw=kw,
            stride=stride,
            k_iter=k_iter,
            n_iter=n_iter,
            out_w=out_w,
            m=m,
            gap=gap,
            at_end=n % 4 == 3,
            first_acc=n % 5 == 4,
            second=second,
            as_gemm=as_gemm,
        )
    return programs, expected


def _bad(config, **fields):
    b = Builder(config)
    b.emit("sync", queue="COMPUTE")
    b.emit("conv", **(GOOD | fields))
    return b


# A partial last output row (m = 5, out_w = 2), two channel blocks 50 lines apart, 3x2 taps at
# stride 2 and two n blocks: 3*2*2*2 = 24 weight tiles, 2*5 ACC lines.
GOOD = dict(m=5, k_iter=2, n_iter=2, act_k_stride=50, out_w=2, kh=3, kw=2, stride=2)


def bad_conv_programs(config):
    a, w, c = config.act_lines, config.wgt_lines, config.acc_lines
    g = GOOD
    last = _last_act_offset(
        g["m"], g["out_w"], g["kh"], g["kw"], g["stride"], g["k_iter"], g["act_k_stride"]
    )
    # by hand: 50 + ((5 - 1)//2*2 + 2)*pitch 4 + (4 % 2)*2 + 1 = 50 + 24 + 1
    assert last == 75
    tiles = g["kh"] * g["kw"] * g["k_iter"] * g["n_iter"]
    acc = g["n_iter"] * g["m"]  # n blocks are m lines apart
    cases = {
        "act_last_line_fits": (_bad(config, act_addr=a - 1 - last), None),
        "act_past_end": (_bad(config, act_addr=a - last), "LOCAL_RANGE"),
        "act_addr_past_end": (_bad(config, act_addr=a), "LOCAL_RANGE"),
        "wgt_last_line_fits": (_bad(config, wgt_addr=w - tiles * config.rows), None),
        "wgt_past_end": (_bad(config, wgt_addr=w - tiles * config.rows + 1), "LOCAL_RANGE"),
        "acc_last_line_fits": (_bad(config, acc_addr=c - acc), None),
        "acc_past_end": (_bad(config, acc_addr=c - acc + 1), "LOCAL_RANGE"),
    }
    for field in ("m", "k_iter", "n_iter", "out_w", "kh", "kw", "stride"):
        cases[f"zero_{field}"] = (_bad(config, **{field: 0}), "BAD_FIELD")
    return cases

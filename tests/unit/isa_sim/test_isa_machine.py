"""ISA simulator against the integer reference ops: hand-written programs, several configs."""

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arch import isa
from arch import reference_ops as ref
from arch.config import PRESETS, AccelConfig
from arch.isa import INT32_MAX, ErrorCode, Launch
from sim.backends.isa_machine import IsaSimError, Machine, Stats
from tests.instruction.conv_cases import bad_conv_programs, conv_cases
from tests.instruction.rtl_compare import assert_isa_stops
from tests.instruction.test_dwconv_max import max_pool_cases
from tests.programs import Builder, conv2d, pool2d

CONFIGS = {
    "tiny": PRESETS["tiny"],
    "default": PRESETS["default"],
    "8x8": AccelConfig(rows=8, cols=8),
}


def random_requant(rng, channels, lo_shift=14, hi_shift=20):
    mult = rng.integers(1 << 30, 1 << 31, channels)
    shift = rng.integers(lo_shift + 16, hi_shift + 16, channels)
    return mult, shift


@settings(max_examples=25, deadline=None)
@given(
    config=st.sampled_from(list(CONFIGS)),
    cin_blocks=st.integers(1, 2),
    cout_blocks=st.integers(1, 2),
    size=st.integers(3, 7),
    kernel=st.sampled_from([1, 3]),
    stride=st.sampled_from([1, 2]),
    relu=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_conv2d_matches_reference(
    config, cin_blocks, cout_blocks, size, kernel, stride, relu, seed
):
    cfg = CONFIGS[config]
    d, rng = cfg.rows, np.random.default_rng(seed)
    c, o, pad = cin_blocks * d, cout_blocks * d, kernel // 2
    x = rng.integers(-128, 128, (c, size, size), dtype=np.int8)
    w = rng.integers(-128, 128, (o, c, kernel, kernel), dtype=np.int8)
    bias = rng.integers(-5000, 5000, o)
    mult, shift = random_requant(rng, o, 6, 10)
    b = Builder(cfg)
    params = b.put_params(bias=bias, mult=mult, shift=shift)
    out = conv2d(
        b, b.put_nchw(x), w, params, stride=stride, pad=pad, clamp=(0 if relu else -128, 127)
    )
    machine = b.run_isa()

    acc = ref.conv2d(x[None], w, stride=stride, padding=(pad,) * 4)[0] + bias[:, None, None]
    expected = ref.to_int8(ref.requantize(acc, mult, shift, axis=0), lo=0 if relu else -128)
    np.testing.assert_array_equal(b.read_nchw(out), expected)
    assert machine.stats.macs == acc.size * c * kernel * kernel


@settings(max_examples=15, deadline=None)
@given(config=st.sampled_from(list(CONFIGS)), size=st.integers(2, 9), seed=st.integers(0, 2**31))
def test_conv_with_residual_matches_reference(config, size, seed):
    cfg = CONFIGS[config]
    d, rng = cfg.rows, np.random.default_rng(seed)
    x = rng.integers(-128, 128, (d, size, size), dtype=np.int8)
    res = rng.integers(-128, 128, (2 * d, size, size), dtype=np.int8)
    w = rng.integers(-128, 128, (2 * d, d, 3, 3), dtype=np.int8)
    bias = rng.integers(-3000, 3000, 2 * d)
    mult, shift = random_requant(rng, 2 * d, 6, 9)
    res_mult, res_shift = rng.integers(1 << 30, 1 << 31, 2 * d), rng.integers(20, 26, 2 * d)
    b = Builder(cfg)
    params = b.put_params(bias=bias, mult=mult, shift=shift, res_mult=res_mult, res_shift=res_shift)
    out = conv2d(
        b, b.put_nchw(x), w, params, stride=1, pad=1, clamp=(0, 127), residual=b.put_nchw(res)
    )
    b.run_isa()

    acc = ref.conv2d(x[None], w, padding=(1, 1, 1, 1))[0] + bias[:, None, None]
    acc = ref.add_wrap32(acc, ref.requantize(res, res_mult, res_shift, axis=0))
    expected = ref.to_int8(ref.requantize(acc, mult, shift, axis=0), lo=0)
    np.testing.assert_array_equal(b.read_nchw(out), expected)


@settings(max_examples=20, deadline=None)
@given(
    config=st.sampled_from(list(CONFIGS)),
    size=st.integers(3, 10),
    kernel_stride_pad=st.sampled_from([(3, 2, 1), (2, 2, 0), (3, 1, 1), (3, 1, 0)]),
    seed=st.integers(0, 2**31),
)
def test_max_pool_matches_reference(config, size, kernel_stride_pad, seed):
    cfg = CONFIGS[config]
    kernel, stride, pad = kernel_stride_pad
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (2 * cfg.rows, size, size), dtype=np.int8)
    b = Builder(cfg)
    ones = np.ones(2 * cfg.rows, dtype=np.int64)
    params = b.put_params(mult=ones, shift=0 * ones)
    out = pool2d(b, b.put_nchw(x), params, kernel=kernel, stride=stride, pad=pad, mode="MAX")
    b.run_isa()
    expected = ref.max_pool2d(x[None], kernel, stride=stride, padding=(pad,) * 4)[0]
    np.testing.assert_array_equal(b.read_nchw(out), expected)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_global_average_pool_matches_reference(config):
    cfg, rng = CONFIGS[config], np.random.default_rng(7)
    x = rng.integers(-128, 128, (2 * cfg.rows, 7, 7), dtype=np.int8)
    mult, shift = ref.quantize_multiplier(1 / 49)
    b = Builder(cfg)
    params = b.put_params(mult=np.full(2 * cfg.rows, mult), shift=np.full(2 * cfg.rows, shift))
    out = pool2d(b, b.put_nchw(x), params, kernel=7, stride=7, pad=0, mode="SUM")
    b.run_isa()
    expected = ref.to_int8(ref.requantize(ref.global_sum_pool(x[None])[0], mult, shift))
    np.testing.assert_array_equal(b.read_nchw(out), expected)


def test_two_layers_with_barrier_match_reference():
    cfg, rng = CONFIGS["tiny"], np.random.default_rng(3)
    x = rng.integers(-128, 128, (4, 6, 6), dtype=np.int8)
    w1, w2 = (rng.integers(-128, 128, (4, 4, 3, 3), dtype=np.int8) for _ in range(2))
    mult, shift = random_requant(rng, 4, 7, 9)
    zero = np.zeros(4, dtype=np.int64)
    b = Builder(cfg)
    params = b.put_params(bias=zero, mult=mult, shift=shift)
    mid = conv2d(b, b.put_nchw(x), w1, params, stride=1, pad=1, clamp=(0, 127))
    b.barrier()
    out = conv2d(b, mid, w2, params, stride=2, pad=1, clamp=(0, 127))
    b.run_isa()
    first = ref.to_int8(
        ref.requantize(ref.conv2d(x[None], w1, padding=(1,) * 4)[0], mult, shift, axis=0), lo=0
    )
    second = ref.conv2d(first[None], w2, stride=2, padding=(1,) * 4)[0]
    np.testing.assert_array_equal(
        b.read_nchw(out), ref.to_int8(ref.requantize(second, mult, shift, axis=0), lo=0)
    )


def test_without_barrier_the_second_layer_races_and_is_wrong():
    """The dataflow order lets loads run ahead: a missing barrier is visible, not hidden."""
    cfg, rng = CONFIGS["tiny"], np.random.default_rng(3)
    x = rng.integers(-128, 128, (4, 6, 6), dtype=np.int8)
    w1, w2 = (rng.integers(-128, 128, (4, 4, 3, 3), dtype=np.int8) for _ in range(2))
    mult, shift = random_requant(rng, 4, 7, 9)
    b = Builder(cfg)
    params = b.put_params(bias=np.zeros(4, dtype=np.int64), mult=mult, shift=shift)
    mid = conv2d(b, b.put_nchw(x), w1, params, stride=1, pad=1, clamp=(0, 127))
    out = conv2d(b, mid, w2, params, stride=2, pad=1, clamp=(0, 127))
    b.run_isa()
    first = ref.to_int8(
        ref.requantize(ref.conv2d(x[None], w1, padding=(1,) * 4)[0], mult, shift, axis=0), lo=0
    )
    second = ref.to_int8(
        ref.requantize(
            ref.conv2d(first[None], w2, stride=2, padding=(1,) * 4)[0], mult, shift, axis=0
        ),
        lo=0,
    )
    assert not np.array_equal(b.read_nchw(out), second)


def test_stats_and_ideal_cycles():
    cfg, rng = CONFIGS["default"], np.random.default_rng(5)
    x = rng.integers(-128, 128, (16, 8, 8), dtype=np.int8)
    w = rng.integers(-128, 128, (32, 16, 3, 3), dtype=np.int8)
    b = Builder(cfg)
    params = b.put_params(
        bias=np.zeros(32, np.int64), mult=np.ones(32, np.int64), shift=np.zeros(32, np.int64)
    )
    conv2d(b, b.put_nchw(x), w, params, stride=1, pad=1)
    stats = b.run_isa().stats
    assert stats.macs == 8 * 8 * 32 * 16 * 9
    assert stats.load_bytes["WGT"] == w.size
    assert stats.load_bytes["PARAM"] == 32 * isa.PARAM_ENTRY_BYTES
    assert stats.store_bytes == 8 * 8 * 32
    # 9 chunks x 8x8 pixels minus the padded border positions
    valid_taps = sum(
        1
        for ky in range(3)
        for kx in range(3)
        for y in range(8)
        for xx in range(8)
        if 0 <= y + ky - 1 < 8 and 0 <= xx + kx - 1 < 8
    )
    assert stats.load_bytes["ACT"] == valid_taps * 16
    assert stats.pad_lines == 9 * 64 - valid_taps
    tiles = 9 * 2
    assert stats.ideal_cycles >= tiles * 64  # at least the array's streaming time
    assert stats.insns["gemm"] == 1 and stats.insns["load"] == 2 + 9
    # the report's view (sim/backends/isa.py: perf): every counter under its own name
    report = stats.as_dict()
    assert sorted(report) == [
        "alu_ops", "busy", "desc_bytes", "dram_read_bytes", "fetch_bytes", "ideal_cycles",
        "insns", "load_bytes", "macs", "pad_lines", "store_bytes",
    ]  # fmt: skip
    assert report["macs"] == 8 * 8 * 32 * 16 * 9
    assert report["store_bytes"] == 8 * 8 * 32
    assert report["pad_lines"] == 9 * 64 - valid_taps
    assert report["load_bytes"] == {
        "WGT": w.size, "PARAM": 32 * isa.PARAM_ENTRY_BYTES, "ACT": valid_taps * 16
    }  # fmt: skip
    assert report["insns"]["gemm"] == 1 and report["insns"]["load"] == 11
    # 16-byte instruction words up to END (dispatch's own, not counted in insns), 64-byte
    # descriptors: one per LOAD and STORE
    assert report["fetch_bytes"] == 16 * (sum(report["insns"].values()) + 1)
    assert report["desc_bytes"] == 64 * (11 + report["insns"]["store"])
    assert report["dram_read_bytes"] == (
        w.size + 32 * isa.PARAM_ENTRY_BYTES + valid_taps * 16 + report["fetch_bytes"]
        + report["desc_bytes"]
    )  # fmt: skip
    assert report["ideal_cycles"] == stats.ideal_cycles >= tiles * 64
    assert set(report["busy"]) == {"LOAD", "COMPUTE", "STORE"}
    assert report["alu_ops"] == stats.alu_ops > 0


# ---- error paths ------------------------------------------------------------------------------


def run_text(
    source: str, config: AccelConfig = CONFIGS["tiny"], dram: np.ndarray | None = None
) -> Machine:
    from arch import asm
    from sim.backends.isa_machine import run_program

    return run_program(config, asm.assemble(source), dram)


@pytest.mark.parametrize(
    ("source", "code", "index", "words"),
    [
        ("load desc=5\nend", ErrorCode.BAD_DESCRIPTOR, 0, ["load.desc = 5", "0 descriptors"]),
        (
            ".desc mem=ACT dram_base=0x7FFFFFF0 loops[3].count=4\nload desc=0\nend",
            ErrorCode.BAD_FIELD,
            0,
            ["descriptor loops[0].count is 0"],
        ),
        (
            ".desc mem=ACT dram_base=0x7FFFFFF0 loops[0].count=1 loops[1].count=1 loops[2].count=1 "
            "loops[3].count=4 loops[3].dram_stride=4\nload desc=0\nend",
            ErrorCode.DRAM_RANGE,
            0,
            ["0x7ffffff0", "outside DRAM"],
        ),
        (
            ".desc mem=ACT dram_base=0x100 loops[0].count=1 loops[1].count=1 loops[2].count=1 "
            "loops[3].count=4 loops[3].dram_stride=4 loops[3].local_stride=1 local_base=2046\n"
            "load desc=0\nend",
            ErrorCode.LOCAL_RANGE,
            0,
            ["ACT line 2048", "2048 lines"],
        ),
        (
            ".desc mem=ACT dram_base=0x102 loops[0].count=1 loops[1].count=1 loops[2].count=1 "
            "loops[3].count=1\nload desc=0\nend",
            ErrorCode.DRAM_RANGE,
            0,
            ["4-byte aligned"],
        ),
        ("gemm m=0 k_iter=1 n_iter=1\nend", ErrorCode.BAD_FIELD, 0, ["gemm.m is 0"]),
        (
            "gemm m=8 k_iter=1 n_iter=1 wgt_addr=1022\nend",
            ErrorCode.LOCAL_RANGE,
            0,
            ["WGT lines 1022..1025"],
        ),
        (
            "sync queue=LOAD\npool m=1 window=1 n_iter=1 acc_addr=1024\nend",
            ErrorCode.LOCAL_RANGE,
            1,
            ["ACC lines 1024"],
        ),
        ("load desc=0 +pop_prev\nend", ErrorCode.BAD_FIELD, 0, ["pop_prev", "no prev queue"]),
        (
            "sync queue=LOAD\ngemm m=1 k_iter=1 n_iter=1 +pop_prev\nend",
            ErrorCode.DEADLOCK,
            1,
            ["COMPUTE waits at instruction 1 (gemm) for a token from LOAD"],
        ),
        (
            "sync queue=COMPUTE +pop_next\nsync queue=STORE +pop_prev\nend",
            ErrorCode.DEADLOCK,
            0,
            ["COMPUTE waits at instruction 0", "STORE waits at instruction 1"],
        ),
    ],
)
def test_bad_programs_raise_the_right_code(source, code, index, words):
    with pytest.raises(IsaSimError) as info:
        run_text(source)
    assert info.value.code is code
    assert info.value.insn_index == index
    for word in words:
        assert word in str(info.value)


def test_full_queue_deadlocks_like_the_rtl():
    """In-order dispatch into finite queues: tokens produced behind a full queue never come."""
    depth = CONFIGS["tiny"].queue_depth
    waiting = "sync queue=LOAD +pop_next\n" * (depth + 1)
    producing = "sync queue=COMPUTE +push_prev\n" * (depth + 1)
    with pytest.raises(IsaSimError) as info:
        run_text(waiting + producing + "end")
    assert info.value.code is ErrorCode.DEADLOCK
    assert f"dispatch waits at instruction {depth}" in str(info.value)
    # The same work interleaved runs fine.
    run_text("sync queue=COMPUTE +push_prev\nsync queue=LOAD +pop_next\n" * (depth + 1) + "end")


def test_illegal_opcode_and_missing_end():
    cfg = CONFIGS["tiny"]
    dram = np.zeros(4096, dtype=np.uint8)
    sync = isa.make("sync", queue="LOAD").encode().to_bytes(16, "little")
    dram[:48] = np.frombuffer(sync * 3, np.uint8)
    dram[48] = 0x0B  # opcode 11
    with pytest.raises(IsaSimError) as info:
        Machine(cfg, dram).run(Launch(0, 0, 0))
    assert info.value.code is ErrorCode.ILLEGAL_OPCODE and info.value.insn_index == 3
    assert "illegal opcode 11" in str(info.value)

    dram[:] = np.frombuffer(sync * (4096 // 16), np.uint8)
    with pytest.raises(IsaSimError) as info:
        Machine(cfg, dram).run(Launch(0, 0, 0))
    # 256 SYNCs fill the 4 KiB: the 257th instruction would start past the end
    assert str(info.value) == (
        "DRAM_RANGE: instruction 256: program runs off the end of DRAM without END"
    )


def test_shift_beyond_62_is_bad_field():
    cfg = CONFIGS["tiny"]
    b = Builder(cfg)
    params = b.put_params(mult=np.ones(4, np.int64), shift=np.full(4, 63))
    b.load_params(params, 1, deps="push_next")
    b.emit("sync", "pop_prev,push_next", queue="COMPUTE")
    store = b.desc("ACC", 0, b.alloc(64), [(1, 4, 1)])
    b.emit("store", "pop_prev", desc=store, clamp_lo=-128, clamp_hi=127)
    with pytest.raises(IsaSimError) as info:
        b.run_isa()
    assert str(info.value) == "BAD_FIELD: instruction 2: PARAM shift = 63 exceeds 62 (line 0...)"


def _dwconv(config: AccelConfig, **fields) -> Builder:
    b = Builder(config)
    good = dict(out_w=2, out_h=2, pitch=6, kh=3, kw=3, stride=2)
    b.emit("sync", queue="COMPUTE")
    b.emit("dwconv", **(good | fields))
    return b


def test_dwconv_range_errors_name_the_memory_and_its_lines():
    """A 2x2 output of a 3x3 window at stride 2 with a pitch of 6 reads input rows 0..4 and, in
    each, columns 0..4 (one output row streams (2 - 1) * 2 + 3 = 5 columns): its last ACT line
    is act_addr + 4 * 6 + 4 = act_addr + 28. Each memory's first line past the end stops it,
    the message naming the memory and the lines; the last line that fits runs."""
    cfg = CONFIGS["tiny"]
    a, w, c, p = cfg.act_lines, cfg.wgt_lines, cfg.acc_lines, cfg.param_lines
    cases = {
        "ACT": ({"act_addr": a - 28}, f"ACT lines {a - 28}..{a}"),
        "WGT": ({"wgt_addr": w - 8}, f"WGT lines {w - 8}..{w}"),  # 9 taps
        "ACC": ({"acc_addr": c - 3}, f"ACC lines {c - 3}..{c}"),  # 4 output pixels
        "PARAM": ({"use_bias": 1, "param_addr": p}, f"PARAM lines {p}..{p}"),
    }
    for memory, (fields, lines) in cases.items():
        with pytest.raises(IsaSimError) as info:
            _dwconv(cfg, **fields).run_isa()
        assert info.value.code is ErrorCode.LOCAL_RANGE and info.value.insn_index == 1
        limit = {"ACT": a, "WGT": w, "ACC": c, "PARAM": p}[memory]
        expected = f"LOCAL_RANGE: instruction 1: {lines} are outside the memory ({limit} lines)"
        assert str(info.value) == expected
    for fields in ({"act_addr": a - 29}, {"wgt_addr": w - 9}, {"acc_addr": c - 4}):
        _dwconv(cfg, **fields).run_isa()
    _dwconv(cfg, use_bias=1, param_addr=p - 1).run_isa()  # the last PARAM line


def test_dwconv_max_mode_matches_reference_ops():
    """DWCONV with max (docs/isa.md) on the ISA simulator alone, the cases of
    tests/instruction/test_dwconv_max.py (one or two images, the second accumulating: the
    larger value wins) over more shapes than the RTL runs, vs ``reference_ops.max_pool2d``:
    no MACs; ALU operations kh*kw*cols per output; max with use_bias is BAD_FIELD."""
    for name in ("tiny", "default"):
        programs, expected = max_pool_cases(PRESETS[name], seed=7, count=17)
        for case, builder in programs.items():
            machine = builder.run_isa()
            out, want = expected[case]
            assert machine.stats.macs == 0, f"{name} {case}"
            got = machine.dram[out : out + want.size].view(np.int8).reshape(want.shape)
            np.testing.assert_array_equal(got, want, err_msg=f"{name} {case}")
    machine = Machine(CONFIGS["tiny"])
    fields = dict(out_w=3, out_h=2, pitch=9, kh=3, kw=2, stride=2, max=1)
    machine.execute(0, isa.make("dwconv", **fields), [])
    assert (machine.stats.macs, machine.stats.alu_ops) == (0, 2 * 3 * 3 * 2 * 4)
    machine.execute(0, isa.make("dwconv", **fields), [])
    assert machine.stats.alu_ops == 2 * 2 * 3 * 3 * 2 * 4
    with pytest.raises(IsaSimError) as info:
        machine.execute(4, isa.make("dwconv", **fields, use_bias=1), [])
    assert str(info.value) == "BAD_FIELD: instruction 4: dwconv.max with use_bias"


def test_deadlock_messages_name_every_waiting_queue():
    """A queue that pushes token_depth tokens nobody pops waits for room; the error is raised at
    the head of the first waiting queue even when dispatch is stuck behind a full queue too."""
    cfg = CONFIGS["tiny"]
    depth = cfg.token_depth
    with pytest.raises(IsaSimError) as info:
        run_text("sync queue=COMPUTE +push_next\n" * (depth + 1) + "end")
    assert info.value.code is ErrorCode.DEADLOCK and info.value.insn_index == depth
    assert str(info.value) == (
        f"DEADLOCK: instruction {depth}: token deadlock: COMPUTE waits at instruction {depth} "
        "(sync) for room to push to STORE"
    )
    queue = cfg.queue_depth
    waiting = "sync queue=LOAD +pop_next\n" * (queue + 1)
    with pytest.raises(IsaSimError) as info:
        run_text(waiting + "sync queue=COMPUTE +push_prev\nend")
    assert info.value.insn_index == 0  # LOAD's head, not the instruction dispatch holds
    assert str(info.value) == (
        "DEADLOCK: instruction 0: token deadlock: LOAD waits at instruction 0 (sync) for a "
        f"token from COMPUTE; dispatch waits at instruction {queue} (sync): the LOAD queue is "
        f"full ({queue})"
    )


def test_pool_accumulates_max_and_sum_over_instructions_per_the_isa_doc():
    """POOL (docs/isa.md): for j < n_iter, i < m, acc[acc_addr + j*acc_n_stride + i] (max|+)=
    reduce(act[act_addr + j*act_n_stride + i*window + w] for w < window); accumulate=1
    combines with the ACC line, 0 overwrites. Two POOLs over different ACT windows into the
    same ACC lines: the result is the reduction over both, per lane; the ideal duration is
    m * window * n_iter cycles and the ALU does that many line operations per lane."""
    cfg = CONFIGS["tiny"]
    rng = np.random.default_rng(23)
    m, window, n_iter = 3, 5, 2
    for mode in isa.PoolMode:
        machine = Machine(cfg)
        machine.act[:64] = rng.integers(-128, 128, (64, cfg.rows))
        first = machine.act[0:30].astype(np.int64).reshape(n_iter, m, window, cfg.rows)
        second = machine.act[32:62].astype(np.int64).reshape(n_iter, m, window, cfg.rows)
        cycles = []
        for act, accumulate in ((0, 0), (32, 1)):
            insn = isa.make(
                "pool", act_addr=act, acc_addr=4, m=m, window=window, n_iter=n_iter,
                act_n_stride=m * window, acc_n_stride=8, mode=mode, accumulate=accumulate,
            )  # fmt: skip
            cycles.append(machine.execute(7, insn, []))
        if mode is isa.PoolMode.MAX:
            want = np.maximum(first.max(axis=2), second.max(axis=2))
        else:
            want = first.sum(axis=2) + second.sum(axis=2)
        got = np.stack([machine.acc[4:7], machine.acc[12:15]])
        np.testing.assert_array_equal(got, want, err_msg=mode.name)
        assert cycles == [m * window * n_iter] * 2
        assert machine.stats.alu_ops == 2 * m * window * n_iter * cfg.rows
    for name in ("m", "window", "n_iter"):
        fields = dict(m=1, window=1, n_iter=1, mode=isa.PoolMode.SUM) | {name: 0}
        with pytest.raises(IsaSimError) as info:
            Machine(cfg).execute(5, isa.make("pool", **fields), [])
        assert str(info.value) == f"BAD_FIELD: instruction 5: pool.{name} is 0"
    last = dict(m=2, window=3, n_iter=1, mode=isa.PoolMode.MAX)
    Machine(cfg).execute(0, isa.make("pool", act_addr=cfg.act_lines - 6, **last), [])
    with pytest.raises(IsaSimError) as info:
        Machine(cfg).execute(0, isa.make("pool", act_addr=cfg.act_lines - 5, **last), [])
    a = cfg.act_lines
    assert str(info.value) == (
        f"LOCAL_RANGE: instruction 0: ACT lines {a - 5}..{a} are outside the memory ({a} lines)"
    )


def test_deadlock_lists_every_missing_token_and_every_full_channel():
    cfg = CONFIGS["tiny"]
    with pytest.raises(IsaSimError) as info:
        run_text("sync queue=COMPUTE +pop_prev +pop_next\nend")
    assert str(info.value).endswith(
        "COMPUTE waits at instruction 0 (sync) for a token from LOAD, a token from STORE"
    )
    depth = cfg.token_depth
    with pytest.raises(IsaSimError) as info:
        run_text("sync queue=COMPUTE +push_prev +push_next\n" * (depth + 1) + "end")
    assert str(info.value).endswith(
        f"COMPUTE waits at instruction {depth} (sync) for room to push to LOAD, room to push "
        "to STORE"
    )


def test_an_error_without_an_instruction_is_code_and_message():
    assert str(IsaSimError(ErrorCode.DEADLOCK, "stuck")) == "DEADLOCK: stuck"
    assert str(IsaSimError(ErrorCode.DEADLOCK, "stuck", 0)) == "DEADLOCK: instruction 0: stuck"


def test_run_program_runs_in_the_given_dram():
    """The program is placed in the caller's DRAM and runs there: what else it holds stays and
    a STORE's result lands in that array."""
    cfg = CONFIGS["tiny"]
    dram = np.zeros(cfg.dram_bytes, np.uint8)
    tail = np.random.default_rng(3).integers(0, 256, 4096).astype(np.uint8)
    dram[-4096:] = tail
    machine = run_text("end", dram=dram)
    assert machine.dram is dram
    np.testing.assert_array_equal(machine.dram[-4096:], tail)


def test_fetch_decodes_the_program_up_to_end():
    from arch import asm

    program = asm.assemble("sync queue=LOAD\nsync queue=STORE +push_prev\nend\nsync queue=LOAD")
    cfg = CONFIGS["tiny"]
    dram = np.zeros(cfg.dram_bytes, np.uint8)
    words = program.insn_bytes()
    dram[256 : 256 + len(words)] = np.frombuffer(words, np.uint8)
    insns = Machine(cfg, dram).fetch(Launch(256, 0, 0))
    assert [i.format.name for i in insns] == ["sync", "sync", "end"]
    assert insns[1] == isa.make("sync", "push_prev", queue="STORE")


def test_a_store_table_past_param_names_its_lines():
    """A table is 256 bytes in PARAM lines of cols x 16 bytes: 4 lines on the 4x4 array. Its
    last line may be PARAM's last; one further is LOCAL_RANGE naming the table's lines."""
    cfg = CONFIGS["tiny"]
    p = cfg.param_lines

    def program(table_addr: int) -> Builder:
        b = Builder(cfg)
        params = b.put_params(mult=np.ones(4, np.int64), shift=np.zeros(4, np.int64))
        b.load_params(params, 1, deps="push_next")
        b.emit("sync", "pop_prev,push_next", queue="COMPUTE")
        store = b.desc("ACC", 0, b.alloc(64), [(1, 4, 1)])
        b.emit(
            "store", "pop_prev", desc=store, clamp_lo=-128, clamp_hi=127, use_table=1,
            table_addr=table_addr,
        )  # fmt: skip
        return b

    program(p - 4).run_isa()
    with pytest.raises(IsaSimError) as info:
        program(p - 3).run_isa()
    assert str(info.value) == (
        f"LOCAL_RANGE: instruction 2: table PARAM lines {p - 3}..{p} are outside the memory "
        f"({p} lines)"
    )


def _wrap32(v: np.ndarray) -> np.ndarray:
    """Two's-complement wrap to int32, by modular arithmetic (the ACC's 32-bit registers)."""
    return ((np.asarray(v, np.int64) + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)


def bank_timing(tiles: int, m: int, rows: int, cols: int) -> int:
    """A GEMM's cycles, tile by tile as the RTL's two weight banks allow: tile t starts ``m``
    after tile t-1 (one row per cycle) and, its bank being tile t-2's, once that bank has
    drained (``cols + 1``) and loaded the new weights (``rows + 1``); tile 1 once its weights
    are in (``rows`` after tile 0). The last tile's rows then fill and drain (``2*rows + cols +
    5`` with the first load). Measured on the RTL: tests/instruction/test_gemm_timing_rtl.py."""
    starts = [0]
    for t in range(1, tiles):
        after_bank = starts[t - 2] + m + cols + 1 + rows + 1 if t >= 2 else rows
        starts.append(max(starts[t - 1] + m, after_bank))
    return starts[-1] + m + 2 * rows + cols + 5


@pytest.mark.parametrize("rows", [4, 8, 16])
def test_gemm_cycles_follow_the_weight_banks(rows):
    """isa.gemm_cycles (a closed form) against the tile-by-tile bank timing, across both sides
    of m = rows + cols + 2 (where a bank period stops hiding behind two tiles' rows)."""
    for m in [1, 2, rows - 1, rows, rows + 1, 2 * rows, 2 * rows + 1, 2 * rows + 2, 2 * rows + 3]:
        for tiles in [1, 2, 3, 4, 7, 8, 33]:
            want = bank_timing(tiles, m, rows, rows)
            assert isa.gemm_cycles(tiles, m, rows, rows) == want, (m, tiles)


def test_gemm_walks_k_and_n_blocks_per_the_isa_doc():
    """GEMM (docs/isa.md): for k < k_iter, j < n_iter, i < m: acc[acc_addr + j*acc_n_stride + i]
    (+)= act[act_addr + k*act_k_stride + i] @ W[wgt_addr + (k*n_iter + j)*rows], the rows x cols
    tile; accumulate=0 overwrites with the sum over k. Written as the doc's loops in int64 on the
    8x8 array with random data (a transposed tile shows), odd strides and non-zero bases;
    ACC lines between the blocks keep their old values, and accumulate=1 adds to ACC wrapping at
    32 bits. Cost: the weight banks' timing (:func:`bank_timing`); each tile is m*rows*cols
    MACs."""
    cfg = CONFIGS["8x8"]
    rng = np.random.default_rng(41)
    m, k_iter, n_iter, act_addr, act_k = 5, 3, 2, 7, 11
    wgt_addr, acc_addr, acc_n = 9, 3, 7
    fields = dict(
        m=m, k_iter=k_iter, n_iter=n_iter, act_addr=act_addr, act_k_stride=act_k,
        wgt_addr=wgt_addr, acc_addr=acc_addr, acc_n_stride=acc_n,
    )  # fmt: skip
    for accumulate in (0, 1):
        machine = Machine(cfg)
        machine.act[:] = rng.integers(-128, 128, machine.act.shape)
        machine.wgt[:] = rng.integers(-128, 128, machine.wgt.shape)
        products = np.zeros((n_iter, m, cfg.cols), np.int64)
        for j in range(n_iter):
            for i in range(m):
                for k in range(k_iter):
                    x = machine.act[act_addr + k * act_k + i].astype(np.int64)
                    tile = wgt_addr + (k * n_iter + j) * cfg.rows
                    products[j, i] += x @ machine.wgt[tile : tile + cfg.rows].astype(np.int64)
        old = rng.integers(-(1 << 31), 1 << 31, machine.acc.shape)
        # the first lane of the first block leaves int32 when its product is added
        old[acc_addr, 0] = (1 << 31) - 1 if products[0, 0, 0] > 0 else -(1 << 31)
        machine.acc[:] = old
        want = old.copy()
        for j in range(n_iter):
            for i in range(m):
                a = acc_addr + j * acc_n + i
                want[a] = (want[a] if accumulate else 0) + products[j, i]
        assert products[0, 0, 0] != 0
        cycles = machine.execute(3, isa.make("gemm", accumulate=accumulate, **fields), [])
        np.testing.assert_array_equal(machine.acc, _wrap32(want), err_msg=f"acc={accumulate}")
        assert cycles == bank_timing(k_iter * n_iter, m, cfg.rows, cfg.cols) == 88
        assert machine.stats.macs == k_iter * n_iter * m * cfg.rows * cfg.cols
        machine.execute(3, isa.make("gemm", accumulate=accumulate, **fields), [])
        assert machine.stats.macs == 2 * k_iter * n_iter * m * cfg.rows * cfg.cols


def test_gemm_refusals_name_the_field_and_the_lines():
    """GEMM's count fields must be >= 1; n blocks closer than m lines would overlap in ACC. The
    ACT rows read are act_addr + k*act_k_stride + i (k < k_iter, i < m), the WGT lines
    wgt_addr .. + k_iter*n_iter*rows - 1 and the ACC lines acc_addr .. + (n_iter-1)*acc_n_stride
    + m - 1: each memory's last line runs, one further is LOCAL_RANGE naming the lines."""
    cfg = CONFIGS["tiny"]  # 4x4
    a, w, c = cfg.act_lines, cfg.wgt_lines, cfg.acc_lines

    def gemm(**fields):
        good = dict(m=3, k_iter=2, n_iter=2, act_k_stride=5, acc_n_stride=4)
        return Machine(cfg).execute(6, isa.make("gemm", **(good | fields)), [])

    for name in ("m", "k_iter", "n_iter"):
        with pytest.raises(IsaSimError) as info:
            gemm(**{name: 0})
        assert str(info.value) == f"BAD_FIELD: instruction 6: gemm.{name} is 0"
    with pytest.raises(IsaSimError) as info:
        gemm(acc_n_stride=2)
    assert str(info.value) == (
        "BAD_FIELD: instruction 6: gemm.acc_n_stride 2 < m 3: accumulator blocks overlap"
    )
    gemm(acc_n_stride=3)  # adjacent blocks
    gemm(n_iter=1, acc_n_stride=0)  # one block: the stride is unused
    # ACT: the last row read is act_addr + 5 + 2
    gemm(act_addr=a - 8)
    cases = [
        ({"act_addr": a - 7}, f"ACT lines {a}..{a}", a),
        ({"act_addr": a}, f"ACT lines {a}..{a}", a),  # the first row already outside
        ({"wgt_addr": w - 15}, f"WGT lines {w - 15}..{w}", w),  # 4 tiles of 4 lines
        ({"acc_addr": c - 6}, f"ACC lines {c - 6}..{c}", c),  # 4 + 3 lines
    ]
    gemm(wgt_addr=w - 16)
    gemm(acc_addr=c - 7)
    for fields, lines, limit in cases:
        with pytest.raises(IsaSimError) as info:
            gemm(**fields)
        assert str(info.value) == (
            f"LOCAL_RANGE: instruction 6: {lines} are outside the memory ({limit} lines)"
        )


def _requant_exact(x: int, mult: int, shift: int) -> int:
    """round(x * mult / 2**shift), halves up, in exact rationals."""
    return math.floor(Fraction(x * mult, 1 << shift) + Fraction(1, 2))


def test_accum_per_the_isa_doc_with_bias_residual_and_gate():
    """ACCUM (docs/isa.md): for j < n_iter, i < m, per column c: acc[a] = (acc[a] if accumulate
    else 0) + (bias[c] if use_bias) + (requant(act[act_addr + j*act_n_stride + i][c] * g[c],
    res_mult[c], res_shift[c]) if use_res), a = acc_addr + j*acc_n_stride + i, PARAM line
    param_addr + j, g = act[gate_addr + j] with use_gate else 1. Every combination of the
    flags on the 4x4 array with random data and per-lane parameters, against that formula in
    Python integers; ACC wraps at 32 bits, lines between blocks are untouched. Cost
    (m + use_gate) * n_iter cycles, m * n_iter * cols ALU operations."""
    cfg = CONFIGS["tiny"]
    rng = np.random.default_rng(77)
    m, n_iter, acc_addr, acc_n, act_addr, act_n, param_addr, gate_addr = 3, 2, 5, 4, 6, 7, 9, 30
    for accumulate, use_bias, use_res, use_gate in np.ndindex(2, 2, 2, 2):
        if use_gate and not use_res:
            continue
        machine = Machine(cfg)
        machine.act[:64] = rng.integers(-128, 128, (64, cfg.rows))
        old = rng.integers(-(1 << 31), 1 << 31, machine.acc.shape)
        machine.acc[:] = old
        bias = rng.integers(-(1 << 31), 1 << 31, (n_iter, cfg.cols))
        res_mult = rng.integers(1 << 29, 1 << 31, (n_iter, cfg.cols))
        res_shift = rng.integers(28, 40, (n_iter, cfg.cols))
        for j in range(n_iter):
            machine.param["bias"][param_addr + j] = bias[j]
            machine.param["res_mult"][param_addr + j] = res_mult[j]
            machine.param["res_shift"][param_addr + j] = res_shift[j]
        want = old.copy()
        for j in range(n_iter):
            for i in range(m):
                a = acc_addr + j * acc_n + i
                for c in range(cfg.cols):
                    v = int(old[a, c]) if accumulate else 0
                    if use_bias:
                        v += int(bias[j, c])
                    if use_res:
                        x = int(machine.act[act_addr + j * act_n + i, c])
                        g = int(machine.act[gate_addr + j, c]) if use_gate else 1
                        v += _requant_exact(x * g, int(res_mult[j, c]), int(res_shift[j, c]))
                    want[a, c] = v
        insn = isa.make(
            "accum", m=m, n_iter=n_iter, acc_addr=acc_addr, acc_n_stride=acc_n,
            act_addr=act_addr, act_n_stride=act_n, param_addr=param_addr, gate_addr=gate_addr,
            accumulate=accumulate, use_bias=use_bias, use_res=use_res, use_gate=use_gate,
        )  # fmt: skip
        cycles = machine.execute(2, insn, [])
        flags = f"accumulate={accumulate} bias={use_bias} res={use_res} gate={use_gate}"
        np.testing.assert_array_equal(machine.acc, _wrap32(want), err_msg=flags)
        assert cycles == (m + use_gate) * n_iter, flags
        assert machine.stats.alu_ops == m * n_iter * cfg.cols
        machine.execute(2, insn, [])
        assert machine.stats.alu_ops == 2 * m * n_iter * cfg.cols


def test_accum_refusals_name_the_field_and_the_lines():
    """ACCUM's m and n_iter must be >= 1 and use_gate needs use_res. Block j reads ACC lines
    acc_addr + j*acc_n_stride .. + m - 1, ACT lines act_addr + j*act_n_stride .. + m - 1, the
    gate line gate_addr + j and PARAM line param_addr + j: the last block's last line may be
    each memory's last, one further is LOCAL_RANGE naming the lines (4x4 array, m=3, n_iter=2,
    strides 5)."""
    cfg = CONFIGS["tiny"]
    a, c, p = cfg.act_lines, cfg.acc_lines, cfg.param_lines

    def accum(**fields):
        good = dict(m=3, n_iter=2, acc_n_stride=5, act_n_stride=5, use_bias=1, use_res=1)
        return Machine(cfg).execute(4, isa.make("accum", **(good | fields)), [])

    for name in ("m", "n_iter"):
        with pytest.raises(IsaSimError) as info:
            accum(**{name: 0})
        assert str(info.value) == f"BAD_FIELD: instruction 4: accum.{name} is 0"
    with pytest.raises(IsaSimError) as info:
        accum(use_res=0, use_gate=1)
    assert str(info.value) == "BAD_FIELD: instruction 4: accum.use_gate needs use_res"
    for fields in ({"acc_addr": c - 8}, {"act_addr": a - 8}, {"param_addr": p - 2}):
        accum(**fields)
    accum(use_gate=1, gate_addr=a - 2)
    cases = [
        ({"acc_addr": c - 7}, f"ACC lines {c - 2}..{c}"),
        ({"act_addr": a - 7}, f"ACT lines {a - 2}..{a}"),
        ({"use_gate": 1, "gate_addr": a - 1}, f"gate ACT lines {a}..{a}"),
    ]
    for fields, lines in cases:
        with pytest.raises(IsaSimError) as info:
            accum(**fields)
        limit = a if "ACT" in lines else c
        assert str(info.value) == (
            f"LOCAL_RANGE: instruction 4: {lines} are outside the memory ({limit} lines)"
        )
    with pytest.raises(IsaSimError) as info:
        accum(param_addr=p - 1)
    assert str(info.value) == (
        f"LOCAL_RANGE: instruction 4: PARAM line {p} is outside PARAM ({p} lines)"
    )
    with pytest.raises(IsaSimError) as info:
        accum(use_bias=0, use_res=1, param_addr=p - 1)
    assert str(info.value) == (
        f"LOCAL_RANGE: instruction 4: PARAM line {p} is outside PARAM ({p} lines)"
    )


def _desc_bytes(*args, **kwargs) -> bytes:
    return isa.encode_record(isa.DESCRIPTOR, isa.descriptor(*args, **kwargs)).to_bytes(
        isa.DESC_BYTES, "little"
    )


# (config, DRAM beats of one output line): tiny's 4-byte lines on an 8-byte bus take one beat
# (never zero), 8-byte lines on a 4-byte bus two.
STORE_CONFIGS = [(CONFIGS["tiny"], 1), (AccelConfig(rows=8, cols=8, dram_bytes_per_cycle=4), 2)]


@pytest.mark.parametrize(("cfg", "beats"), STORE_CONFIGS, ids=["tiny", "8x8-bus4"])
@pytest.mark.parametrize(
    ("use_table", "use_bias", "use_res"),
    [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0), (0, 0, 1), (1, 1, 1)],
)
def test_store_walks_its_descriptor_per_the_isa_doc(cfg, beats, use_table, use_bias, use_res):
    """STORE (docs/isa.md): for every descriptor line inside the height/width bounds, out[c] =
    clamp(requant(a, mult[c], shift[c]) + out_zp, clamp_lo, clamp_hi) with a = acc[line][c] +
    bias[c] if use_bias + requant(act[res_addr + line - local_base][c], res_mult[c],
    res_shift[c]) if use_res (wrapped to int32), the PARAM line
    param_addr + i[param_loop], then table[out + 128] with use_table (byte t of the table
    is byte t % (cols*16) of PARAM line table_addr + t // (cols*16)); lines out of bounds are
    not written. A 3 x 5 walk (outer: ACC stride 6, DRAM stride 64, y step 1; inner: ACC
    stride 1, DRAM stride 2 lines, x step 1) from y0=-1, x0=1 in a 2 x 4 box, the PARAM line
    following the outer loop. Cost: one line's beats per line + (table lines + 1 with a
    table) - its descriptor read is the queue scheduler's (isa_queues); ALU operations and
    stored bytes: cols per written line."""
    rng = np.random.default_rng(91 + use_table + 2 * use_bias + 4 * use_res)
    cols, lb = cfg.cols, cfg.out_line_bytes
    old_dram = rng.integers(0, 256, 1 << 13, dtype=np.uint8)  # an 8 KiB DRAM
    machine = Machine(cfg, old_dram.copy())
    # |acc * mult / 2**shift| up to 2**(20 + 31 - 42) = 512: most lanes inside the clamp,
    # some saturated
    machine.acc[:] = rng.integers(-(1 << 20), 1 << 20, machine.acc.shape)
    machine.acc[10, 0] = 0  # requantizes to 0 on any shift: a lane exactly at out_zp
    machine.acc[13, 1] = INT32_MAX - 4  # + its bias 100 wraps to a negative sum
    bias = rng.integers(-(1 << 19), 1 << 19, (3, cols))
    bias[1, 1] = 100
    mult = rng.integers(1 << 29, 1 << 31, (3, cols))
    shift = rng.integers(42, 47, (3, cols))
    param_addr, table_addr, local, base, res_addr = 6, 20, 7, 4096, 300
    # residuals requantized to up to about 2**20, like the accumulators
    res_mult = rng.integers(1 << 14, 1 << 18, (3, cols))
    res_shift = rng.integers(3, 8, (3, cols))
    machine.act[:] = rng.integers(-128, 128, machine.act.shape)
    machine.act[res_addr + 13 - local, 1] = 0  # the wrapping lane below: its residual adds 0
    for r in range(3):
        machine.param["mult"][param_addr + r] = mult[r]
        machine.param["shift"][param_addr + r] = shift[r]
        machine.param["bias"][param_addr + r] = bias[r]  # read only with use_bias
        machine.param["res_mult"][param_addr + r] = res_mult[r]  # and these with use_res
        machine.param["res_shift"][param_addr + r] = res_shift[r]
    machine.param_bytes[:] = rng.integers(0, 256, machine.param_bytes.shape, dtype=np.uint8)
    table = machine.param_bytes[table_addr:].ravel()[:256].view(np.int8).astype(int)
    out_zp, lo, hi = -7, -100, 90
    desc = _desc_bytes(
        "ACC", local, base, [(3, 64, 6, 1, 0), (5, 2 * lb, 1, 0, 1)], y0=-1, x0=1, height=2,
        width=4,
    )  # fmt: skip
    insn = isa.make(
        "store", desc=1, param_addr=param_addr, param_loop=2, clamp_lo=lo, clamp_hi=hi,
        out_zp=out_zp, use_table=use_table, table_addr=table_addr, use_bias=use_bias,
        use_res=use_res, res_addr=res_addr,
    )  # fmt: skip
    cycles = machine.execute(9, insn, [b"\0" * isa.DESC_BYTES, desc])

    want = old_dram.copy()
    written = inside = 0
    for i in range(3):
        for k in range(5):
            y, x = -1 + i, 1 + k
            if not (0 <= y < 2 and 0 <= x < 4):
                continue
            written += 1
            line = local + 6 * i + k
            for c in range(cols):
                a = int(machine.acc[line, c]) + use_bias * int(bias[i, c])
                residual = int(machine.act[res_addr + line - local, c])
                a += use_res * _requant_exact(residual, int(res_mult[i, c]), int(res_shift[i, c]))
                a = (a + 2**31) % 2**32 - 2**31  # the int32 wrap
                q = _requant_exact(a, int(mult[i, c]), int(shift[i, c]))
                v = min(max(q + out_zp, lo), hi)
                inside += lo < q + out_zp < hi
                if use_table:
                    v = table[v + 128]
                want[base + 64 * i + 2 * lb * k + c] = v & 0xFF
    assert written == 6  # y in {0, 1} x x in {1, 2, 3}
    assert inside >= written * cols // 2  # most lanes not saturated
    wrapped = lo if use_bias else hi  # line 13 lane 1: INT32_MAX - 4 (+ 100 wraps negative)
    assert want[base + 64 + 1] == (table[wrapped + 128] if use_table else wrapped) & 0xFF
    np.testing.assert_array_equal(machine.dram, want)
    table_cycles = isa.table_lines(cols) + 1 if use_table else 0
    assert cycles == 15 * beats + table_cycles
    assert machine.stats.alu_ops == written * cols
    assert machine.stats.store_bytes == written * cols
    assert machine.stats.desc_bytes == isa.DESC_BYTES
    machine.execute(9, insn, [b"\0" * isa.DESC_BYTES, desc])  # the counters add up
    assert machine.stats.alu_ops == machine.stats.store_bytes == 2 * written * cols
    assert machine.stats.desc_bytes == 2 * isa.DESC_BYTES


def test_transposing_store_writes_each_block_transposed_per_the_isa_doc():
    """With transpose (docs/isa.md) each innermost run of cols lines is a block B (row r = the
    outputs of line r, zeros for a line out of bounds) and line r is written with column r of
    B - every line, in or out of bounds. Two blocks on the 4x4 array (outer: DRAM stride 96,
    ACC stride 9; inner: 4 lines, DRAM stride 8, x step 1, from x0=-1 in width 4: the first
    line of each block is out of bounds). Cost: a beat per line + cols cycles
    per block to collect it; ALU operations cols per line in bounds, stored bytes cols per
    line written."""
    cfg = CONFIGS["tiny"]
    cols = cfg.cols
    rng = np.random.default_rng(5)
    old_dram = rng.integers(0, 256, 1 << 12, dtype=np.uint8)
    machine = Machine(cfg, old_dram.copy())
    machine.acc[:] = rng.integers(-(1 << 20), 1 << 20, machine.acc.shape)
    mult = rng.integers(1 << 29, 1 << 31, (2, cols))
    shift = rng.integers(42, 47, (2, cols))  # |outputs| up to 512: mostly inside int8
    machine.param["mult"][3:5] = mult
    machine.param["shift"][3:5] = shift
    desc = _desc_bytes("ACC", 2, 1024, [(2, 96, 9, 0, 0), (4, 8, 1, 0, 1)], x0=-1, width=4)
    insn = isa.make(
        "store", desc=0, param_addr=3, param_loop=2, clamp_lo=-128, clamp_hi=127, transpose=1
    )
    cycles = machine.execute(1, insn, [desc])
    want = old_dram.copy()
    for i in range(2):
        block = np.zeros((cols, cols), np.int64)
        for r in range(1, cols):  # line 0 is at x = -1
            for c in range(cols):
                q = _requant_exact(
                    int(machine.acc[2 + 9 * i + r, c]), int(mult[i, c]), int(shift[i, c])
                )
                block[r, c] = min(max(q, -128), 127)
        for r in range(cols):
            address = 1024 + 96 * i + 8 * r
            want[address : address + cols] = block[:, r].astype(np.int8).view(np.uint8)
    np.testing.assert_array_equal(machine.dram, want)
    assert cycles == 8 * 1 + 2 * cols  # (its descriptor read: the scheduler's)
    assert machine.stats.alu_ops == 6 * cols
    assert machine.stats.store_bytes == 8 * cols
    machine.execute(1, insn, [desc])  # the counters add up
    assert (machine.stats.alu_ops, machine.stats.store_bytes) == (12 * cols, 16 * cols)


def test_store_refusals_name_the_field():
    """STORE reads ACC lines through an ACC descriptor only, needs clamp_lo <= clamp_hi, and a
    transposing store's innermost loop must count cols lines (4 on tiny); its every line must
    lie in DRAM, in bounds or not."""
    cfg = CONFIGS["tiny"]

    def store(desc_args, loops, **fields):
        good = dict(desc=0, clamp_lo=-128, clamp_hi=127)
        machine = Machine(cfg, np.zeros(1 << 12, np.uint8))
        return machine.execute(
            2,
            isa.make("store", **(good | fields)),
            [_desc_bytes(*desc_args, loops, x0=-1, width=4)],
        )

    with pytest.raises(IsaSimError) as info:
        store(("ACT", 0, 64), [(4, 4, 1)])
    assert str(info.value) == "BAD_FIELD: instruction 2: store descriptor mem is ACT, must be ACC"
    store(("ACC", 0, 64), [(4, 4, 1)], clamp_lo=5, clamp_hi=5)
    with pytest.raises(IsaSimError) as info:
        store(("ACC", 0, 64), [(4, 4, 1)], clamp_lo=6, clamp_hi=5)
    assert str(info.value) == "BAD_FIELD: instruction 2: store clamp_lo 6 > clamp_hi 5"
    for count in (3, 5):
        with pytest.raises(IsaSimError) as info:
            store(("ACC", 0, 64), [(count, 4, 1)], transpose=1)
        assert str(info.value) == (
            f"BAD_FIELD: instruction 2: transposing store: descriptor loops[3].count is {count}, "
            "must be cols = 4"
        )
    with pytest.raises(IsaSimError) as info:
        store(("ACC", 0, 64), [(4, 4, 1)], desc=1)
    assert str(info.value) == (
        "BAD_DESCRIPTOR: instruction 2: store.desc = 1 but the table has 1 descriptors"
    )
    # use_res: the residual's ACT line res_addr + line - local_base of each line in bounds
    # (x = 0, 1, 2: lines 1..3 of the walk) must lie in ACT
    last = cfg.act_lines - 1
    store(("ACC", 3, 64), [(4, 4, -1, 0, 1)], use_res=1, res_addr=3)  # lines 2..0 -> ACT 2..0
    store(("ACC", 0, 64), [(4, 4, 1, 0, 1)], use_res=1, res_addr=last - 3)  # up to the last
    for local, stride, res_addr, line in ((3, -1, 2, -1), (0, 1, last - 2, last + 1)):
        with pytest.raises(IsaSimError) as info:
            store(("ACC", local, 64), [(4, 4, stride, 0, 1)], use_res=1, res_addr=res_addr)
        assert str(info.value) == (
            f"LOCAL_RANGE: instruction 2: store residual ACT line {line} is outside ACT "
            f"({cfg.act_lines} lines)"
        )
    store(("ACC", 0, 64), [(4, 4, 1, 0, 1)], res_addr=last)  # without use_res: never read
    p = cfg.param_lines
    store(("ACC", 0, 64), [(2, 64, 4), (4, 4, 1, 0, 1)], param_addr=p - 2, param_loop=2)
    with pytest.raises(IsaSimError) as info:  # the second outer step reads PARAM line p
        store(("ACC", 0, 64), [(2, 64, 4), (4, 4, 1, 0, 1)], param_addr=p - 1, param_loop=2)
    assert str(info.value) == (
        f"LOCAL_RANGE: instruction 2: PARAM line {p} is outside PARAM ({p} lines)"
    )
    with pytest.raises(IsaSimError) as info:  # the bias is read first, named the same
        store(("ACC", 0, 64), [(2, 64, 4), (4, 4, 1, 0, 1)], param_addr=p - 1, param_loop=2,
              use_bias=1)  # fmt: skip
    assert info.value.insn_index == 2 and info.value.code is ErrorCode.LOCAL_RANGE
    # the out-of-bounds first line at DRAM -4 is written by a transposing store only
    store(("ACC", 0, -4), [(4, 4, 1)])
    with pytest.raises(IsaSimError) as info:
        store(("ACC", 0, -4), [(4, 4, 1)], transpose=1)
    assert str(info.value) == (
        "DRAM_RANGE: instruction 2: descriptor line 0 at DRAM 0xfffffffc is outside DRAM "
        "(4096 bytes) or not 4-byte aligned"
    )


@pytest.mark.parametrize(("cfg", "beats"), STORE_CONFIGS, ids=["tiny", "8x8-bus4"])
@pytest.mark.parametrize("mem", ["ACT", "WGT"])
def test_load_walks_all_four_loop_levels_per_the_isa_doc(cfg, beats, mem):
    """A descriptor (docs/isa.md) is a 4-level loop nest: line i0..i3 lives at DRAM dram_base +
    sum(i_l * dram_stride_l) (modulo 2**32) and local local_base + sum(i_l * local_stride_l),
    at y = y0 + sum(i_l * ystep_l), x = x0 + sum(i_l * xstep_l); a LOAD writes pad_value to the
    lines outside [0, height) x [0, width) and reads no DRAM for them. Every level here counts
    2 or 3 with its own strides and steps, written as the doc's loops. Cost: dram_latency + the
    line's beats per line read + one cycle per padded line; DRAM bytes and padded lines are
    counted per memory."""
    rng = np.random.default_rng(17)
    lb = cfg.rows  # ACT and WGT lines are rows = cols bytes
    dram = rng.integers(0, 256, 1 << 14, dtype=np.uint8)
    machine = Machine(cfg, dram.copy())
    local = getattr(machine, mem.lower())
    old = rng.integers(-128, 128, local.shape, dtype=np.int8)
    local[:] = old
    counts = (2, 3, 2, 3)
    dram_strides = (-40 * lb, 7 * lb, 64 * lb, lb)
    local_strides = (1, 2, 6, 12)  # line (i0..i3) -> 3 + i0 + 2*i1 + 6*i2 + 12*i3: all distinct
    ysteps, xsteps = (1, 0, -1, 0), (0, 1, 2, -1)
    base, y0, x0, height, width = 60 * lb, 1, -1, 2, 3
    loops = [
        (n, d, s, y, x)
        for n, d, s, y, x in zip(counts, dram_strides, local_strides, ysteps, xsteps, strict=True)
    ]
    desc = _desc_bytes(mem, 3, base, loops, y0=y0, x0=x0, height=height, width=width, pad_value=-77)
    cycles = machine.execute(0, isa.make("load", desc=0), [desc])
    want = old.copy()
    valid = 0
    for i in np.ndindex(*counts):
        line = 3 + sum(a * b for a, b in zip(i, local_strides, strict=True))
        address = (base + sum(a * b for a, b in zip(i, dram_strides, strict=True))) % (1 << 32)
        y = y0 + sum(a * b for a, b in zip(i, ysteps, strict=True))
        x = x0 + sum(a * b for a, b in zip(i, xsteps, strict=True))
        if 0 <= y < height and 0 <= x < width:
            want[line] = dram[address : address + lb].view(np.int8)
            valid += 1
        else:
            want[line] = -77
    assert 0 < valid < 36
    np.testing.assert_array_equal(local, want)
    assert cycles == cfg.dram_latency + valid * beats + (36 - valid)
    assert machine.stats.load_bytes == {mem: valid * lb}
    assert machine.stats.pad_lines == 36 - valid
    machine.execute(0, isa.make("load", desc=0), [desc])  # the counters add up
    assert machine.stats.load_bytes == {mem: 2 * valid * lb}
    assert machine.stats.pad_lines == 2 * (36 - valid)


def test_descriptor_walk_refusals_name_the_line():
    """A LOAD's descriptor (docs/isa.md): every loop count >= 1 (BAD_FIELD naming the level);
    every local line inside its memory, below as above (LOCAL_RANGE naming the walk's line
    number and the local line); every line read inside DRAM and aligned to min(line bytes,
    bus bytes) (DRAM_RANGE). On tiny (4-byte ACT lines, 8-byte bus, so 4-byte alignment) with
    a 4 KiB DRAM: the last whole line is at 4092, a padded line is never read."""
    cfg = CONFIGS["tiny"]
    a = cfg.act_lines

    def load(local, dram, loops, **kwargs):
        machine = Machine(cfg, np.zeros(4096, np.uint8))
        return machine.execute(
            3, isa.make("load", desc=0), [_desc_bytes("ACT", local, dram, loops, **kwargs)]
        )

    for level in range(4):
        loops = [(2, 4, 1)] * 4
        loops[level] = (0, 4, 1)
        with pytest.raises(IsaSimError) as info:
            load(0, 0, loops)
        assert str(info.value) == f"BAD_FIELD: instruction 3: descriptor loops[{level}].count is 0"
    load(a - 3, 0, [(3, 4, 1)])  # lines a-3 .. a-1
    with pytest.raises(IsaSimError) as info:
        load(a - 2, 0, [(3, 4, 1)])
    assert str(info.value) == (
        f"LOCAL_RANGE: instruction 3: descriptor line 2 addresses ACT line {a}, memory has {a} "
        "lines"
    )
    with pytest.raises(IsaSimError) as info:
        load(2, 0, [(4, 4, -1)])
    assert str(info.value) == (
        f"LOCAL_RANGE: instruction 3: descriptor line 3 addresses ACT line -1, memory has {a} lines"
    )
    load(0, 4084, [(3, 4, 1)])  # DRAM 4084..4095
    for base, line, address in ((4088, 2, 4096), (4086, 0, 4086), (-4, 0, (1 << 32) - 4)):
        with pytest.raises(IsaSimError) as info:
            load(0, base, [(3, 4, 1)])
        assert str(info.value) == (
            f"DRAM_RANGE: instruction 3: descriptor line {line} at DRAM 0x{address:x} is outside "
            "DRAM (4096 bytes) or not 4-byte aligned"
        )
    # a padded line (x = -1 outside width 3) is not read, wherever it points
    load(0, -4, [(3, 4, 1, 0, 1)], x0=-1, width=3)
    # 16-byte lines on an 8-byte bus align to the bus: 8 runs, 12 does not
    wide = AccelConfig(rows=16, cols=16, dram_bytes_per_cycle=8)
    desc = _desc_bytes("ACT", 0, 8, [(2, 16, 1)])
    Machine(wide, np.zeros(4096, np.uint8)).execute(0, isa.make("load", desc=0), [desc])
    with pytest.raises(IsaSimError) as info:
        desc = _desc_bytes("ACT", 0, 12, [(2, 16, 1)])
        Machine(wide, np.zeros(4096, np.uint8)).execute(0, isa.make("load", desc=0), [desc])
    assert str(info.value) == (
        "DRAM_RANGE: instruction 0: descriptor line 0 at DRAM 0xc is outside DRAM (4096 bytes) "
        "or not 8-byte aligned"
    )


def test_param_load_decodes_every_entry_field_per_the_isa_doc():
    """A PARAM line is cols entries of 16 bytes (docs/isa.md param_entry: bias s32 at byte 0,
    mult s32 at 4, res_mult s32 at 8, shift u8 at 12, res_shift u8 at 13, 2 reserved). Three
    lines of random entries loaded to PARAM line 5 (a 64-byte line on tiny's 8-byte bus: 8
    beats each) decode field by field, with the raw bytes kept for tables. A LOAD into ACC is
    refused, and a descriptor number past the table names both."""
    cfg = CONFIGS["tiny"]
    rng = np.random.default_rng(29)
    n = 3 * cfg.cols
    raw = rng.integers(0, 256, (n, 16), dtype=np.uint8)
    dram = np.zeros(4096, np.uint8)
    dram[256 : 256 + raw.size] = raw.ravel()
    machine = Machine(cfg, dram)
    desc = _desc_bytes("PARAM", 5, 256, [(3, 64, 1)])
    cycles = machine.execute(0, isa.make("load", desc=0), [desc])
    as_int = [int.from_bytes(e.tobytes(), "little") for e in raw]
    fields = {"bias": (0, 32, True), "mult": (32, 32, True), "res_mult": (64, 32, True),
              "shift": (96, 8, False), "res_shift": (104, 8, False)}  # fmt: skip
    for name, (lo, bits, signed) in fields.items():
        values = [(v >> lo) & ((1 << bits) - 1) for v in as_int]
        if signed:
            values = [v - (1 << bits) if v >> (bits - 1) else v for v in values]
        want = np.array(values).reshape(3, cfg.cols)
        np.testing.assert_array_equal(machine.param[name][5:8], want, err_msg=name)
        assert not machine.param[name][:5].any() and not machine.param[name][8:].any()
    np.testing.assert_array_equal(machine.param_bytes[5:8], raw.reshape(3, 64))
    assert cycles == cfg.dram_latency + 3 * 8
    assert machine.stats.load_bytes == {"PARAM": 3 * 64}
    with pytest.raises(IsaSimError) as info:
        machine.execute(4, isa.make("load", desc=0), [_desc_bytes("ACC", 0, 256, [(1, 4, 1)])])
    assert str(info.value) == "BAD_FIELD: instruction 4: load descriptor targets ACC (stores only)"
    with pytest.raises(IsaSimError) as info:
        machine.execute(4, isa.make("load", desc=2), [desc, desc])
    assert str(info.value) == (
        "BAD_DESCRIPTOR: instruction 4: load.desc = 2 but the table has 2 descriptors"
    )


def test_ideal_timeline_and_perf_record_per_the_isa_doc():
    """The ideal model: a queue runs its instructions in order, each starting when its queue
    is free and the tokens it pops were pushed (a token carries its producer's finish time);
    SYNC takes 1 cycle, PERF a 128-byte record's beats (16 on tiny's 8-byte bus). By hand:
      0 LOAD    sync +push_next           0..1   token L->C at 1
      1 LOAD    sync +push_next           1..2   token L->C at 2
      2 COMPUTE sync +pop_prev +push_next 1..2   token C->S at 2
      3 COMPUTE sync +pop_prev +push_next 2..3   token C->S at 3
      4 STORE   sync +pop_prev            2..3
      5 STORE   perf +pop_prev            3..19
    The record (docs/isa.md perf_record) holds the tag, the PERF's start cycle (3), the 5
    instructions retired before it, the DRAM bytes read so far (7 instruction words: 112) and
    written (0); ideal_cycles is the last finish, busy the cycles per queue."""
    program = (
        "sync queue=LOAD +push_next\n" * 2
        + "sync queue=COMPUTE +pop_prev +push_next\n" * 2
        + "sync queue=STORE +pop_prev\nperf tag=0x1234567 dram_addr=0x2080 +pop_prev\nend"
    )
    machine = run_text(program)
    record = isa.decode_record(
        isa.PERF_RECORD, int.from_bytes(machine.dram[0x2080 : 0x2080 + 128].tobytes(), "little")
    )
    want = dict.fromkeys(record, 0) | {
        "tag": 0x1234567, "cycles": 3, "insns_retired": 5, "dram_read_bytes": 112,
    }  # fmt: skip
    assert record == want
    assert not machine.dram[0x2000:0x2080].any() and not machine.dram[0x2100:0x2180].any()
    stats = machine.stats
    assert stats.ideal_cycles == 19
    assert stats.busy == {"LOAD": 2, "COMPUTE": 2, "STORE": 17}
    assert stats.store_bytes == 128 and stats.fetch_bytes == 112
    assert dict(stats.insns) == {"sync": 5, "perf": 1}
    end = CONFIGS["tiny"].dram_bytes
    for address in (0x2040, end):  # misaligned; aligned but past the end
        with pytest.raises(IsaSimError) as info:
            run_text(f"perf dram_addr={address}\nend")
        assert str(info.value) == (
            f"DRAM_RANGE: instruction 0: perf.dram_addr 0x{address:x} is not 128-byte aligned "
            "or outside DRAM"
        )
    run_text(f"perf dram_addr={end - 128}\nend")  # the last record that fits
    two = run_text("perf dram_addr=0x2000\nperf dram_addr=0x2080\nend")
    assert two.stats.store_bytes == 2 * 128  # records count as bytes written


def test_launch_checks_and_dram_shape_are_refused_with_the_numbers():
    """What the RTL checks when started (docs/isa.md): a 16-byte aligned program, a 64-byte
    aligned descriptor table inside DRAM (its last byte may be DRAM's last); else DRAM_RANGE at
    instruction 0. The simulator's DRAM is one flat uint8 array."""
    cfg = CONFIGS["tiny"]
    dram = np.zeros(4096, np.uint8)
    dram[:16] = np.frombuffer(isa.make("end").encode().to_bytes(16, "little"), np.uint8)
    dram[32:48] = dram[:16]
    Machine(cfg, dram.copy()).run(Launch(32, 4096 - 3 * 64, 3))  # the table ends at DRAM's end
    cases = [
        (Launch(8, 0, 0), "insn_base 0x8 is not 16-byte aligned"),
        (Launch(0, 32, 1), "descriptor table 0x20+1x64 bytes is misaligned or outside DRAM "
                           "(4096 bytes)"),
        (Launch(0, 4096 - 2 * 64, 3), "descriptor table 0xf80+3x64 bytes is misaligned or "
                                      "outside DRAM (4096 bytes)"),
    ]  # fmt: skip
    for launch, message in cases:
        with pytest.raises(IsaSimError) as info:
            Machine(cfg, dram.copy()).run(launch)
        assert str(info.value) == f"DRAM_RANGE: instruction 0: {message}"
    machine = Machine(cfg, dram.copy())
    stats = machine.run(Launch(0, 64, 2))
    assert stats.fetch_bytes == 16 and stats.desc_bytes == 0  # END reads no descriptor
    for bad in (np.zeros(64, np.int8), np.zeros((8, 8), np.uint8)):
        with pytest.raises(ValueError) as info:
            Machine(cfg, bad)
        assert str(info.value) == f"DRAM must be a 1-D uint8 array, not {bad.dtype} {bad.shape}"
    fresh = Machine(cfg)
    assert fresh.dram.shape == (cfg.dram_bytes,) and fresh.dram.dtype == np.uint8
    assert fresh.act.shape == (cfg.act_lines, cfg.rows) and fresh.act.dtype == np.int8
    assert fresh.wgt.shape == (cfg.wgt_lines, cfg.cols) and fresh.wgt.dtype == np.int8
    assert fresh.acc.shape == (cfg.acc_lines, cfg.cols) and fresh.acc.dtype == np.int32
    assert fresh.param_bytes.shape == (cfg.param_lines, cfg.cols * 16)
    assert sorted(fresh.param) == ["bias", "mult", "res_mult", "res_shift", "reserved", "shift"]
    for values in fresh.param.values():
        assert values.shape == (cfg.param_lines, cfg.cols) and values.dtype == np.int64
    assert not any(a.any() for a in (fresh.act, fresh.wgt, fresh.acc, fresh.param_bytes))
    assert fresh.counters == {} and fresh.stats == Stats()


def test_decode_errors_stop_at_their_instruction_with_the_decoders_words():
    """Instructions are decoded as dispatch reaches them: an unknown opcode is ILLEGAL_OPCODE,
    an enum field outside its values (SYNC's 2-bit queue = 3) BAD_FIELD, each at its index with
    the decoder's own message; an END in DRAM's last 16 bytes still runs."""
    cfg = CONFIGS["tiny"]
    sync = isa.make("sync", queue="LOAD").encode()
    queue = isa.FORMATS[isa.Opcode.SYNC].leaf_by_path["queue"]
    bad_queue = sync | (3 << queue.offset)
    for word, code in ((bad_queue, ErrorCode.BAD_FIELD), (0x0C, ErrorCode.ILLEGAL_OPCODE)):
        dram = np.zeros(4096, np.uint8)
        words = [sync, sync, word, isa.make("end").encode()]
        dram[: 16 * 4] = np.frombuffer(b"".join(w.to_bytes(16, "little") for w in words), np.uint8)
        with pytest.raises(isa.IsaError) as decoded:
            isa.decode_insn(word)
        machine = Machine(cfg, dram)
        with pytest.raises(IsaSimError) as info:
            machine.run(Launch(0, 0, 0))
        assert str(info.value) == f"{code.name}: instruction 2: {decoded.value}"
        assert info.value.code is code and info.value.insn_index == 2
        assert machine.stats.fetch_bytes == 2 * 16  # the bad word is not counted
    dram = np.zeros(4096, np.uint8)
    dram[-16:] = np.frombuffer(isa.make("end").encode().to_bytes(16, "little"), np.uint8)
    assert Machine(cfg, dram).run(Launch(4096 - 16, 0, 0)).fetch_bytes == 16


def test_shifts_up_to_62_run_and_larger_ones_name_the_field_and_line():
    """docs/isa.md: shift and res_shift must be in 0..62; a larger one stops the instruction
    that reads it with BAD_FIELD naming the field, the largest value and the first PARAM line
    read. A shift of 62 runs (round half up of x * mult / 2**62)."""
    cfg = CONFIGS["tiny"]
    machine = Machine(cfg)
    machine.act[0] = [1, -1, 100, -100]
    # 1 * 2**30 / 2**31 = 0.5 -> 1 and -0.5 -> 0 (half up); 100 * (2**31 - 1) / 2**31 -> 100
    machine.param["res_mult"][7] = [1 << 30, 1 << 30, (1 << 31) - 1, -(1 << 31)]
    machine.param["res_shift"][7] = [31, 31, 31, 62]
    accum = isa.make("accum", m=1, n_iter=1, param_addr=7, use_res=1)
    machine.execute(1, accum, [])
    want = [_requant_exact(x, mult, sh) for x, mult, sh in zip(
        [1, -1, 100, -100], [1 << 30, 1 << 30, (1 << 31) - 1, -(1 << 31)], [31, 31, 31, 62],
        strict=True,
    )]  # fmt: skip
    np.testing.assert_array_equal(machine.acc[0], want)
    assert want == [1, 0, 100, 0]
    machine.param["res_shift"][7, 2] = 63
    machine.param["res_shift"][7, 3] = 70
    with pytest.raises(IsaSimError) as info:
        machine.execute(1, accum, [])
    assert str(info.value) == (
        "BAD_FIELD: instruction 1: PARAM res_shift = 70 exceeds 62 (line 7...)"
    )
    # STORE's residual (use_res) reads res_shift too, and names the STORE.
    store = isa.make("store", desc=0, clamp_lo=-128, clamp_hi=127, param_addr=7, use_res=1)
    descs = [_desc_bytes("ACC", 0, 64, [(2, 4, 1)])]
    machine = Machine(cfg, np.zeros(1 << 12, np.uint8))
    machine.execute(3, store, descs)  # res_shift 0 runs
    machine.param["res_shift"][7, 1] = 63
    with pytest.raises(IsaSimError) as info:
        machine.execute(3, store, descs)
    assert str(info.value) == (
        "BAD_FIELD: instruction 3: PARAM res_shift = 63 exceeds 62 (line 7...)"
    )


def test_requantize_and_wrap32_compute_in_64_bits_whatever_the_input_type():
    """requantize works in int64 whatever its inputs' types: int32 2**30 * 4 + 1 >> 1 is 2**31,
    beyond int32. wrap32 wraps any integer-valued array (the float64 GEMM products too) modulo
    2**32: 2**31 + 5 -> -2**31 + 5, -2**31 - 1 -> 2**31 - 1."""
    from sim.backends.isa_machine import requantize, wrap32

    got = requantize(
        np.array([1 << 30], np.int32), np.array([4], np.int32), np.array([1], np.int32)
    )
    assert got.dtype == np.int64 and got.tolist() == [1 << 31]
    for values in (np.array([2.0**31 + 5, -(2.0**31) - 1]), [(1 << 31) + 5, -(1 << 31) - 1]):
        got = wrap32(values)
        assert got.dtype == np.int32 and got.tolist() == [-(1 << 31) + 5, (1 << 31) - 1]


def test_every_token_flag_without_a_neighbour_queue_is_bad_field():
    """LOAD has no previous queue and STORE no next one; END runs in no queue: a token flag
    there is BAD_FIELD at dispatch, naming the instruction, its queue and the flag."""
    cases = [
        ("sync queue=LOAD +push_prev", "sync in the LOAD queue has push_prev set, but that "
         "queue has no prev queue"),
        ("sync queue=LOAD +pop_prev", "sync in the LOAD queue has pop_prev set, but that "
         "queue has no prev queue"),
        ("sync queue=STORE +push_next", "sync in the STORE queue has push_next set, but that "
         "queue has no next queue"),
        ("sync queue=STORE +pop_next", "sync in the STORE queue has pop_next set, but that "
         "queue has no next queue"),
        ("end +push_next", "end has push_next set, but it runs in no queue and carries no "
         "tokens"),
    ]  # fmt: skip
    for line, message in cases:
        with pytest.raises(IsaSimError) as info:
            run_text(f"sync queue=COMPUTE\n{line}\nend")
        assert str(info.value) == f"BAD_FIELD: instruction 1: {message}"


# --------------------------------------------------------------------------- CONV


def test_conv_isa_simulator_matches_reference_ops():
    """The ISA simulator alone (no RTL), over more cases than the RTL test runs."""
    outputs = []
    for name, config in CONFIGS.items():
        programs, expected = conv_cases(config, seed=3, count=36)
        for case, builder in programs.items():
            machine = builder.run_isa()
            e = expected[case]
            assert machine.stats.macs == e.macs, f"{name} {case}"
            got = machine.dram[e.out : e.out + e.want.size].view(np.int8).reshape(e.want.shape)
            np.testing.assert_array_equal(got, e.want, err_msg=f"{name} {case}")
            outputs.append(e.want.ravel())
    # The cases test something: outputs spread over int8, few saturated.
    every = np.concatenate(outputs)
    assert np.mean((every == -128) | (every == 127)) < 0.05
    assert every.std() > 20


def test_bad_conv_on_the_isa_simulator():
    for name, config in CONFIGS.items():
        assert_isa_stops(bad_conv_programs(config), name)

"""Convolutions on input tiles loaded once (CONV, ``Tiling.input_reuse``) against the same layers
on im2col lines, on the ISA simulator.

Each one-conv network is compiled twice: as the tile pass chooses (CONV on input tiles) and with
input reuse switched off (GEMMs on im2col lines, one copy of the input per kernel tap). Both must
be bit-exact against the integer reference; the CONV layer must read its input from DRAM about
once per n group (its tiles' halo rows and pad columns aside), where im2col reads it about once
per tap; and it must not be slower. Kernels 3x3 (stride 1 and 2), 5x5, 1x3 and 7x7 (stride 2),
channel counts that need several channel blocks, on the tiny and default configs.
"""

from __future__ import annotations

import numpy as np
import pytest

from arch import isa
from arch.config import PRESETS
from compiler.compile import compile_graph
from compiler.export import to_executable
from compiler.frontend import compile_front
from compiler.passes import tile
from sim.runtime.run import run
from zoo._graph import GraphBuilder

CASES = [  # (kernel (kh, kw), stride, pads (t, l, b, r), in channels, out channels, image)
    ((3, 3), 1, (1, 1, 1, 1), 48, 32, 12),
    ((3, 3), 2, (1, 1, 1, 1), 32, 32, 13),
    ((5, 5), 1, (2, 2, 2, 2), 32, 16, 10),
    ((1, 3), 1, (0, 1, 0, 1), 32, 32, 9),
    ((7, 7), 2, (3, 3, 3, 3), 16, 32, 16),
]


def _conv_net(kernel, stride, pads, cin, cout, size):
    g = GraphBuilder(seed=sum(kernel) + stride + cin)
    w = g.param("conv.w", g.he_normal((cout, cin, *kernel), cin * kernel[0] * kernel[1]))
    b = g.param("conv.b", g.fan_in_uniform(cout, cin))
    y = g.node(
        "Conv", "conv", ["x", w, b], kernel_shape=list(kernel), strides=[stride] * 2, pads=pads
    )
    y = g.relu("relu", y)
    out_h = (size + pads[0] + pads[2] - kernel[0]) // stride + 1
    out_w = (size + pads[1] + pads[3] - kernel[1]) // stride + 1
    model = g.model(
        "conv", {"x": [1, cin, size, size]}, {y: [1, cout, out_h, out_w]}, "one convolution"
    )
    return compile_front(model, seed=3)


def _compile_and_run(graph, config):
    (plan,) = compile_graph(graph, config)
    x = np.random.default_rng(11).standard_normal(graph.tensors["x"].shape).astype(np.float32)
    result = run(to_executable(plan, "conv"), x, "isa")
    layer = next(la for la in result.layers if la.name == "conv")
    return plan.accel_layers()[0], layer, result.bit_exact


@pytest.mark.parametrize("config_name", ["tiny", "default"])
@pytest.mark.parametrize(("kernel", "stride", "pads", "cin", "cout", "size"), CASES)
def test_conv_reads_its_input_once_per_n_group_and_is_bit_exact(
    monkeypatch, config_name, kernel, stride, pads, cin, cout, size
):
    config = PRESETS[config_name]
    graph = _conv_net(kernel, stride, pads, cin, cout, size)
    reuse_plan, reuse, reuse_exact = _compile_and_run(graph, config)
    monkeypatch.setattr(tile, "input_reuse_fits", lambda layer: False)
    im2col_plan, im2col, im2col_exact = _compile_and_run(graph, config)

    assert reuse_exact and im2col_exact
    assert reuse_plan.tiling.input_reuse == 1 and im2col_plan.tiling.input_reuse == 0
    assert any(op.opcode is isa.Opcode.CONV for op in reuse_plan.ops)
    assert not any(op.opcode is isa.Opcode.CONV for op in im2col_plan.ops)
    # DRAM reads beside the activations: weights (the first step's again, in ramp order),
    # parameters, instructions and descriptors
    weights = cin * cout * kernel[0] * kernel[1]
    taps = kernel[0] * kernel[1]
    dim = config.rows
    pad_cin = -(-cin // dim) * dim
    out_h = (size + pads[0] + pads[2] - kernel[0]) // stride + 1
    out_w = (size + pads[1] + pads[3] - kernel[1]) // stride + 1

    def n_groups(plan):
        blocks = -(-cout // dim)
        return -(-blocks // plan.tiling.n_blocks)

    rows = reuse_plan.tiling.rows_per_tile
    m_tiles = -(-out_h // rows)
    # one input tile per m tile and n group: its rows (halo included) x its columns, all channels
    tile_bytes = ((rows - 1) * stride + kernel[0]) * ((out_w - 1) * stride + kernel[1]) * pad_cin
    activations = n_groups(reuse_plan) * m_tiles * tile_bytes
    assert reuse.dram_read_bytes <= activations + 2 * weights + 64 * 1024, reuse
    # im2col reads the input about once per tap (less the padding) and n group
    per_group = taps / 2 * out_h * out_w * pad_cin
    assert im2col.dram_read_bytes - weights >= n_groups(im2col_plan) * per_group
    assert (reuse.dram_read_bytes - weights) / n_groups(reuse_plan) < (
        im2col.dram_read_bytes - weights
    ) / n_groups(im2col_plan)
    assert reuse.cycles <= im2col.cycles * 1.02, (reuse.cycles, im2col.cycles)

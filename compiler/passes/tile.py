"""tile: choose how each accelerator layer is cut to fit the on-chip memories.

A GEMM layer is walked as n groups (``n_blocks`` output-channel blocks) x m tiles
(``rows_per_tile`` output rows) x k groups (``k_group`` chunks of ``dim`` reduction values).
Every resource is double-buffered - ACT, WGT by schedule step, ACC by m tile - and PARAM has four
slots (see schedule), so loads of the next step and the store of the previous tile run under the
current GEMM. A convolution's activations are either im2col lines (one copy of the input per
kernel tap) or, where the CONV instruction fits (``input_reuse``), each channel block's input
tile loaded once with its halo, a k group then being whole channel blocks x all taps. Among the
tilings that fit, those estimated within TRAFFIC_SLACK of the fewest cycles compete on DRAM
traffic: the least wins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from arch import isa
from arch.config import AccelConfig
from arch.isa import dwconv_cycles
from compiler.constants import mask_row_bytes
from compiler.errors import CompileError, Unplaceable
from compiler.passes import ramp
from compiler.passes.window_pool import window_pool_shape
from compiler.plan import Layer, Plan, Tiling, ceil_div

MAX_M = (1 << 12) - 1  # GEMM/ACCUM/POOL `m` field
MAX_ITER = (1 << 10) - 1  # k_iter / n_iter fields
MAX_WINDOW = (1 << 8) - 1  # POOL `window` field
GEMM_OVERHEAD = 40  # cycles to start and drain one GEMM instruction
# A GEMM layer takes the tiling with the least DRAM traffic among those estimated within this
# fraction of the fewest cycles: at (nearly) equal speed, the one that leaves DRAM bandwidth
# spare. ResNet-50 224: 1% costs 0.1% of cycles at 16 B/cycle and reads 7% less DRAM than 0.5%.
TRAFFIC_SLACK = 0.01
PARAM_SLOTS = 4
RESIDUAL_SLOTS = 4  # a residual tile lives until its STORE: ACT slots by tile, as PARAM's
MAX_DW_OUT = isa.DWCONV.leaf_by_path["out_w"].hi  # DWCONV out_w / out_h fields
MAX_PITCH = isa.DWCONV.leaf_by_path["pitch"].hi


def uses_table(layer: Layer) -> bool:
    """Whether the layer's STORE maps its outputs through a lookup table."""
    return layer.node.attrs.get("act") == "table"


def table_line(config: AccelConfig) -> int:
    """The first PARAM line of a layer's table: the table takes the last lines of PARAM."""
    return config.param_lines - isa.table_lines(config.cols)


def param_slot_lines(config: AccelConfig, layer: Layer) -> int:
    """PARAM lines of each of the PARAM_SLOTS slots, below the table if the layer has one."""
    usable = table_line(config) if uses_table(layer) else config.param_lines
    return usable // PARAM_SLOTS


class Budget:
    def __init__(self, plan: Plan, layer: Layer) -> None:
        c = plan.config
        self.dim = c.rows
        self.act = c.act_lines // 2
        self.wgt_tiles = c.wgt_lines // 2 // c.rows
        self.wgt_lines = c.wgt_lines // 2
        self.acc = c.acc_lines // 2
        self.param = param_slot_lines(c, layer)
        self.lines_per_cycle = c.dram_bytes_per_cycle / c.act_line_bytes
        self.latency = c.dram_latency
        self.config = c


def input_reuse_fits(layer: Layer) -> bool:
    """A convolution the CONV instruction can walk on its input tile: a dense (not depthwise)
    kernel of more than one tap, no dilation, the same stride in y and x, within CONV's
    fields."""
    shape = layer.gemm
    if layer.kind != "gemm" or shape is None or shape.depthwise:
        return False
    (kh, kw), (sh, sw) = shape.kernel, shape.stride
    return (
        kh * kw > 1
        and shape.dilation == (1, 1)
        and sh == sw <= isa.CONV_STRIDE_MAX
        and max(kh, kw) <= isa.CONV_KERNEL_MAX
    )


def input_tile_lines(layer: Layer, rows: int) -> int:
    """ACT lines of one channel block's input tile for ``rows`` output rows (halo included)."""
    shape = layer.gemm
    assert shape is not None
    (kh, kw), stride = shape.kernel, shape.stride[0]
    return isa.window_span(rows, kh, stride) * isa.window_span(shape.out_w, kw, stride)


def _gemm_tiling(layer: Layer, budget: Budget, transposed: bool = False) -> Tiling:
    """The tiling with the least DRAM traffic among those within TRAFFIC_SLACK of the fewest
    estimated cycles, on im2col lines or (where CONV fits, :func:`input_reuse_fits`) on input
    tiles loaded once."""
    fitting = list(_walk_tilings(layer, budget, transposed, reuse=False))
    if input_reuse_fits(layer) and not transposed:
        fitting += _walk_tilings(layer, budget, transposed, reuse=True)
    if not fitting:
        shape = layer.gemm
        assert shape is not None
        raise Unplaceable(
            layer.name,
            layer.node.op,
            f"no tiling fits: one output row is {shape.out_w} pixels, ACC half holds {budget.acc} "
            f"lines, ACT half {budget.act}",
        )
    fewest = min(t.estimate for t, _traffic in fitting)
    near = [(traffic, t.estimate, i) for i, (t, traffic) in enumerate(fitting)]
    near = [key for key in near if key[1] <= fewest * (1 + TRAFFIC_SLACK)]
    return fitting[min(near)[2]][0]


def _walk_tilings(
    layer: Layer, budget: Budget, transposed: bool, reuse: bool
) -> Iterator[tuple[Tiling, float]]:
    """Each tiling of one walk that fits, with its DRAM traffic in lines. A step's k group is
    a number of k units: a chunk of ``mt`` im2col lines, or (``reuse``) a channel block: its
    input tile and all kernel taps.

    ``transposed``: the output is stored transposed (tokens_t), in runs of ``dim`` token
    rows that must not straddle m tiles (rows per tile a multiple of ``dim``, or all rows),
    and the last block's last run reads up to a run past its lines (inside the ACC half).
    A batch_matmul of ``groups``: each m tile within one group of rows (its own weights)."""
    shape = layer.gemm
    assert shape is not None
    dim = budget.dim
    chunks, blocks = shape.chunks(dim), shape.out_channels // dim
    taps = shape.kernel[0] * shape.kernel[1] if reuse else 1  # chunks per k unit
    units = chunks // taps
    residual = layer.kind == "gemm" and len(layer.inputs) > 1
    for rows in range(1, shape.out_h + 1):
        mt = rows * shape.out_w
        if mt > MAX_M or mt > budget.acc:
            break
        if transposed and rows % dim and rows < shape.out_h:
            continue
        if shape.groups > 1 and (shape.out_h // shape.groups) % rows:  # tiles within groups
            continue
        unit_lines = input_tile_lines(layer, rows) if reuse else mt  # ACT lines of a k unit
        m_tiles = ceil_div(shape.out_h, rows)
        run_tail = -mt % dim if transposed else 0
        most = min(blocks, budget.param, (budget.acc - run_tail) // mt, MAX_ITER)
        for nb in range(1, most + 1):
            res_lines = nb * mt if residual else 0  # each step half gives up two residual slots
            act_half = budget.act - RESIDUAL_SLOTS // 2 * res_lines
            ku = min(units, budget.wgt_tiles // (nb * taps), act_half // unit_lines, MAX_ITER)
            if ku < 1:
                continue  # pragma: no mutate - ku never rises with nb: `break` is the same
            groups = ceil_div(units, ku)
            ku = ceil_div(units, groups)  # the first groups' size; the last may be smaller
            kg = ku * taps
            mean = units / groups * taps  # chunks of the mean k group (a step's time)
            n_groups = ceil_div(blocks, nb)
            compute = mean * nb * max(mt, 2 * dim + 1) + GEMM_OVERHEAD
            # A step's loads: its activations, the tile's residual spread over its steps, and
            # its weights - unless the WGT half still holds them from two steps back (one or
            # two k groups: all but an n group's first two steps).
            lpc = budget.lines_per_cycle
            act_load = (units / groups * unit_lines + res_lines / groups) / lpc + budget.latency
            step = max(compute, act_load + mean * nb * dim / lpc)
            kept = max(compute, act_load) if groups <= 2 else step
            # The layer's first step waits for its loads, in ramp parts (compiler.passes.ramp).
            sizes = ramp.parts(ku, budget.config) if layer.kind != "matmul" else [ku]
            unit_load = (unit_lines + taps * nb * dim) / budget.lines_per_cycle
            unit_compute = taps * nb * max(mt, 2 * dim + 1)
            first = ramp.first_step_cycles(
                sizes, unit_load, unit_compute, budget.latency, GEMM_OVERHEAD
            )
            per_group = m_tiles * groups  # steps of an n group
            loading = min(per_group, 2 if groups <= 2 else per_group)
            body = n_groups * (loading * step + (per_group - loading) * kept)
            act_lines: float = n_groups * m_tiles * units * unit_lines
            if per_group <= 2 and n_groups * per_group > 2:
                # Every n group walks the same one or two steps' activations: the ACT halves
                # keep them, and the steps after the layer's first two load only weights.
                weights_only = (res_lines / groups + mean * nb * dim) / lpc + budget.latency
                body = 2 * step + (n_groups * per_group - 2) * max(compute, weights_only)
                act_lines = 2 * units / groups * unit_lines
            total = body + first - step + mt * nb
            traffic = act_lines + n_groups * (m_tiles * res_lines + loading * mean * nb * dim)
            yield Tiling(rows, nb, kg, int(total), int(reuse)), traffic


def _dw_tiling(layer: Layer, budget: Budget) -> Tiling:
    """A depthwise layer: ``rows_per_tile`` output rows x ``n_blocks`` channel blocks per step,
    the step's input rows (halo included) in ACT, one DWCONV per block and pass."""
    shape = layer.gemm
    assert shape is not None
    blocks, taps = shape.out_channels // budget.dim, shape.kernel[0] * shape.kernel[1]
    passes = shape.dw_passes()
    s = shape.stride[0]  # pragma: no mutate - layout refuses unequal depthwise strides
    if shape.out_w > MAX_DW_OUT:
        raise Unplaceable(
            layer.name, layer.node.op, f"output width {shape.out_w} exceeds {MAX_DW_OUT}"
        )
    residual = len(layer.inputs) > 1
    best: Tiling | None = None
    for rows in range(1, min(shape.out_h, MAX_DW_OUT) + 1):
        mt = rows * shape.out_w
        in_rows, in_cols = shape.dw_input(rows)
        lines = in_rows * in_cols
        if in_cols > MAX_PITCH:  # pragma: no mutate - more lines than any ACT half (<= 32768)
            break
        if mt > budget.acc or lines > budget.act:  # past these `most` is 0: this only stops early
            break
        per_block = sum(
            dwconv_cycles(shape.out_w, rows, kh, kw, s) for _i0, kh, _j0, kw in passes
        ) + (mt if residual else 0)
        most = min(
            blocks,  # pragma: no mutate - more blocks than the layer has would only cost more
            budget.act // (lines + (mt if residual else 0)),
            budget.acc // mt,
            budget.wgt_lines // taps,
            budget.param,
        )
        for nb in range(1, most + 1):
            compute = nb * per_block
            load = nb * (lines + taps + (mt if residual else 0)) / budget.lines_per_cycle
            step = max(compute, load + budget.latency, nb * mt / budget.lines_per_cycle)
            steps = ceil_div(shape.out_h, rows) * ceil_div(blocks, nb)
            total = steps * step + load + budget.latency
            if best is None or total < best.estimate:
                best = Tiling(rows, nb, taps, int(total))
    if best is None:
        in_rows, in_cols = shape.dw_input(1)
        raise Unplaceable(
            layer.name,
            layer.node.op,
            f"no tiling fits: one output row reads {in_cols} x {in_rows} input pixels, ACT "
            f"half holds {budget.act} lines, ACC half {budget.acc}",
        )
    return best


def _pool_tiling(layer: Layer, plan: Plan, budget: Budget) -> Tiling:
    node = layer.node
    src, out = plan.tensor(layer.inputs[0]), plan.tensors[layer.output]
    kernel = node.attrs.get("kernel", (src.h, src.w))
    window = kernel[0] * kernel[1]
    if window > MAX_WINDOW and out.h * out.w > 1:
        # A global pool (one output pixel) is reduced in chunks; other pools must fit the field.
        raise Unplaceable(node.name, node.op, f"window of {window} pixels exceeds {MAX_WINDOW}")
    blocks = out.channels // budget.dim
    best: Tiling | None = None
    # A global pool (one output pixel) whose window is larger than an ACT half is reduced in
    # parts of its kernel rows (schedule), one channel block at a time.
    whole = out.h * out.w > 1 or window <= budget.act
    if kernel[1] > budget.act:
        raise Unplaceable(node.name, node.op, f"a window row of {kernel[1]} pixels exceeds ACT")
    for rows in range(1, out.h + 1):
        mt = rows * out.w
        if mt > MAX_M or (whole and mt * window > budget.act) or mt > budget.acc:
            break
        fit = budget.act // (mt * window) if whole else 1
        kg = min(blocks, fit, budget.acc // mt, budget.param, MAX_ITER)
        steps = ceil_div(out.h, rows) * ceil_div(blocks, kg)
        total = steps * max(
            mt * window * kg, mt * window * kg / budget.lines_per_cycle + budget.latency
        )
        if best is None or total < best.estimate:
            best = Tiling(rows, kg, kg, int(total))
    if best is None:
        raise Unplaceable(node.name, node.op, "no tiling fits the ACT/ACC memories")
    return best


def _eltwise_tiling(layer: Layer, plan: Plan, budget: Budget) -> Tiling:
    """add: both inputs' tiles (and two PARAM sets); scale: x's tile plus, with a gate, one
    gate line per channel block."""
    out = plan.tensors[layer.output]
    blocks = out.channels // budget.dim
    streams = 2 if layer.kind == "add" else 1
    gated = layer.kind == "scale" and len(layer.inputs) == 2
    best: Tiling | None = None
    for rows in range(1, out.h + 1):
        mt = rows * out.w
        act_lines = streams * mt + gated  # per channel block
        if mt > MAX_M or act_lines > budget.act or mt > budget.acc:
            break
        kg = min(
            blocks, budget.act // act_lines, budget.acc // mt, budget.param // streams, MAX_ITER
        )
        steps = ceil_div(out.h, rows) * ceil_div(blocks, kg)
        total = steps * (act_lines * kg + budget.latency)
        if best is None or total < best.estimate:
            best = Tiling(rows, kg, kg, int(total))
    if best is None:
        raise Unplaceable(layer.name, layer.node.op, "no tiling fits the ACT/ACC memories")
    return best


def _upsample_tiling(layer: Layer, plan: Plan, budget: Budget) -> Tiling:
    """Input rows x channel blocks per step: the tile is copied into ACC, then stored once per
    output position of each input pixel (depth_to_space: each channel group is copied and
    stored at its own position)."""
    src = plan.tensors[layer.inputs[0]]
    blocks = plan.tensors[layer.output].channels // budget.dim
    node = layer.node
    sh, sw = node.attrs["block"] if node.op == "depth_to_space" else node.attrs["scale"]
    copies = sh * sw if node.op == "depth_to_space" else 1
    best: Tiling | None = None
    for rows in range(1, src.h + 1):
        mt = rows * src.w
        if mt > MAX_M or mt > budget.act or mt > budget.acc:
            break
        kg = min(blocks, budget.act // mt, budget.acc // mt, budget.param, MAX_ITER)
        steps = ceil_div(src.h, rows) * ceil_div(blocks, kg)
        total = copies * steps * ((1 + sh * sw // copies) * mt * kg + budget.latency)
        if best is None or total < best.estimate:
            best = Tiling(rows, kg, kg, int(total))
    if best is None:
        raise Unplaceable(layer.name, layer.node.op, "no tiling fits the ACT/ACC memories")
    return best


def _window_pool_tiling(layer: Layer, plan: Plan, budget: Budget) -> Tiling | None:
    """A max pool the window unit can run (:mod:`compiler.passes.window_pool`) gets its
    depthwise shape and tiling; None (POOL) for other pools or when no window tile fits."""
    layer.gemm = window_pool_shape(plan, layer)
    if layer.gemm is None:
        return None
    try:
        return _dw_tiling(layer, budget)
    except CompileError:
        layer.gemm = None
        return None


def mask_act_lines(plan: Plan, layer: Layer) -> tuple[int, int]:
    """ACT lines of a row_softmax's mask (constant, or its second input): (per query row,
    shared by all rows) - a
    mask of M rows has a row's lines per row, a mask of one row its lines once; no mask none."""
    mask = layer.node.params.get("mask")
    if layer.node.op != "row_softmax" or (mask is None and len(layer.inputs) == 1):
        return 0, 0
    lines = mask_row_bytes(plan, layer) // plan.dim
    rows = mask.shape[0] if mask is not None else plan.tensors[layer.inputs[1]].h
    return (lines, 0) if rows > 1 else (0, lines)


def _norm_tiling(layer: Layer, plan: Plan, budget: Budget) -> Tiling:
    """A norm layer: as many token rows per tile as ACT and ACC hold with every channel block
    of each row (NORM reads whole rows); its two PARAM sets are loaded once
    (:mod:`compiler.passes.norm_steps`), so they must fit PARAM together."""
    out = plan.tensors[layer.output]
    blocks = out.channels // budget.dim
    c = budget.config
    if 2 * blocks > c.param_lines or blocks > MAX_ITER:
        raise Unplaceable(
            layer.name,
            layer.node.op,
            f"rows of {out.logical_channels} channels need {2 * blocks} PARAM lines (config "
            f"param_lines={c.param_lines})",
            f"rows of at most {min(c.param_lines // 2, MAX_ITER) * budget.dim} channels",
        )
    per_row, shared = mask_act_lines(plan, layer)
    act_rows = (budget.act - shared) // (blocks + per_row)  # a mask's lines beside the rows
    rows = min(act_rows, budget.acc // blocks, MAX_M) // out.w
    if rows < 1:
        raise Unplaceable(layer.name, layer.node.op, "no token row fits the ACT/ACC memories")
    mode = isa.NormMode.SOFTMAX if layer.node.op == "row_softmax" else isa.NormMode.LAYERNORM
    tiles = ceil_div(out.h, rows)
    estimate = tiles * (isa.norm_cycles(mode, rows * out.w, blocks) + budget.latency)
    return Tiling(rows, blocks, blocks, estimate)


def _check_param(layer: Layer, config: AccelConfig, budget: Budget) -> None:
    """PARAM must give each of the PARAM_SLOTS slots a line per input stream (two for an
    add), below the layer's lookup table if it has one: say so, naming ``param_lines``."""
    streams = 2 if layer.kind == "add" else 1
    if budget.param >= streams:
        return
    table = isa.table_lines(config.cols) if uses_table(layer) else 0
    need = PARAM_SLOTS * streams + table
    lines = config.param_lines
    raise Unplaceable(
        layer.name,
        layer.node.op,
        f"PARAM has {lines} line{'s' * (lines != 1)} (config param_lines={lines}); this layer "
        f"needs {need}: {PARAM_SLOTS} slots of {streams} line{'s' * (streams != 1)}"
        + (f" plus {table} for its lookup table" if table else "")
        + f" (use param_lines >= {1 << (need - 1).bit_length()})",
    )


def _gemm_or_dw_tiling(layer: Layer, plan: Plan, budget: Budget) -> Tiling:
    """conv / gemm, and batch_matmul (a gemm per head); a depthwise conv on the window unit."""
    if layer.kind == "gemm" and layer.gemm is not None and layer.gemm.depthwise:
        return _dw_tiling(layer, budget)
    transposed = plan.tensors[layer.output].layout == "tokens_t"
    return _gemm_tiling(layer, budget, transposed)


def _any_pool_tiling(layer: Layer, plan: Plan, budget: Budget) -> Tiling:
    """A max pool by window (:mod:`compiler.passes.window_pool`) where it can, else by lines."""
    return _window_pool_tiling(layer, plan, budget) or _pool_tiling(layer, plan, budget)


#: The tiling rule of each device layer kind (``arch.executable.format.LAYER_KINDS``).
TILERS: dict[str, Callable[[Layer, Plan, Budget], Tiling]] = {
    "gemm": _gemm_or_dw_tiling,
    "matmul": _gemm_or_dw_tiling,
    "pool": _any_pool_tiling,
    "upsample": _upsample_tiling,
    "add": _eltwise_tiling,
    "scale": _eltwise_tiling,
    "norm": _norm_tiling,
}


def run(plan: Plan) -> Plan:
    for layer in plan.accel_layers():
        budget = Budget(plan, layer)
        _check_param(layer, plan.config, budget)
        layer.tiling = TILERS[layer.kind](layer, plan, budget)
    return plan

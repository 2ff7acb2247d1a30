"""layout: choose each tensor's DRAM layout and express conv-like layers as GEMMs.

Activations are NHWC with channels padded to lines of ``dim``, so a DMA line is ``dim``
channels of one pixel and an output line of one layer is an input line of the next (no layout
conversions anywhere). The network input of a first convolution whose channel count is not a
multiple of ``dim`` (an RGB image) is written by the host already im2col'ed - one row of
``kh*kw*C`` values, padded to lines, per output pixel - so that layer becomes a plain GEMM
instead of wasting 13 of 16 lanes on every tap.
"""

from __future__ import annotations

import numpy as np

from arch.isa import DWCONV
from arch.ops.attention import groups
from arch.ops.views import HEAD_VIEWS, TOKEN_MAP_VIEWS
from compiler.errors import CompileError, Unplaceable
from compiler.ir import Node, is_depthwise, is_tokens
from compiler.plan import GemmShape, Layer, Plan, TensorPlacement, round_up

DW_STRIDE_MAX = DWCONV.leaf_by_path["stride"].hi
#: Layouts a constant's codes are written in (emit): pixels of channels, or heads.
CONSTANT_LAYOUTS = ("nhwc", "tokens", "heads")


def _tensor_dims(shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(shape) == 4:
        return shape[1], shape[2], shape[3]
    if len(shape) == 2:
        return shape[1], 1, 1
    raise CompileError(None, None, f"tensor shape {shape} is neither (1,C,H,W) nor (1,F)")


def _plain(
    plan: Plan, name: str, tokens: set[str], heads: set[str], transposed: dict[str, int]
) -> TensorPlacement:
    t = plan.graph.tensors[name]
    if name in transposed:  # tokens (1, T, 1, F) of H heads, stored as their (1, H, F/H, T)
        h, (_, tl, _, f) = transposed[name], t.shape
        scale = float(t.scale or 1.0)
        return TensorPlacement(name, f // h, 1, h * round_up(tl, plan.dim), tl, scale, "tokens_t")
    if name in heads:  # (1, H, M, N): M pixels of H blocks of N channels, each padded to lines
        _, h, m, n = t.shape
        scale = float(t.scale or 1.0)
        return TensorPlacement(name, m, 1, h * round_up(n, plan.dim), n, scale, layout="heads")
    if name in tokens:  # (1, T, 1, F): T pixels of F channels
        f = t.shape[3]
        scale = float(t.scale or 1.0)
        return TensorPlacement(
            name, t.shape[1], 1, round_up(f, plan.dim), f, scale, layout="tokens"
        )
    c, h, w = _tensor_dims(t.shape)
    return TensorPlacement(name, h, w, round_up(c, plan.dim), c, float(t.scale or 1.0))


#: Layer kinds whose inputs and output share one layout (element by element; a norm's rows).
_ELEMENTWISE = ("add", "scale", "norm")
#: Layer kinds that make tokens of every tensor they join to tokens: the elementwise ones, a
#: concat (of tokens: along the tokens) and a constant (no input).
_TOKEN_JOINS = (*_ELEMENTWISE, "concat", "constant")
#: Layer kinds that make heads of every tensor they join to heads (a constant: an attention bias).
_HEAD_JOINS = ("add", "scale", "constant")


def _on_accel(plan: Plan) -> list[Layer]:
    """The accelerator's layers, views included."""
    return [layer for layer in plan.layers if layer.target == "accel"]


def _head_tensors(plan: Plan) -> set[str]:
    """Tensors laid out as heads: the inputs and output of a batch_matmul or a row_softmax, a
    split_heads output, a merge_heads input, and every tensor joined to one through an
    elementwise layer."""
    heads: set[str] = set()
    for layer in _on_accel(plan):
        if layer.kind == "matmul" or layer.node.op == "row_softmax":
            heads |= {*layer.inputs, layer.output}
        elif layer.node.op in ("split_heads", "split_heads_t"):
            heads.add(layer.output)
        elif layer.node.op == "merge_heads":
            heads.add(layer.inputs[0])
    # an elementwise op of heads (attention scores plus a constant bias) is heads
    return _joined(plan, heads, _HEAD_JOINS)


def _joined(plan: Plan, seeds: set[str], kinds: tuple[str, ...]) -> set[str]:
    """``seeds`` and every tensor joined to one of them through a layer of ``kinds``."""
    found = set(seeds)
    grew = True
    while grew:
        grew = False
        for layer in _on_accel(plan):
            joined = {*layer.inputs, layer.output}
            if layer.kind in kinds and joined & found and not joined <= found:
                found |= joined
                grew = True
    return found


def _transposed_tensors(plan: Plan) -> dict[str, int]:
    """Tokens stored transposed, as the heads of a split_heads_t (k for ``q @ k^T``) -> their
    head count: a tokens tensor that view alone reads, written by a gemm over tokens of this
    program (its stores transpose) or by the host."""
    transposed: dict[str, int] = {}
    for layer in _on_accel(plan):
        node = layer.node
        if node.op != "split_heads_t" or key_rows_view(plan, node):
            continue
        src = node.inputs[0]
        readers = [n.name for n in plan.graph.consumers(src)]
        producer = plan.graph.producer(src)
        if readers != [node.name]:
            raise Unplaceable(
                node.name,
                node.op,
                f"'{src}' is also read by {[r for r in readers if r != node.name]}",
                "a k^T whose tokens nothing else reads (they are stored transposed)",
            )
        if producer is not None and producer.op != "gemm":
            raise Unplaceable(
                node.name,
                node.op,
                f"'{src}' is written by a {producer.op}, which cannot store it transposed",
                "a k^T of a linear layer's output",
            )
        transposed[src] = node.attrs["heads"]
    return transposed


def key_rows_view(plan: Plan, node: Node) -> bool:
    """Whether ``node`` is a ``split_heads_t`` of token rows that must stay as they are: a
    constant's (a decode step's key cache) or a graph output's (a prefill's key rows, the
    cache it leaves). ``q @ k^T`` reads them as weights with GEMM's ``transpose_w`` (a tile's
    line is one key, :mod:`compiler.passes.step_ops`)."""
    if node.op != "split_heads_t":
        return False
    producer = plan.graph.producer(node.inputs[0])
    return node.inputs[0] in plan.graph.outputs or (
        producer is not None and producer.op == "constant"
    )


def _token_tensors(plan: Plan, heads: set[str]) -> set[str]:
    """Tensors laid out as tokens: those of a gemm over tokens (input, residual, output) or of
    a norm (its rows), and every tensor joined to one through an elementwise layer (a residual
    add, a table)."""
    tokens: set[str] = set()
    for layer in _on_accel(plan):
        if layer.node.op in ("layer_norm", "rms_norm") or (
            layer.node.op == "gemm" and is_tokens(plan.graph.tensors[layer.inputs[0]].shape)
        ):
            tokens |= {*layer.inputs, layer.output}
        elif layer.node.op == "split_heads" or key_rows_view(plan, layer.node):
            tokens.add(layer.inputs[0])
        elif layer.node.op in ("merge_heads", "map_to_tokens"):
            tokens.add(layer.output)
        elif layer.node.op in ("tokens_to_map", "select_token"):
            tokens.add(layer.inputs[0])
        elif layer.kind == "constant" and layer.output not in heads and _position_like(plan, layer):
            tokens.add(layer.output)
    tokens = _joined(plan, tokens, _TOKEN_JOINS)
    for layer in _on_accel(plan):
        gemm_of_tokens = layer.node.op == "gemm" and layer.inputs[0] in tokens
        if (
            not gemm_of_tokens
            and layer.kind not in _TOKEN_JOINS
            and layer.node.op not in HEAD_VIEWS
            and layer.node.op not in TOKEN_MAP_VIEWS
        ):
            for name in (*layer.inputs, layer.output):
                if name in tokens:
                    raise Unplaceable(
                        layer.name,
                        layer.node.op,
                        f"tensor '{name}' is tokens (1, T, 1, F) of a transformer here",
                        "tokens read by gemms over their last axis and elementwise ops",
                    )
    return tokens


#: Ops whose output is a map (1, C, H, W) laid out channels-last, never tokens.
_MAP_PRODUCERS = ("conv", "maxpool", "avgpool", "global_avgpool", "upsample", "depth_to_space")


def _position_like(plan: Plan, layer: Layer) -> bool:
    """A constant of shape (1, T, 1, F) that its readers join to no map's output: a (1, T, F)
    tensor's (position embeddings added to the input), so tokens."""
    if not is_tokens(plan.graph.tensors[layer.output].shape):
        return False
    for reader in plan.graph.consumers(layer.output):
        for name in reader.inputs:
            producer = plan.graph.producer(name)
            if producer is not None and producer.op in _MAP_PRODUCERS:
                return False
    return True


def _wants_im2col(plan: Plan, layer: Layer) -> bool:
    node = layer.node
    graph_input = plan.graph.inputs[0]
    if node.op != "conv" or node.inputs[0] != graph_input:
        return False
    if node.attrs["group"] != 1 or node.attrs["dilation"] != (1, 1):
        return False
    c, _, _ = _tensor_dims(plan.graph.tensors[graph_input].shape)
    consumers = plan.graph.consumers(graph_input)
    return c % plan.dim != 0 and node.attrs["kernel"] != (1, 1) and len(consumers) == 1


def _depthwise_matrix(shape: GemmShape, weight: np.ndarray, out_channels: int) -> np.ndarray:
    """(C, 1, kh, kw) -> (C_pad, kh*kw): channel c's taps in DWCONV pass order (each pass's
    taps row-major), so pass p's WGT lines follow the previous passes' lines."""
    c = weight.shape[0]
    order = [
        (i, j)
        for i0, kh, j0, kw in shape.dw_passes()
        for i in range(i0, i0 + kh)
        for j in range(j0, j0 + kw)
    ]
    matrix = np.zeros((out_channels, len(order)), dtype=np.int8)
    matrix[:c] = np.stack([weight[:, 0, i, j] for i, j in order], axis=1)
    return matrix


def block_diagonal(weight: np.ndarray, group: int) -> np.ndarray:
    """A grouped conv's (O, C/group, kh, kw) weights as the dense (O, C, kh, kw) weights of the
    same conv: zero outside each group's block (what the array multiplies; canonicalize cuts
    grouped convs into pieces of a few lines, so the zeros stay within a line or two)."""
    o, cg = weight.shape[:2]
    og = o // group
    dense = np.zeros((o, cg * group, *weight.shape[2:]), dtype=weight.dtype)
    for g in range(group):
        dense[g * og : (g + 1) * og, g * cg : (g + 1) * cg] = weight[g * og : (g + 1) * og]
    return dense


def _conv_matrix(weight: np.ndarray, in_channels: int, im2col: bool, dim: int) -> np.ndarray:
    """(O, C, kh, kw) -> (O_pad, K) with K in chunk order (ky, kx, c) and padding as laid out."""
    o, c, kh, kw = weight.shape
    if im2col:
        k = weight.transpose(0, 2, 3, 1).reshape(o, kh * kw * c)
        k = np.pad(k, ((0, 0), (0, round_up(k.shape[1], dim) - k.shape[1])))
    else:
        k = np.zeros((o, kh, kw, in_channels), dtype=np.int8)
        k[:, :, :, :c] = weight.transpose(0, 2, 3, 1)
        k = k.reshape(o, kh * kw * in_channels)
    return np.pad(k, ((0, round_up(o, dim) - o), (0, 0))).astype(np.int8)


def run(plan: Plan) -> Plan:
    dim = plan.dim
    heads = _head_tensors(plan)
    tokens = _token_tensors(plan, heads)
    transposed = _transposed_tensors(plan)
    if heads & tokens:
        _refuse_mixed_join(plan, heads, tokens)
    for layer in plan.layers:
        if layer.target != "accel":
            continue
        node = layer.node
        for name in layer.inputs:
            if name not in plan.tensors:
                if name == plan.graph.inputs[0] and _wants_im2col(plan, layer):
                    kh, kw = node.attrs["kernel"]
                    oc, oh, ow = _tensor_dims(plan.graph.tensors[node.output].shape)
                    c, _, _ = _tensor_dims(plan.graph.tensors[name].shape)
                    scale = float(plan.graph.tensors[name].scale or 1.0)
                    plan.tensors[name] = TensorPlacement(
                        name, oh, ow, round_up(kh * kw * c, dim), c, scale, layout="im2col"
                    )
                else:
                    plan.tensors[name] = _plain(plan, name, tokens, heads, transposed)
        out = _plain(plan, layer.output, tokens, heads, transposed)
        if node.op in HEAD_VIEWS:
            out = _head_view(plan, layer, out)
        elif node.op in TOKEN_MAP_VIEWS:
            out = _token_map_view(plan, layer, out)
        elif layer.kind == "alias":
            src = plan.tensors[layer.inputs[0]]
            out = TensorPlacement(
                layer.output, src.h, src.w, src.channels, src.logical_channels, src.scale
            )
            out.alias_of = src.name
        elif layer.kind == "concat" and out.layout == "tokens":
            _token_pieces(plan, layer, out)
        elif layer.kind == "concat":
            _slice_inputs(plan, layer, out)
        elif layer.kind == "constant" and out.layout not in CONSTANT_LAYOUTS:
            raise Unplaceable(
                node.name,
                node.op,
                f"a constant laid out as {out.layout}",
                f"constants laid out as {' or '.join(CONSTANT_LAYOUTS)}",
            )
        elif layer.kind == "slice":
            src, start = plan.tensors[layer.inputs[0]], node.attrs["start"]
            end = start + node.attrs["channels"]
            if src.layout != "nhwc" or start % dim or (end % dim and end != src.logical_channels):
                raise Unplaceable(
                    node.name,
                    node.op,
                    f"channels {start}..{end - 1} of '{src.name}' are not whole lines of {dim}",
                    "slices of whole lines (or up to the last channel)",
                )
            out.alias_of, out.offset = src.name, start
        elif node.op == "depth_to_space" and out.logical_channels % dim:
            raise Unplaceable(
                node.name,
                node.op,
                f"{out.logical_channels} output channels are not whole lines of {dim} (each "
                "channel group is loaded from its own lines)",
                f"ConvTranspose output channels a multiple of {dim}",
            )
        plan.tensors[layer.output] = out
        if layer.kind == "gemm":
            _gemm_shape(plan, layer)
        elif layer.kind == "matmul":
            _matmul_shape(plan, layer)
    return plan


def _refuse_mixed_join(plan: Plan, heads: set[str], tokens: set[str]) -> None:
    """A tensor is both heads and tokens: the elementwise layer that joins a head tensor to a
    tokens one goes to the host (say, a per-head attention bias added to the scores, which
    joined the scores to the bias constant's tokens); with no such layer, an error."""
    both = heads & tokens
    for layer in _on_accel(plan):
        joined = {*layer.inputs, layer.output}
        if layer.kind in _TOKEN_JOINS and layer.kind != "constant" and joined & both:
            raise Unplaceable(
                layer.name,
                layer.node.op,
                f"tensor '{min(joined & both)}' would be both tokens and heads",
                "elementwise ops of heads alone or of tokens alone",
            )
    raise CompileError(None, None, f"tensor '{min(both)}' is both tokens and heads")


def _head_view(plan: Plan, layer: Layer, out: TensorPlacement) -> TensorPlacement:
    """split_heads / merge_heads: the same bytes, when each head is whole lines;
    split_heads_t: the bytes its input's transposing stores wrote, when each head's features
    are whole lines (a store block is one head's) - or, of key rows that stay as they are
    (:func:`key_rows_view`), those rows, read with ``transpose_w``."""
    node, src = layer.node, plan.tensors[layer.inputs[0]]
    if key_rows_view(plan, node):  # the key rows as stored (tokens): transpose_w reads them
        heads, per_head = node.attrs["heads"], src.logical_channels // node.attrs["heads"]
    elif node.op == "split_heads_t":
        heads, per_head = node.attrs["heads"], src.h
    elif node.op == "split_heads":
        heads, per_head = node.attrs["heads"], out.logical_channels
    else:
        heads, per_head = plan.graph.tensors[layer.inputs[0]].shape[1], src.logical_channels
    if per_head % plan.dim or src.alias_of is not None:
        raise Unplaceable(
            node.name,
            node.op,
            f"a head of {per_head} channels is not whole lines of {plan.dim}",
            f"head sizes that are multiples of {plan.dim} (the heads are then a view)",
        )
    rows = key_rows_view(plan, node)  # (the view is then the token rows themselves)
    logical, layout = (
        (src.logical_channels, "tokens") if rows else (out.logical_channels, out.layout)
    )
    view = TensorPlacement(layer.output, src.h, 1, src.channels, logical, src.scale, layout=layout)
    view.alias_of = src.name
    assert node.op == "split_heads_t" or view.channels == heads * per_head
    return view


def _token_map_view(plan: Plan, layer: Layer, out: TensorPlacement) -> TensorPlacement:
    """map_to_tokens / tokens_to_map: the same bytes (a map's NHWC pixels are its tokens), as
    ``out``'s pixels, when the input owns whole pixels in the layout the view reads;
    select_token: one pixel of the tokens' bytes."""
    node, src = layer.node, plan.tensors[layer.inputs[0]]
    expected = "nhwc" if node.op == "map_to_tokens" else "tokens"
    if node.op == "select_token" and src.layout == expected:  # a pixel of its (viewed) bytes
        view = TensorPlacement(layer.output, 1, 1, src.channels, src.logical_channels, src.scale)
        view.alias_of = src.name
        view.offset = node.attrs["index"] * plan.tensor(src.name).pixel_stride
        return view
    if src.layout != expected or src.alias_of is not None:
        how = f"a view of '{src.alias_of}'" if src.alias_of is not None else src.layout
        raise Unplaceable(
            node.name,
            node.op,
            f"its input '{src.name}' is laid out as {how}",
            f"an input laid out as {expected} that owns its bytes",
        )
    view = TensorPlacement(
        layer.output, out.h, out.w, src.channels, src.logical_channels, src.scale, out.layout
    )
    view.alias_of = src.name
    return view


def _matmul_shape(plan: Plan, layer: Layer) -> None:
    """batch_matmul: per head, a gemm of A's M pixels (K channels) by B's K pixels as weight
    lines (N channels) - with ``groups``, of each block of A's pixels by its block of B's;
    both symmetric (the DMA cannot subtract a zero point from weights)."""
    node, dim = layer.node, plan.dim
    for name in node.inputs:
        if plan.graph.tensors[name].zero_point:
            raise Unplaceable(
                node.name,
                node.op,
                f"input '{name}' has zero point {plan.graph.tensors[name].zero_point}",
                "symmetric (zero point 0) inputs of a MatMul of two activations",
            )
    _, heads, m, k = plan.graph.tensors[node.inputs[0]].shape
    n = plan.graph.tensors[node.output].shape[3]
    k_pad, n_pad = round_up(k, dim), round_up(n, dim)
    g = groups(node)
    layer.gemm = GemmShape(m, 1, k_pad, (1, 1), (1, 1), (0, 0, 0, 0), m, 1, n_pad, groups=g)


def _slice_inputs(plan: Plan, layer: Layer, out: TensorPlacement) -> None:
    """Make each input of a concat a view of its channel lines in the concat's buffer, so the
    producers write there directly. Every input but the last must fill whole lines (else its
    padding would sit between the concat's channels)."""
    node, offset = layer.node, 0
    for index, name in enumerate(layer.inputs):
        t = plan.tensors[name]
        if t.alias_of is not None or t.layout != "nhwc":
            raise Unplaceable(
                node.name, node.op, f"input '{name}' is already a view of another tensor"
            )
        if index < len(layer.inputs) - 1 and t.logical_channels % plan.dim:
            raise Unplaceable(
                node.name,
                node.op,
                f"input '{name}' has {t.logical_channels} channels, not whole lines of {plan.dim}",
                "inputs of whole lines, but the last",
            )
        t.alias_of, t.offset = layer.output, offset
        offset += t.channels


def _token_pieces(plan: Plan, layer: Layer, out: TensorPlacement) -> None:
    """A concat of tokens (along the tokens): each input is a run of the concat's pixels, so
    the tensor that owns its bytes (it, or the map it views) becomes a view at that run and
    its producer writes there directly."""
    node, offset = layer.node, 0
    for name in layer.inputs:
        t, owner = plan.tensors[name], name
        while plan.tensors[owner].alias_of is not None and _whole_view(plan.tensors[owner]):
            owner = plan.tensors[owner].alias_of  # type: ignore[assignment]
        root = plan.tensors[owner]
        whole = root.alias_of is None and root.h * root.w == t.h * t.w
        if not whole or root.channels != out.channels or root.layout not in ("nhwc", "tokens"):
            raise Unplaceable(
                node.name,
                node.op,
                f"input '{name}' is not the whole bytes of a tensor of {out.channels} channels "
                "per token",
                "inputs that own their tokens (or view a whole map's pixels)",
            )
        root.alias_of, root.offset = layer.output, offset
        offset += t.h * t.w * out.channels


def _whole_view(t: TensorPlacement) -> bool:
    """A view of all of another tensor's bytes, pixel for pixel (a flatten, a map's tokens)."""
    return t.offset == 0 and t.pixel_bytes == 0


def _gemm_shape(plan: Plan, layer: Layer) -> None:
    node, dim = layer.node, plan.dim
    src = plan.tensor(layer.inputs[0])
    out = plan.tensors[layer.output]
    weight = node.params["weight"]
    if node.op == "conv":
        im2col, group = src.layout == "im2col", node.attrs["group"]
        depthwise = is_depthwise(weight, group)
        if im2col:  # the host wrote each output pixel's window: a 1x1 GEMM over the rows
            window = ((1, 1), (1, 1), (0, 0, 0, 0), (1, 1))
        else:
            window = tuple(node.attrs[k] for k in ("kernel", "stride", "pads", "dilation"))
        kernel, stride, pads, dilation = window
        shape = GemmShape(
            src.h,
            src.w,
            src.channels,
            kernel,
            stride,
            pads,
            out.h,
            out.w,
            out.channels,
            depthwise=depthwise,
            dilation=dilation,
        )
        if depthwise:
            if stride[0] != stride[1] or not 1 <= stride[0] <= DW_STRIDE_MAX:
                raise Unplaceable(
                    node.name,
                    node.op,
                    f"depthwise stride {stride} is not supported",
                    f"equal strides of 1..{DW_STRIDE_MAX} (DWCONV)",
                )
            matrix = _depthwise_matrix(shape, weight, out.channels)
        else:
            dense = block_diagonal(weight, group) if group > 1 else weight
            matrix = _conv_matrix(dense, src.channels, im2col, dim)
    elif src.layout == "tokens":  # a 1x1 convolution over the tokens (stored as they are, or
        _, t, _, f = plan.graph.tensors[layer.output].shape  # transposed: tokens_t)
        shape = GemmShape(
            src.h, 1, src.channels, (1, 1), (1, 1), (0, 0, 0, 0), t, 1, round_up(f, dim)
        )
        matrix = _conv_matrix(weight[:, :, None, None], src.channels, False, dim)
    else:
        # FC: a convolution whose kernel covers the (flattened, NCHW-ordered) input image.
        if src.h * src.w * src.logical_channels != weight.shape[1]:
            raise CompileError(
                node.name, node.op, f"input {src.name} does not flatten to K={weight.shape[1]}"
            )
        as_conv = weight.reshape(weight.shape[0], src.logical_channels, src.h, src.w)
        shape = GemmShape(
            src.h, src.w, src.channels, (src.h, src.w), (1, 1), (0, 0, 0, 0), 1, 1, out.channels
        )
        matrix = _conv_matrix(as_conv, src.channels, False, dim)
    layer.gemm = shape
    layer.weights = matrix  # (O_pad, K) in chunk order; emit cuts it into tiles

"""Views and data movement: ops that move int8 codes and never rescale (``keeps_scale``).

* flatten: a reshape (NCHW order).
* concat: the inputs, which share the output's scale, side by side along channels.
* channel_slice: channels ``start .. start + channels - 1`` of the input (a view, no copy).
* upsample: nearest-neighbour, each pixel repeated ``scale`` = (sh, sw) times.
* depth_to_space: ``block`` = (sh, sw); ``out[c, y*sh + a, x*sw + b] = in[(a*sw + b)*C + c, y, x]``
  (ONNX DepthToSpace, DCR order): the channel groups of a 1x1 conv interleaved into pixels - a
  ConvTranspose whose kernel equals its stride.
* split_heads: tokens (1, T, 1, F) -> (1, H, T, F/H) (attrs ``heads``): ONNX's Reshape to
  (1, T, H, F/H) then Transpose (0, 2, 1, 3); merge_heads the inverse; split_heads_t:
  tokens (1, T, 1, F) -> (1, H, F/H, T), the Transpose (0, 2, 3, 1) of k for ``q @ k^T``
  (the producer stores it transposed).
* map_to_tokens: a map (1, C, H, W) -> tokens (1, H*W, 1, C), token ``y*W + x`` is pixel (y, x)
  (timm's ``x.flatten(2).transpose(1, 2)``); tokens_to_map (attr ``size`` = (H, W)) the
  inverse. NHWC pixels and tokens are the same bytes: both are views.
* select_token: token ``index`` of tokens (1, T, 1, C) as a vector (1, C) (ONNX Gather of one
  index along the tokens: a ViT's class token), a view of that token's pixel.
"""

from __future__ import annotations

import numpy as np

from arch.ops.check import NodeCheck, short
from arch.ops.spec import Evaluator, OpSpec, RefGraph, RefNode, Shape, ShapeRule

__all__ = ["HEAD_VIEWS", "SPECS", "TOKEN_MAP_VIEWS"]


def _flatten(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    return xs[0].reshape(graph.tensors[node.output].shape)


def _flattened(c: NodeCheck, xs: list[Shape]) -> Shape:
    x = c.shape(c.node.inputs[0], 4, "input")
    return (1, x[1] * x[2] * x[3])


def _concat(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(xs, axis=1)


def _concatenated(c: NodeCheck, xs: list[Shape]) -> Shape:
    shapes = [c.shape(name, 4, "input") for name in c.node.inputs]
    if len({s[2:] for s in shapes}) != 1:
        c.fail(f"inputs {shapes} differ in height or width")
    return (1, sum(s[1] for s in shapes), shapes[0][2], shapes[0][3])


def _channel_slice(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    start = node.attrs["start"]
    return xs[0][:, start : start + node.attrs["channels"]]


def _sliced(c: NodeCheck, xs: list[Shape]) -> Shape:
    x = c.shape(c.node.inputs[0], 4, "input")
    start, channels = c.node.attrs["start"], c.node.attrs["channels"]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, channels)) or not (
        0 <= start < start + channels <= x[1]
    ):
        c.fail(f"channels {short(start)} + {short(channels)} do not fit input {x}")
    return (1, channels, x[2], x[3])


def _upsample(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    sh, sw = node.attrs["scale"]
    return np.repeat(np.repeat(xs[0], sh, axis=2), sw, axis=3)


def _upsampled(c: NodeCheck, xs: list[Shape]) -> Shape:
    x = c.shape(c.node.inputs[0], 4, "input")
    scale = c.node.attrs["scale"]
    if not (
        isinstance(scale, tuple)
        and len(scale) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 64 for v in scale)
    ):
        c.fail(f"attr 'scale' must be 2 integers in 1..64, not {short(scale)}")
    return (1, x[1], x[2] * scale[0], x[3] * scale[1])


def _depth_to_space(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    sh, sw = node.attrs["block"]
    n, cs, h, w = xs[0].shape
    blocks = xs[0].reshape(n, sh, sw, cs // (sh * sw), h, w)
    return blocks.transpose(0, 3, 4, 1, 5, 2).reshape(n, cs // (sh * sw), h * sh, w * sw)


def _unshuffled(c: NodeCheck, xs: list[Shape]) -> Shape:
    x = c.shape(c.node.inputs[0], 4, "input")
    sh, sw = c.ints("block", 2, 1)
    if x[1] % (sh * sw):
        c.fail(f"input channels {x[1]} are not a multiple of the block {sh}x{sw}")
    return (1, x[1] // (sh * sw), x[2] * sh, x[3] * sw)


def _split_heads(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    _, t, _, d = xs[0].shape
    heads = node.attrs["heads"]
    return xs[0].reshape(1, t, heads, d // heads).transpose(0, 2, 1, 3).copy()


def _split_heads_t(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    _, t, _, d = xs[0].shape
    heads = node.attrs["heads"]
    return xs[0].reshape(1, t, heads, d // heads).transpose(0, 2, 3, 1).copy()


def _split(c: NodeCheck, xs: list[Shape]) -> Shape:
    x = c.shape(c.node.inputs[0], 4, "input")
    heads = c.positive("heads")
    if x[2] != 1 or x[3] % heads:
        c.fail(f"input {x} is not tokens (1, T, 1, F) of {short(c.node.attrs['heads'])} heads")
    if c.node.op == "split_heads_t":
        return (1, heads, x[3] // heads, x[1])
    return (1, heads, x[1], x[3] // heads)


def _merge_heads(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    _, heads, t, d = xs[0].shape
    return xs[0].transpose(0, 2, 1, 3).reshape(1, t, 1, heads * d).copy()


def _merged(c: NodeCheck, xs: list[Shape]) -> Shape:
    x = c.shape(c.node.inputs[0], 4, "input")
    return (1, x[2], 1, x[1] * x[3])


def _map_to_tokens(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    _, c, h, w = xs[0].shape
    return xs[0].reshape(1, c, h * w).transpose(0, 2, 1).reshape(1, h * w, 1, c).copy()


def _tokens_to_map(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    _, t, _, c = xs[0].shape
    h, w = node.attrs["size"]
    return xs[0].reshape(1, t, c).transpose(0, 2, 1).reshape(1, c, h, w).copy()


def _to_tokens(c: NodeCheck, xs: list[Shape]) -> Shape:
    x = c.shape(c.node.inputs[0], 4, "input")
    return (1, x[2] * x[3], 1, x[1])


def _to_map(c: NodeCheck, xs: list[Shape]) -> Shape:
    x = c.shape(c.node.inputs[0], 4, "input")
    h, w = c.ints("size", 2, 1)
    if x[2] != 1 or h * w != x[1]:
        c.fail(f"input {x} is not tokens (1, T, 1, F) of a {h}x{w} map")
    return (1, x[3], h, w)


def _select_token(graph: RefGraph, node: RefNode, xs: list[np.ndarray]) -> np.ndarray:
    return xs[0][:, node.attrs["index"], 0, :].copy()


def _selected(c: NodeCheck, xs: list[Shape]) -> Shape:
    x = c.shape(c.node.inputs[0], 4, "input")
    index = c.node.attrs["index"]
    if x[2] != 1 or not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < x[1]:
        c.fail(f"input {x} is not tokens (1, T, 1, C) with a token {short(index)}")
    return (1, x[3])


def _view(
    name: str,
    attrs: set[str],
    output_shape: ShapeRule,
    evaluate: Evaluator,
    arity: tuple[int, int] = (1, 1),
) -> OpSpec:
    """A view's spec: no params, and the output keeps its inputs' scale."""
    return OpSpec(
        name=name,
        attrs=frozenset(attrs),
        params={},
        arity=arity,
        keeps_scale=True,
        output_shape=output_shape,
        evaluate=evaluate,
    )


FLATTEN = _view("flatten", set(), _flattened, _flatten)
CONCAT = _view("concat", set(), _concatenated, _concat, arity=(2, 1 << 10))
CHANNEL_SLICE = _view("channel_slice", {"start", "channels"}, _sliced, _channel_slice)
UPSAMPLE = _view("upsample", {"scale"}, _upsampled, _upsample)
DEPTH_TO_SPACE = _view("depth_to_space", {"block"}, _unshuffled, _depth_to_space)
#: Views between tokens (1, T, 1, F) and attention heads (1, H, T, F/H), or transposed heads
#: (1, H, F/H, T): the k^T of ``q @ k^T``, which its producer stores transposed.
SPLIT_HEADS = _view("split_heads", {"heads"}, _split, _split_heads)
SPLIT_HEADS_T = _view("split_heads_t", {"heads"}, _split, _split_heads_t)
MERGE_HEADS = _view("merge_heads", set(), _merged, _merge_heads)
HEAD_VIEWS: tuple[str, ...] = tuple(s.name for s in (SPLIT_HEADS, SPLIT_HEADS_T, MERGE_HEADS))
#: Views between a map (1, C, H, W) and its pixels as tokens (1, H*W, 1, C).
MAP_TO_TOKENS = _view("map_to_tokens", set(), _to_tokens, _map_to_tokens)
TOKENS_TO_MAP = _view("tokens_to_map", {"size"}, _to_map, _tokens_to_map)
SELECT_TOKEN = _view("select_token", {"index"}, _selected, _select_token)
TOKEN_MAP_VIEWS: tuple[str, ...] = (MAP_TO_TOKENS.name, TOKENS_TO_MAP.name, SELECT_TOKEN.name)

SPECS = (
    FLATTEN,
    CONCAT,
    CHANNEL_SLICE,
    UPSAMPLE,
    DEPTH_TO_SPACE,
    SPLIT_HEADS,
    SPLIT_HEADS_T,
    MERGE_HEADS,
    MAP_TO_TOKENS,
    TOKENS_TO_MAP,
    SELECT_TOKEN,
)

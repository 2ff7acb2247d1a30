"""A small U-Net (Ronneberger et al. 2015, with BatchNorm and 'same' padding as usual today) as
an ONNX graph with seeded random weights: encoder / decoder with Concat skip connections, the
two deeper decoder stages upsampling by ConvTranspose 2x2/2 (the paper's up-convolution), the
last by nearest Resize + 1x1 conv (the other common form)."""

from __future__ import annotations

import numpy as np
import onnx

from ._graph import GraphBuilder

__all__ = ["unet"]


def _double_conv(g: GraphBuilder, name: str, x: str, cin: int, cout: int) -> str:
    for k in (1, 2):
        x = g.conv(f"{name}.conv{k}", x, cin, cout, 3, pad=1)
        x = g.relu(f"{name}.relu{k}", g.batch_norm(f"{name}.bn{k}", x, cout))
        cin = cout
    return x


def _up_transpose(g: GraphBuilder, name: str, x: str, cin: int, cout: int) -> str:
    weight = g.param(f"{name}.weight", g.he_normal((cin, cout, 2, 2), cin))
    bias = g.param(f"{name}.bias", g.fan_in_uniform(cout, cin * 4))
    return g.node("ConvTranspose", name, [x, weight, bias], kernel_shape=[2, 2], strides=[2, 2])


def _up_resize(g: GraphBuilder, name: str, x: str, cin: int, cout: int) -> str:
    scales = g.param(f"{name}.scales", np.array([1, 1, 2, 2], np.float32))
    up = g.node(
        "Resize", f"{name}.resize", [x, "", scales], mode="nearest",
        coordinate_transformation_mode="asymmetric", nearest_mode="floor",
    )  # fmt: skip
    return g.conv(f"{name}.conv", up, cin, cout, 1, bias=True)


def unet(
    image_size: int = 224, num_classes: int = 2, seed: int = 0, base: int = 16
) -> onnx.ModelProto:
    """Three 2x2 max-pool levels (``base``, 2x, 4x channels) and an 8x bottleneck; each decoder
    stage upsamples, concatenates the encoder map of its level (skip first, as torch U-Nets
    do) and applies a double conv; a 1x1 conv gives ``num_classes`` logits per pixel."""
    if image_size < 8 or image_size % 8:
        raise ValueError(f"unet needs an image size that is a multiple of 8, not {image_size}")
    g = GraphBuilder(seed)
    widths = [base, 2 * base, 4 * base]
    skips, x, cin = [], "input", 3
    for level, width in enumerate(widths, start=1):
        x = _double_conv(g, f"down{level}", x, cin, width)
        skips.append(x)
        x = g.max_pool(f"pool{level}", x, 2, 2)
        cin = width
    x = _double_conv(g, "bottleneck", x, cin, 8 * base)
    cin = 8 * base
    for level, width in reversed(list(enumerate(widths, start=1))):
        up = _up_transpose if level > 1 else _up_resize
        x = up(g, f"up{level}", x, cin, width)
        x = g.node("Concat", f"up{level}.cat", [skips[level - 1], x], axis=1)
        x = _double_conv(g, f"up{level}.double", x, 2 * width, width)
        cin = width
    g.node("Conv", "head", [x, g.param("head.weight", g.he_normal((num_classes, cin, 1, 1),
           cin)), g.param("head.bias", g.fan_in_uniform(num_classes, cin))], output="logits",
           kernel_shape=[1, 1])  # fmt: skip
    return g.model(
        "unet",
        {"input": (1, 3, image_size, image_size)},
        {"logits": (1, num_classes, image_size, image_size)},
        f"U-Net (small, base {base}) {image_size}x{image_size}, seeded random weights "
        f"(seed {seed})",
    )

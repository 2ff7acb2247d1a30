"""torchvision-style MobileNetV2 (width 1.0) as an ONNX graph with seeded random weights."""

from __future__ import annotations

import onnx

from ._graph import GraphBuilder

__all__ = ["MOBILENETV2_BLOCKS", "mobilenetv2"]

#: (expansion t, output channels c, repeats n, first stride s) per stage, as in the paper.
MOBILENETV2_BLOCKS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
#: gamma factor of each block's projection BN (keeps random-weight residual sums tame).
PROJECTION_GAMMA_SCALE = 0.3


def _conv_bn(g: GraphBuilder, name: str, x: str, cin: int, cout: int, kernel: int, **kw) -> str:
    out = g.conv(f"{name}.conv", x, cin, cout, kernel, pad=kernel // 2, **kw)
    return g.batch_norm(f"{name}.bn", out, cout)


def mobilenetv2(image_size: int = 224, num_classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """Stem conv3x3/2 32, 17 inverted residual blocks (expand 1x1 + ReLU6, depthwise 3x3 +
    ReLU6, linear project 1x1, residual Add where stride 1 and shapes match), conv1x1 1280 +
    ReLU6, global average pool, FC."""
    if image_size < 32 or image_size % 32:
        raise ValueError(
            f"mobilenetv2 needs an image size that is a multiple of 32, not {image_size}"
        )
    g = GraphBuilder(seed)
    x = g.relu6("features.0.relu", _conv_bn(g, "features.0", "input", 3, 32, 3, stride=2))
    cin, index = 32, 1
    for t, c, n, s in MOBILENETV2_BLOCKS:
        for repeat in range(n):
            stride = s if repeat == 0 else 1
            name, hidden, block_in = f"features.{index}", cin * t, x
            if t != 1:
                x = g.relu6(f"{name}.expand.relu", _conv_bn(g, f"{name}.expand", x, cin, hidden, 1))
            dw = _conv_bn(g, f"{name}.dw", x, hidden, hidden, 3, stride=stride, group=hidden)
            x = g.relu6(f"{name}.dw.relu", dw)
            out = g.conv(f"{name}.project.conv", x, hidden, c, 1)
            x = g.batch_norm(f"{name}.project.bn", out, c, PROJECTION_GAMMA_SCALE)
            if stride == 1 and cin == c:
                x = g.add(f"{name}.add", block_in, x)
            cin, index = c, index + 1
    x = g.relu6(f"features.{index}.relu", _conv_bn(g, f"features.{index}", x, cin, 1280, 1))
    x = g.flatten("flatten", g.global_avg_pool("avgpool", x))
    g.gemm("classifier", x, 1280, num_classes, output="logits")
    return g.model(
        "mobilenetv2",
        {"input": (1, 3, image_size, image_size)},
        {"logits": (1, num_classes)},
        f"MobileNetV2 {image_size}x{image_size}, seeded random weights (seed {seed})",
    )

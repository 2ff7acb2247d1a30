"""torchvision-style EfficientNet-B0 as an ONNX graph with seeded random weights.

SiLU (Sigmoid * Mul) and the squeeze-excitation scaling (Mul by a per-channel activation) have
no accelerator mapping yet, so they run on the host between device programs (partitioning).
"""

from __future__ import annotations

import onnx

from ._graph import GraphBuilder

__all__ = ["EFFICIENTNET_B0_STAGES", "efficientnet"]

#: (expansion, kernel, first stride, output channels, repeats) per stage.
EFFICIENTNET_B0_STAGES = (
    (1, 3, 1, 16, 1),
    (6, 3, 2, 24, 2),
    (6, 5, 2, 40, 2),
    (6, 3, 2, 80, 3),
    (6, 5, 1, 112, 3),
    (6, 5, 2, 192, 4),
    (6, 3, 1, 320, 1),
)
PROJECTION_GAMMA_SCALE = 0.3  # keeps random-weight residual sums tame, as in the MobileNetV2


def _silu(g: GraphBuilder, name: str, x: str) -> str:
    return g.node("Mul", name, [x, g.node("Sigmoid", f"{name}.sigmoid", [x])])


def _conv_bn(
    g: GraphBuilder, name: str, x: str, cin: int, cout: int, kernel: int, stride: int = 1,
    group: int = 1, gamma: float = 1.0,
) -> str:  # fmt: skip
    out = g.conv(f"{name}.0", x, cin, cout, kernel, stride, kernel // 2, group)
    return g.batch_norm(f"{name}.1", out, cout, gamma)


def efficientnet(image_size: int = 224, num_classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """Stem conv3x3/2 32 + SiLU, 16 MBConv blocks (expand 1x1 + SiLU, depthwise kxk + SiLU,
    squeeze-excitation, project 1x1, residual where stride 1 and shapes match), conv1x1 1280 +
    SiLU, global average pool, FC."""
    if image_size < 32 or image_size % 32:
        raise ValueError(
            f"efficientnet needs an image size that is a multiple of 32, not {image_size}"
        )
    g = GraphBuilder(seed)
    x = _silu(g, "features.0.2", _conv_bn(g, "features.0", "input", 3, 32, 3, stride=2))
    cin, index = 32, 1
    for expand, kernel, stride, cout, repeats in EFFICIENTNET_B0_STAGES:
        for r in range(repeats):
            name, s, block_in = f"features.{index}", stride if r == 0 else 1, x
            hidden = cin * expand
            if expand != 1:
                x = _silu(g, f"{name}.expand.act", _conv_bn(g, f"{name}.expand", x, cin, hidden, 1))
            dw = _conv_bn(g, f"{name}.dw", x, hidden, hidden, kernel, s, group=hidden)
            x = _silu(g, f"{name}.dw.act", dw)
            squeeze = max(1, cin // 4)
            pooled = g.global_avg_pool(f"{name}.se.avgpool", x)
            fc1 = g.conv(f"{name}.se.fc1", pooled, hidden, squeeze, 1, bias=True)
            fc2 = g.conv(
                f"{name}.se.fc2", _silu(g, f"{name}.se.act", fc1), squeeze, hidden, 1, bias=True
            )
            scale = g.node("Sigmoid", f"{name}.se.gate", [fc2])
            x = g.node("Mul", f"{name}.se.scale", [x, scale])
            x = _conv_bn(g, f"{name}.project", x, hidden, cout, 1, gamma=PROJECTION_GAMMA_SCALE)
            if s == 1 and cin == cout:
                x = g.add(f"{name}.add", block_in, x)
            cin, index = cout, index + 1
    x = _silu(g, f"features.{index}.act", _conv_bn(g, f"features.{index}", x, cin, 1280, 1))
    x = g.flatten("flatten", g.global_avg_pool("avgpool", x))
    g.gemm("classifier", x, 1280, num_classes, output="logits")
    return g.model(
        "efficientnet_b0",
        {"input": (1, 3, image_size, image_size)},
        {"logits": (1, num_classes)},
        f"EfficientNet-B0 {image_size}x{image_size}, seeded random weights (seed {seed})",
    )

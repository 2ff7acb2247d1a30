"""torchvision-style SqueezeNet 1.1 as an ONNX graph with seeded random weights."""

from __future__ import annotations

import onnx

from ._graph import GraphBuilder

__all__ = ["FIRES", "squeezenet"]

#: (squeeze, expand 1x1, expand 3x3) channels of each fire module, with a max pool (ceil_mode,
#: as torchvision) before the modules marked True.
FIRES = (
    (16, 64, 64, False),
    (16, 64, 64, False),
    (32, 128, 128, True),
    (32, 128, 128, False),
    (48, 192, 192, True),
    (48, 192, 192, False),
    (64, 256, 256, False),
    (64, 256, 256, False),
)


def _pool(g: GraphBuilder, name: str, x: str) -> str:
    return g.node("MaxPool", name, [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)


def squeezenet(image_size: int = 224, num_classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """Stem conv3x3/2 64 + ReLU, max pool, 8 fire modules (squeeze 1x1 + ReLU, expand 1x1 and
    3x3 + ReLU, Concat along channels) with two more max pools, Dropout, classifier conv1x1 +
    ReLU, global average pool."""
    if image_size < 64:
        raise ValueError(f"squeezenet needs an image size of at least 64, not {image_size}")
    g = GraphBuilder(seed)
    x = g.relu("features.1", g.conv("features.0", "input", 3, 64, 3, stride=2, bias=True))
    x, cin = _pool(g, "features.2", x), 64
    for index, (squeeze, e1, e3, pool_first) in enumerate(FIRES, start=3):
        if pool_first:
            x = _pool(g, f"features.{index}.pool", x)
        name = f"features.{index}"
        s = g.relu(
            f"{name}.squeeze_activation", g.conv(f"{name}.squeeze", x, cin, squeeze, 1, bias=True)
        )
        a = g.relu(
            f"{name}.expand1x1_activation",
            g.conv(f"{name}.expand1x1", s, squeeze, e1, 1, bias=True),
        )
        b = g.relu(
            f"{name}.expand3x3_activation",
            g.conv(f"{name}.expand3x3", s, squeeze, e3, 3, pad=1, bias=True),
        )
        x, cin = g.node("Concat", f"{name}.cat", [a, b], axis=1), e1 + e3
    x = g.node("Dropout", "classifier.0", [x])
    x = g.relu("classifier.2", g.conv("classifier.1", x, cin, num_classes, 1, bias=True))
    x = g.global_avg_pool("classifier.3", x)
    g.node("Flatten", "flatten", [x], output="logits", axis=1)
    return g.model(
        "squeezenet1_1",
        {"input": (1, 3, image_size, image_size)},
        {"logits": (1, num_classes)},
        f"SqueezeNet 1.1 {image_size}x{image_size}, seeded random weights (seed {seed})",
    )

"""GoogLeNet (Inception v1, Szegedy et al. 2014, as the BVLC Caffe model: LRN after the stem, max
pools in ceil mode, no auxiliary classifiers) as an ONNX graph with seeded random weights."""

from __future__ import annotations

import onnx

from ._graph import GraphBuilder

__all__ = ["INCEPTIONS", "googlenet"]

#: Inception modules: name, 1x1, (3x3 reduce, 3x3), (5x5 reduce, 5x5), pool projection; a max
#: pool 3x3/2 comes before the modules marked True.
INCEPTIONS = (
    ("3a", 64, (96, 128), (16, 32), 32, False),
    ("3b", 128, (128, 192), (32, 96), 64, False),
    ("4a", 192, (96, 208), (16, 48), 64, True),
    ("4b", 160, (112, 224), (24, 64), 64, False),
    ("4c", 128, (128, 256), (24, 64), 64, False),
    ("4d", 112, (144, 288), (32, 64), 64, False),
    ("4e", 256, (160, 320), (32, 128), 128, False),
    ("5a", 256, (160, 320), (32, 128), 128, True),
    ("5b", 384, (192, 384), (48, 128), 128, False),
)


def _conv_relu(g: GraphBuilder, name: str, x: str, cin: int, cout: int, k: int, **kw) -> str:
    return g.relu(f"{name}.relu", g.conv(name, x, cin, cout, k, bias=True, **kw))


def _pool(g: GraphBuilder, name: str, x: str) -> str:
    return g.node("MaxPool", name, [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)


def _lrn(g: GraphBuilder, name: str, x: str) -> str:
    return g.node("LRN", name, [x], size=5, alpha=1e-4, beta=0.75, bias=1.0)


def _inception(g: GraphBuilder, spec: tuple, x: str, cin: int) -> tuple[str, int]:
    name, c1, (r3, c3), (r5, c5), cp, _ = spec
    name = f"inception_{name}"
    a = _conv_relu(g, f"{name}.1x1", x, cin, c1, 1)
    b = _conv_relu(g, f"{name}.3x3", _conv_relu(g, f"{name}.3x3_reduce", x, cin, r3, 1), r3, c3, 3,
                   pad=1)  # fmt: skip
    c = _conv_relu(g, f"{name}.5x5", _conv_relu(g, f"{name}.5x5_reduce", x, cin, r5, 1), r5, c5, 5,
                   pad=2)  # fmt: skip
    p = g.node("MaxPool", f"{name}.pool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1] * 4)
    d = _conv_relu(g, f"{name}.pool_proj", p, cin, cp, 1)
    return g.node("Concat", f"{name}.output", [a, b, c, d], axis=1), c1 + c3 + c5 + cp


def googlenet(image_size: int = 224, num_classes: int = 1000, seed: int = 0) -> onnx.ModelProto:
    """conv 7x7/2 64 + ReLU, max pool, LRN, conv 1x1 64, conv 3x3 192 (+ ReLU), LRN, max pool,
    inception 3a 3b, max pool, 4a-4e, max pool, 5a 5b, global average pool, Dropout, FC."""
    if image_size < 32:
        raise ValueError(f"googlenet needs an image size of at least 32, not {image_size}")
    g = GraphBuilder(seed)
    x = _conv_relu(g, "conv1.7x7_s2", "input", 3, 64, 7, stride=2, pad=3)
    x = _lrn(g, "pool1.norm1", _pool(g, "pool1.3x3_s2", x))
    x = _conv_relu(g, "conv2.3x3_reduce", x, 64, 64, 1)
    x = _conv_relu(g, "conv2.3x3", x, 64, 192, 3, pad=1)
    x, cin = _pool(g, "pool2.3x3_s2", _lrn(g, "conv2.norm2", x)), 192
    for spec in INCEPTIONS:
        if spec[-1]:
            x = _pool(g, f"pool_{spec[0]}", x)
        x, cin = _inception(g, spec, x, cin)
    x = g.flatten("flatten", g.global_avg_pool("pool5", x))
    x = g.node("Dropout", "pool5.drop", [x])
    g.gemm("loss3.classifier", x, cin, num_classes, output="logits")
    return g.model(
        "googlenet",
        {"input": (1, 3, image_size, image_size)},
        {"logits": (1, num_classes)},
        f"GoogLeNet (Inception v1) {image_size}x{image_size}, seeded random weights (seed {seed})",
    )

"""Small test models: a residual CNN and an MLP, with seeded random weights."""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from ._graph import GraphBuilder

__all__ = ["MIN_CNN_IMAGE_SIZE", "mlp", "small_cnn"]

#: Smallest input of :func:`small_cnn`: the 2x2 max pool needs a 2x2 map after the stride-2 conv.
MIN_CNN_IMAGE_SIZE = 3


def small_cnn(*, image_size: int = 32, num_classes: int = 10, seed: int = 0) -> onnx.ModelProto:
    """A three-conv CNN with one residual Add.

    ``conv1`` 3x3 3->16, BN, Relu; ``conv2`` 3x3/2 16->32, BN, Relu; ``maxpool`` 2x2/2;
    ``conv3`` 3x3 32->32, BN, ``add`` of the max-pool output, Relu; GlobalAveragePool, Flatten,
    ``fc`` Gemm. Convs have no bias and pad 1.

    Parameters
    ----------
    image_size
        Height and width of ``"input"``, shape ``[1, 3, image_size, image_size]``; at least 3.
    num_classes
        Width of ``"logits"``, shape ``[1, num_classes]``.
    seed
        Seed of the weights; the same arguments give a byte-identical model.

    Raises
    ------
    ValueError
        On ``image_size`` below 3, a non-positive ``num_classes`` or a negative seed.
    """
    if image_size < MIN_CNN_IMAGE_SIZE:
        raise ValueError(f"image_size must be >= {MIN_CNN_IMAGE_SIZE}, got {image_size!r}")
    if num_classes < 1:
        raise ValueError(f"num_classes must be positive, got {num_classes!r}")
    g = GraphBuilder(seed)
    x = g.conv("conv1", "input", 3, 16, 3, 1, 1)
    x = g.relu("relu1", g.batch_norm("bn1", x, 16))
    x = g.conv("conv2", x, 16, 32, 3, 2, 1)
    x = g.relu("relu2", g.batch_norm("bn2", x, 32))
    pooled = g.max_pool("maxpool", x, 2, 2)
    x = g.batch_norm("bn3", g.conv("conv3", pooled, 32, 32, 3, 1, 1), 32)
    x = g.relu("relu3", g.add("add", x, pooled))
    x = g.flatten("flatten", g.global_avg_pool("avgpool", x))
    g.gemm("fc", x, 32, num_classes, output="logits")
    return g.model(
        "small_cnn",
        {"input": [1, 3, image_size, image_size]},
        {"logits": [1, num_classes]},
        f"small_cnn: random weights (seed {seed}), {image_size}x{image_size}",
    )


def mlp(
    *,
    in_features: int = 64,
    hidden: Sequence[int] = (128, 64),
    num_classes: int = 10,
    seed: int = 0,
) -> onnx.ModelProto:
    """A multilayer perceptron exercising both fully connected forms and ReLU6.

    Hidden layer ``fc{i}`` (1-based) is Gemm(transB=1) for odd ``i`` and MatMul + Add of the bias
    for even ``i``; its activation ``act{i}`` is Clip(0, 6) (ReLU6) on the last hidden layer and
    Relu on the others. The classifier ``fc`` is Gemm(transB=1) with bias. With the default
    ``hidden=(128, 64)``: Gemm-Relu, MatMul-Add-Clip, Gemm.

    Parameters
    ----------
    in_features
        Width of ``"input"``, shape ``[1, in_features]``.
    hidden
        Widths of the hidden layers (may be empty).
    num_classes
        Width of ``"logits"``, shape ``[1, num_classes]``.
    seed
        Seed of the weights; the same arguments give a byte-identical model.

    Raises
    ------
    ValueError
        On a non-positive width or a negative seed.
    """
    widths = (in_features, *hidden, num_classes)
    if any(w < 1 for w in widths):
        raise ValueError(f"layer widths must be positive, got {widths!r}")
    g = GraphBuilder(seed)
    x = "input"
    for i, (fin, fout) in enumerate(zip(widths[:-2], widths[1:-1], strict=True), start=1):
        x = g.gemm(f"fc{i}", x, fin, fout) if i % 2 else g.matmul_add(f"fc{i}", x, fin, fout)
        x = g.relu6(f"act{i}", x) if i == len(hidden) else g.relu(f"act{i}", x)
    g.gemm("fc", x, widths[-2], num_classes, output="logits")
    return g.model(
        "mlp",
        {"input": [1, in_features]},
        {"logits": [1, num_classes]},
        f"mlp {'-'.join(map(str, widths))}: random weights (seed {seed})",
    )

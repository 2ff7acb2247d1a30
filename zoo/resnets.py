"""torchvision-style ResNet-18/34/50 as ONNX graphs with seeded random weights."""

from __future__ import annotations

from typing import Literal, NamedTuple

import onnx

from ._graph import GraphBuilder

__all__ = ["RESIDUAL_GAMMA_SCALE", "RESNET_SPECS", "ResNetSpec", "resnet"]

#: Factor on the gamma of the last BatchNormalization of every residual branch. Near-zero init of
#: that gamma is the usual trick to keep deep ResNets stable; here it stops the activation scale
#: from growing block after block under random (untrained) weights. With 0.2 the RMS of the
#: activations grows about 6x from the stem to the end of ResNet-50 (0.3: 13x, 0.5: 50x).
RESIDUAL_GAMMA_SCALE = 0.2


class ResNetSpec(NamedTuple):
    """Architecture of one ResNet depth: block type, blocks per stage, block expansion."""

    block: Literal["basic", "bottleneck"]
    layers: tuple[int, int, int, int]
    expansion: int


RESNET_SPECS: dict[int, ResNetSpec] = {
    18: ResNetSpec("basic", (2, 2, 2, 2), 1),
    34: ResNetSpec("basic", (3, 4, 6, 3), 1),
    50: ResNetSpec("bottleneck", (3, 4, 6, 3), 4),
}

_STAGE_PLANES = (64, 128, 256, 512)


def _conv_bn(
    g: GraphBuilder,
    prefix: str,
    index: int,
    x: str,
    cin: int,
    cout: int,
    kernel: int,
    stride: int = 1,
    gamma_scale: float = 1.0,
) -> str:
    """``{prefix}.conv{index}`` (padding ``kernel // 2``) then ``{prefix}.bn{index}``."""
    out = g.conv(f"{prefix}.conv{index}", x, cin, cout, kernel, stride, kernel // 2)
    return g.batch_norm(f"{prefix}.bn{index}", out, cout, gamma_scale)


def _block(
    g: GraphBuilder, spec: ResNetSpec, prefix: str, x: str, cin: int, planes: int, stride: int
) -> str:
    """One residual block; the branch's last BN gamma is scaled by ``RESIDUAL_GAMMA_SCALE``.

    BasicBlock: conv3x3(stride)-BN-Relu-conv3x3-BN. Bottleneck (v1.5, stride on the 3x3):
    conv1x1-BN-Relu-conv3x3(stride)-BN-Relu-conv1x1-BN. Then Add of the shortcut and Relu. The
    shortcut is ``downsample`` (1x1 conv with stride, BN) when the shape changes, else ``x``.
    """
    cout = planes * spec.expansion
    scale = RESIDUAL_GAMMA_SCALE
    if spec.block == "basic":
        out = g.relu(f"{prefix}.relu1", _conv_bn(g, prefix, 1, x, cin, planes, 3, stride))
        out = _conv_bn(g, prefix, 2, out, planes, cout, 3, gamma_scale=scale)
        last = 2
    else:
        out = g.relu(f"{prefix}.relu1", _conv_bn(g, prefix, 1, x, cin, planes, 1))
        out = g.relu(f"{prefix}.relu2", _conv_bn(g, prefix, 2, out, planes, planes, 3, stride))
        out = _conv_bn(g, prefix, 3, out, planes, cout, 1, gamma_scale=scale)
        last = 3
    shortcut = x
    if stride != 1 or cin != cout:
        shortcut = g.conv(f"{prefix}.downsample.0", x, cin, cout, 1, stride)
        shortcut = g.batch_norm(f"{prefix}.downsample.1", shortcut, cout)
    return g.relu(f"{prefix}.relu{last}", g.add(f"{prefix}.add", out, shortcut))


def resnet(
    depth: int, *, image_size: int = 224, num_classes: int = 1000, seed: int = 0
) -> onnx.ModelProto:
    """A torchvision-topology ResNet with seeded random weights.

    Parameters
    ----------
    depth
        18, 34 (BasicBlock) or 50 (Bottleneck, torchvision v1.5: stride on the 3x3 conv).
    image_size
        Height and width of the input ``"input"``, shape ``[1, 3, image_size, image_size]``.
    num_classes
        Width of the output ``"logits"``, shape ``[1, num_classes]``.
    seed
        Seed of the weights; the same arguments give a byte-identical model.

    Returns
    -------
    onnx.ModelProto
        Opset 17. Conv nodes have no bias; each is followed by its own BatchNormalization node.
        Node names are torchvision module paths (``"conv1"``, ``"layer1.0.bn1"``,
        ``"layer2.0.downsample.0"``, ``"fc"``); initializers are the state-dict keys.

    Raises
    ------
    ValueError
        On an unknown depth, a non-positive ``image_size`` or ``num_classes``, a negative seed.
    """
    if depth not in RESNET_SPECS:
        raise ValueError(f"resnet depth must be one of {sorted(RESNET_SPECS)}, got {depth!r}")
    if image_size < 1:
        raise ValueError(f"image_size must be positive, got {image_size!r}")
    if num_classes < 1:
        raise ValueError(f"num_classes must be positive, got {num_classes!r}")
    spec = RESNET_SPECS[depth]
    g = GraphBuilder(seed)
    x = g.conv("conv1", "input", 3, 64, 7, 2, 3)
    x = g.relu("relu", g.batch_norm("bn1", x, 64))
    x = g.max_pool("maxpool", x, 3, 2, 1)
    cin = 64
    for stage, (planes, blocks) in enumerate(zip(_STAGE_PLANES, spec.layers, strict=True)):
        for index in range(blocks):
            stride = 2 if stage > 0 and index == 0 else 1
            x = _block(g, spec, f"layer{stage + 1}.{index}", x, cin, planes, stride)
            cin = planes * spec.expansion
    x = g.flatten("flatten", g.global_avg_pool("avgpool", x))
    g.gemm("fc", x, cin, num_classes, output="logits")
    name = f"resnet{depth}"
    return g.model(
        name,
        {"input": [1, 3, image_size, image_size]},
        {"logits": [1, num_classes]},
        f"{name}: torchvision topology, random weights (seed {seed}), {image_size}x{image_size}",
    )

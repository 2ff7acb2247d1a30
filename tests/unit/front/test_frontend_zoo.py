"""Zoo models end to end through the front end: integer reference vs fp32 onnxruntime.

Expected node counts come from the architectures (torchvision ResNet tables, the documented small
models), not from the compiler. The fp32 reference is onnxruntime called directly here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import zoo
from arch.reference import evaluate
from compiler.errors import CompileError
from compiler.frontend import compile_front, dequantize, quantize_input
from compiler.ir import Graph
from compiler.onnx import load_onnx
from compiler.passes import canonicalize
from sim.quality.accuracy import compare_fp32

#: torchvision ResNets: block type, blocks per stage.
ARCH: dict[str, tuple[str, tuple[int, int, int, int]]] = {
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet34": ("basic", (3, 4, 6, 3)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
}
CASES: list[tuple[str, int | None]] = [
    ("resnet18", 64),
    ("resnet34", 64),
    ("resnet50", 64),
    ("resnet18", 224),
    ("cnn", 32),
    ("mlp", None),
]


def expected(name: str) -> tuple[Counter[str], int]:
    """IR op counts after canonicalize and the number of convs/gemms with a fused residual."""
    if name == "cnn":  # conv1, conv2, maxpool, conv3 (+ add of the max-pool output), gap, fc
        return Counter(conv=3, maxpool=1, global_avgpool=1, flatten=1, gemm=1), 1
    if name == "mlp":  # Gemm-Relu, MatMul-Add-Clip, Gemm
        return Counter(gemm=3), 0
    block, layers = ARCH[name]
    per_block, expansion = (2, 1) if block == "basic" else (3, 4)
    downsamples, cin = 0, 64
    for stage, planes in enumerate((64, 128, 256, 512)):
        downsamples += stage > 0 or cin != planes * expansion
        cin = planes * expansion
    convs = 1 + sum(layers) * per_block + downsamples  # every BN folds, every Relu fuses
    ops = Counter(conv=convs, maxpool=1, global_avgpool=1, flatten=1, gemm=1)
    return ops, sum(layers)  # every residual Add fuses into the block's last conv


def test_expectations_match_the_published_architecture() -> None:
    assert expected("resnet18")[0]["conv"] == 20 and expected("resnet18")[1] == 8
    assert expected("resnet34")[0]["conv"] == 36 and expected("resnet34")[1] == 16
    assert expected("resnet50")[0]["conv"] == 53 and expected("resnet50")[1] == 16


@pytest.fixture(scope="module")
def models() -> Iterator[dict[tuple[str, int | None], onnx.ModelProto]]:
    cache = {(name, size): zoo.build(name, image_size=size) for name, size in CASES}
    yield cache
    cache.clear()


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), options)
    return np.asarray(sess.run(["logits"], {"input": x})[0], np.float64).reshape(-1)


@pytest.mark.parametrize(("name", "size"), CASES[:3] + CASES[4:])
def test_node_counts_after_canonicalize(
    models: dict[tuple[str, int | None], onnx.ModelProto], name: str, size: int | None
) -> None:
    g = canonicalize.run(load_onnx(models[name, size]))
    ops, residuals = expected(name)
    assert Counter(n.op for n in g.nodes) == ops
    assert sum(len(n.inputs) == 2 for n in g.nodes) == residuals


@pytest.mark.parametrize(("name", "size"), CASES)
def test_integer_reference_matches_fp32(
    models: dict[tuple[str, int | None], onnx.ModelProto], name: str, size: int | None
) -> None:
    model = models[name, size]
    g: Graph = compile_front(model)
    assert g.quantized and Counter(n.op for n in g.nodes) == expected(name)[0]
    x = np.random.default_rng(2024).standard_normal(g.tensors["input"].shape).astype(np.float32)
    scale_in, scale_out = g.tensors["input"].scale, g.tensors["logits"].scale
    assert scale_in is not None and scale_out is not None
    values = evaluate(g, quantize_input(x, scale_in))
    assert all(v.dtype == np.int8 for v in values.values())
    ours = dequantize(values["logits"], scale_out).astype(np.float64).reshape(-1)
    ref = _ort(model, x)
    cosine = float(ours @ ref / (np.linalg.norm(ours) * np.linalg.norm(ref)))
    top1 = bool(np.argmax(ours) == np.argmax(ref))
    print(f"{name}@{size}: cosine {cosine:.5f}, top-1 agree {top1}")
    assert cosine > 0.99
    assert top1
    if size is not None and size > 64 or name in ("resnet34", "resnet50"):
        return  # compare_fp32 repeats the evaluation: check it on the cheaper models only
    report = compare_fp32(model, g, x)
    assert report["cosine_vs_fp32"] == pytest.approx(cosine, abs=1e-6)
    assert report["top1_agree_fp32"] == top1
    assert report["max_abs_err"] == pytest.approx(float(np.abs(ours - ref).max()), rel=1e-4)


def test_compile_from_path_and_user_calibration(tmp_path: Path) -> None:
    model = zoo.build("cnn", image_size=16)
    path = tmp_path / "cnn.onnx"
    onnx.save(model, path)
    from_proto, from_path = compile_front(model), compile_front(str(path))
    assert from_proto.summary() == from_path.summary()
    rng = np.random.default_rng(7)
    wide = [3 * rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(2)]
    custom = compile_front(path, calibration=wide)
    s_default, s_custom = from_proto.tensors["input"].scale, custom.tensors["input"].scale
    assert s_default is not None and s_custom is not None
    assert s_custom == pytest.approx(max(float(np.abs(w).max()) for w in wide) / 127)
    assert s_custom > 2 * s_default


def test_front_end_errors_are_compile_errors(tmp_path: Path) -> None:
    with pytest.raises(CompileError, match="no such file"):
        compile_front(tmp_path / "missing.onnx")

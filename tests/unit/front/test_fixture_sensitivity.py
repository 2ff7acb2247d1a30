"""The committed Hugging Face and timm fixtures with a float input are nets a trained one could
be: in fp32 (onnxruntime alone), noise 40 dB below the input moves their output to a cosine of
at least 0.99 (:func:`tests.fixtures.hf.survey.fp32_sensitivity`). A net below it amplifies
every int8 rounding whatever runs it, so its quantized cosine would measure the draw of its
weights, not the framework (MobileViT's fixture was at 0.982 before its transformer branches
were drawn at a trained net's scale, ``tests/fixtures/hf/export_hf.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.fixtures.hf.survey import FIXTURES, HERE, fp32_sensitivity

#: The fixtures fed a float tensor: the images and BERT's ``inputs_embeds``.
FLOAT_INPUT = [n for n in FIXTURES if n.startswith(("timm_", "hf_vit_", "hf_bert_embeds_"))]


def _elementwise(tmp_path: Path, gain: float, op: str) -> Path:
    """y = op(gain * x) on a (1, 3, 8, 8) float input."""
    nodes = [
        helper.make_node("Mul", ["x", "gain"], ["scaled"]),
        helper.make_node(op, ["scaled"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "elementwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])],
        [numpy_helper.from_array(np.array(gain, np.float32), "gain")],
    )
    path = tmp_path / f"{op}_{gain}.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("snr_db", [40.0, 30.0])
def test_identity_loses_what_the_noise_power_says(tmp_path: Path, snr_db: float) -> None:
    """For y = x, noise at SNR s (nearly orthogonal to x in 192 dimensions) gives
    1 - cos = 1 - 1 / sqrt(1 + 10^(-s/10)), about 10^(-s/10) / 2."""
    own = fp32_sensitivity(_elementwise(tmp_path, 1.0, "Identity"), snr_db=snr_db)
    assert own is not None
    expected = 1 - 1 / np.sqrt(1 + 10 ** (-snr_db / 10))
    assert 1 - own == pytest.approx(expected, rel=0.2)


def test_a_chaotic_net_is_told(tmp_path: Path) -> None:
    """sin(1000 x): a 1% perturbation turns each output by about 10 rad - uncorrelated."""
    own = fp32_sensitivity(_elementwise(tmp_path, 1000.0, "Sin"))
    assert own is not None and abs(own) < 0.3, own


def test_token_ids_take_no_noise() -> None:
    assert fp32_sensitivity(HERE / "hf_bert_ts.onnx") is None


@pytest.mark.parametrize("name", FLOAT_INPUT)
def test_fixture_is_not_chaotic(name: str) -> None:
    own = fp32_sensitivity(HERE / f"{name}.onnx")
    assert own is not None, f"{name}: no float input"
    assert own >= 0.99, f"{name}: fp32 cosine {own:.4f} at 40 dB input SNR"


def test_every_image_fixture_is_measured() -> None:
    """The timm models in both exports and the Hugging Face ViT and BERT-embeds fixtures."""
    assert len(FLOAT_INPUT) == 14, FLOAT_INPUT

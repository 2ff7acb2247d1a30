"""Golden listings: three small graphs compiled for the "tiny" config with fixed seeds, rendered
with :func:`arch.listing.render` and compared with the committed ``tests/listings/<name>.txt``.

A change that alters a listing says so: any difference in the memory map, layer table, program
or descriptor table fails with a unified diff. If the change is intended, regenerate the files
with ``UPDATE_LISTINGS=1 .venv/bin/python -m pytest tests/unit/back/test_listings.py`` and commit
the
new listings together with the change, so the review shows what the compiler now emits.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import zoo
from arch import listing
from arch.config import PRESETS
from compiler.export import to_executable
from compiler.frontend import compile_front
from compiler.passes import run_back
from sim import knobs

LISTINGS = Path(__file__).resolve().parents[2] / "listings"
UPDATE = knobs.UPDATE_LISTINGS.get() == "1"


def under_ci() -> bool:
    return knobs.CI.get().strip().lower() not in ("", "0", "false")


def _model(
    nodes: list[onnx.NodeProto], inits: dict[str, np.ndarray], x_shape: list[int], out: str
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _conv_inits(rng: np.random.Generator, name: str, cin: int, cout: int) -> dict:
    return {
        f"{name}.w": rng.normal(0, math.sqrt(2 / (cin * 9)), (cout, cin, 3, 3)),
        f"{name}.b": rng.normal(0, 0.1, cout),
    }


def _conv(name: str, x: str, out: str) -> onnx.NodeProto:
    return helper.make_node(
        "Conv",
        [x, f"{name}.w", f"{name}.b"],
        [out],
        name=name,
        kernel_shape=[3, 3],
        pads=[1, 1, 1, 1],
    )


def conv_relu() -> onnx.ModelProto:
    """16 channels, 8x8, one 3x3 conv 16->16 with Relu."""
    rng = np.random.default_rng(1)
    nodes = [_conv("conv", "x", "c"), helper.make_node("Relu", ["c"], ["y"], name="relu")]
    return _model(nodes, _conv_inits(rng, "conv", 16, 16), [1, 16, 8, 8], "y")


def residual_block() -> onnx.ModelProto:
    """conv+BN+relu, conv+BN, Add of the block input, Relu (8 channels, 8x8)."""
    rng = np.random.default_rng(2)
    inits = _conv_inits(rng, "conv1", 8, 8) | _conv_inits(rng, "conv2", 8, 8)
    nodes = []
    for i, x in ((1, "x"), (2, "r1")):
        inits |= {
            f"bn{i}.g": rng.uniform(0.5, 1.5, 8),
            f"bn{i}.b": rng.normal(0, 0.2, 8),
            f"bn{i}.m": rng.normal(0, 0.2, 8),
            f"bn{i}.v": rng.uniform(0.5, 2.0, 8),
        }
        nodes += [
            _conv(f"conv{i}", x, f"c{i}"),
            helper.make_node(
                "BatchNormalization",
                [f"c{i}", f"bn{i}.g", f"bn{i}.b", f"bn{i}.m", f"bn{i}.v"],
                [f"n{i}"],
                name=f"bn{i}",
            ),
        ]
        if i == 1:
            nodes.append(helper.make_node("Relu", ["n1"], ["r1"], name="relu1"))
    nodes += [
        helper.make_node("Add", ["n2", "x"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["y"], name="relu2"),
    ]
    return _model(nodes, inits, [1, 8, 8, 8], "y")


GRAPHS: dict[str, Callable[[], onnx.ModelProto]] = {
    "conv_relu": conv_relu,
    "residual_block": residual_block,
    "mlp": lambda: zoo.build("mlp", seed=0),
}


def render(name: str) -> str:
    graph = compile_front(GRAPHS[name](), seed=0)
    return listing.render(to_executable(run_back(graph, PRESETS["tiny"]), name))


@pytest.mark.parametrize("name", list(GRAPHS))
def test_listing_matches_the_committed_file(name: str) -> None:
    text = render(name)
    path = LISTINGS / f"{name}.txt"
    if UPDATE and under_ci():
        pytest.fail(
            f"UPDATE_LISTINGS=1 is refused under CI (CI={knobs.CI.get()!r}): it rewrites the "
            "committed listings instead of checking them; unset UPDATE_LISTINGS",
            pytrace=False,
        )
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.is_file(), f"{path} is missing; create it with UPDATE_LISTINGS=1"
    committed = path.read_text()
    if text != committed:
        diff = "".join(
            difflib.unified_diff(
                committed.splitlines(keepends=True),
                text.splitlines(keepends=True),
                fromfile=f"tests/listings/{name}.txt (committed)",
                tofile=f"{name} (compiled now)",
            )
        )
        pytest.fail(
            f"the listing of {name} changed; if intended, rerun with UPDATE_LISTINGS=1 and "
            f"commit it:\n{diff}",
            pytrace=False,
        )


def test_listing_is_deterministic_and_reflects_the_graph() -> None:
    """The comparison above means something: a listing is stable across compiles, and a change
    to the compiled graph (here the conv loses its Relu) shows up in it."""
    text = render("conv_relu")
    assert text == render("conv_relu")
    assert "<- conv (conv)" in text and "; descriptor table" in text
    graph = compile_front(conv_relu(), seed=0)
    graph.nodes[0].attrs["act"] = None  # relu -> no clamp at 0: the stores change
    graph.nodes[0].params["clamp"] = np.array([-128, 127])
    other = listing.render(to_executable(run_back(graph, PRESETS["tiny"]), "conv_relu"))
    assert other != text
    assert "clamp_lo=-128" in other and "clamp_lo=-128" not in text


@pytest.mark.parametrize("ci", ["1", "true"])
def test_update_listings_is_refused_under_ci(ci: str, monkeypatch) -> None:
    """Under CI the check fails (pytest exits 1) and leaves the committed file as it was."""
    name = next(iter(GRAPHS))
    committed = (LISTINGS / f"{name}.txt").read_bytes()
    monkeypatch.setitem(globals(), "UPDATE", True)
    monkeypatch.setenv(knobs.CI.name, ci)
    with pytest.raises(pytest.fail.Exception) as refused:
        test_listing_matches_the_committed_file(name)
    assert str(refused.value) == (
        f"UPDATE_LISTINGS=1 is refused under CI (CI={ci!r}): it rewrites the committed listings "
        "instead of checking them; unset UPDATE_LISTINGS"
    )
    assert (LISTINGS / f"{name}.txt").read_bytes() == committed

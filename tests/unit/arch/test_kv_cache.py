"""The integer reference of KV-cache decoding (arch/kv_cache.py) against the full forward pass.

Chargpt variants compiled for ``tiny`` with the norm unit: the reference graph of the full
forward pass over T tokens is evaluated once (:func:`arch.reference.evaluate`); a prompt fills
the cache, then every decode step - one row through the graph, attention over the cache - must
give exactly row p of the full pass's logits, and the cache must end equal to the full pass's
keys and values. A context of 20 puts steps on both sides of a 16-position tile and of the
tiny config's 4-byte lines. A mask that hides the current position (an off-by-one) must fail.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from arch import kv_cache
from arch.config import PRESETS
from arch.ops.spec import ReferenceError
from arch.reference import evaluate
from compiler.compile import compile_model
from zoo import chargpt as chargpt_module
from zoo.chargpt import chargpt
from zoo.chargpt_train import TINY

TINY_NORM = dataclasses.replace(PRESETS["tiny"], norm_unit=True)
#: Crosses a 16-position tile (and 4-byte lines); three training steps: bit-exactness does not
#: need a good model.
WIDE = dataclasses.replace(TINY, context=20, layers=2, steps=3)


@pytest.fixture(scope="module", params=[TINY, WIDE], ids=["context8", "context20"])
def decoder(request, tmp_path_factory):
    shape = request.param
    path = tmp_path_factory.mktemp("kv") / "chargpt.onnx"
    import onnx

    onnx.save(chargpt(shape=shape), path)
    calibration = chargpt_module.calibration_set(4, shape)
    exe = compile_model(path, TINY_NORM, calibration=calibration).executable
    return exe.reference, shape


def _full_pass(graph, ids: np.ndarray) -> dict[str, np.ndarray]:
    shape = graph.tensors[graph.inputs[0]].shape
    return evaluate(graph, ids.astype(np.int8).reshape(shape))


def _start(graph) -> str:
    """The device input: the host input stage's output."""
    (host,) = [node for node in graph.nodes if node.op == "host"]
    return host.output


@pytest.mark.parametrize("prompt", [1, 3])
def test_decode_steps_equal_rows_of_the_full_pass(decoder, prompt) -> None:
    graph, shape = decoder
    ids = np.random.default_rng(prompt).integers(0, shape.vocab, shape.context)
    full = _full_pass(graph, ids)
    start = _start(graph)
    cache = kv_cache.prefill(graph, full, prompt)
    logits = graph.outputs[0]
    for p in range(prompt, shape.context):
        step = kv_cache.decode_step(graph, cache, start, full[start][:, p : p + 1])
        np.testing.assert_array_equal(step[logits][0, 0], full[logits][0, p], err_msg=f"p={p}")
    layout = kv_cache.kv_layout(graph)
    assert len(layout.keys) == shape.layers and layout.context == shape.context
    for name in (*layout.keys, *layout.values):
        np.testing.assert_array_equal(cache.tensors[name], full[name], err_msg=name)
    assert cache.length == shape.context
    with pytest.raises(ReferenceError, match="the cache is full: 20 positions|full: 8 pos"):
        kv_cache.decode_step(graph, cache, start, full[start][:, :1])


def test_a_batch_step_is_each_sequences_own_step(decoder) -> None:
    """Two sequences at one position through :func:`kv_cache.decode_batch`: row b is
    sequence b's :func:`kv_cache.decode_step` and row p of its full pass; each cache is its
    own; sequences at different positions are refused."""
    graph, shape = decoder
    ids = [np.random.default_rng(b + 11).integers(0, shape.vocab, shape.context) for b in (0, 1)]
    fulls = [_full_pass(graph, seq) for seq in ids]
    start, logits = _start(graph), graph.outputs[0]
    together = [kv_cache.prefill(graph, full, 2) for full in fulls]
    alone = [kv_cache.prefill(graph, full, 2) for full in fulls]
    for p in range(2, shape.context):
        rows = np.concatenate([full[start][:, p : p + 1] for full in fulls], axis=1)
        step = kv_cache.decode_batch(graph, together, start, rows)
        for b, full in enumerate(fulls):
            own = kv_cache.decode_step(graph, alone[b], start, full[start][:, p : p + 1])
            np.testing.assert_array_equal(step[logits][0, b], own[logits][0, 0])
            np.testing.assert_array_equal(step[logits][0, b], full[logits][0, p], f"p={p}")
    for cache, full in zip(together, fulls, strict=True):
        for name in cache.tensors:
            np.testing.assert_array_equal(cache.tensors[name], full[name], err_msg=name)
    behind = kv_cache.prefill(graph, fulls[0], 1)
    with pytest.raises(ReferenceError, match=r"at one position below \d+, not \[1, 2\]"):
        kv_cache.decode_batch(graph, [behind, kv_cache.prefill(graph, fulls[1], 2)], start, rows)


@pytest.mark.parametrize("blocks_of", ["columns", "rows"])
def test_a_grouped_product_pairs_each_block_of_rows_with_its_own_block(blocks_of) -> None:
    """batch_matmul of ``groups`` 3 (a decode step of 3 sequences, each row attending to its own
    cache): block g of a's rows times block g of b - b's columns (``q @ k^T`` over 3 key
    caches) or b's rows (``p @ v`` over 3 value caches) - equals the ungrouped product of
    each pair alone (2 rows a group); shapes that do not split are refused by name."""
    from arch.executable.format import ReferenceGraph, RefNode, TensorSpec
    from arch.reference import check_node, evaluate_node

    g, heads, m, k, n = 3, 2, 2, 5, 7
    rng = np.random.default_rng(41)
    b_shape = (1, heads, k, g * n) if blocks_of == "columns" else (1, heads, g * k, n)
    a = rng.integers(-128, 128, (1, heads, g * m, k)).astype(np.int8)
    b = rng.integers(-128, 128, b_shape).astype(np.int8)
    params = {"mult": np.array([1 << 14]), "shift": np.array([24]), "clamp": np.array([-128, 127])}

    def graph(a_shape, b_shape, out_shape, groups):
        tensors = {
            "a": TensorSpec("a", a_shape, 0.05), "b": TensorSpec("b", b_shape, 0.04),
            "out": TensorSpec("out", out_shape, 0.1),
        }  # fmt: skip
        attrs = {"act": None} | ({"groups": groups} if groups is not None else {})
        node = RefNode("scores", "batch_matmul", ["a", "b"], "out", attrs, params)
        return ReferenceGraph([node], tensors, ["a", "b"], ["out"]), node

    grouped, node = graph(a.shape, b.shape, (1, heads, g * m, n), g)
    check_node(grouped, node)
    out = evaluate_node(grouped, node, [a, b])
    for i in range(g):
        b_i = (
            b[..., i * n : (i + 1) * n] if blocks_of == "columns" else b[:, :, i * k : (i + 1) * k]
        )
        a_i = a[:, :, i * m : (i + 1) * m]
        alone, one = graph(a_i.shape, b_i.shape, (1, heads, m, n), None)
        check_node(alone, one)
        np.testing.assert_array_equal(
            out[:, :, i * m : (i + 1) * m], evaluate_node(alone, one, [a_i, b_i])
        )
    assert len(np.unique(out)) > 20  # (not saturated: the comparison sees values)
    bad, node = graph((1, heads, 7, k), b.shape, (1, heads, 7, n), g)
    with pytest.raises(ReferenceError, match=r"7 rows of input \(1, 2, 7, 5\) are not 3 groups"):
        check_node(bad, node)
    bad, node = graph(a.shape, (1, heads, k + 1, g * n), (1, heads, g * m, n), g)
    with pytest.raises(ReferenceError, match=r"or \(1, H, 3 x K, N\)"):
        check_node(bad, node)
    bad, node = graph(a.shape, b.shape, (1, heads, g * m, n), 0)
    with pytest.raises(ReferenceError, match="attr 'groups' must be an integer >= 1, not 0"):
        check_node(bad, node)


def test_a_mask_hiding_the_current_position_differs(decoder, monkeypatch) -> None:
    graph, shape = decoder
    ids = np.random.default_rng(7).integers(0, shape.vocab, shape.context)
    full = _full_pass(graph, ids)
    start, logits = _start(graph), graph.outputs[0]
    real = kv_cache.mask_row
    monkeypatch.setattr(kv_cache, "mask_row", lambda p, t: real(p - 1, t))
    cache = kv_cache.prefill(graph, full, 2)
    rows = [
        kv_cache.decode_step(graph, cache, start, full[start][:, p : p + 1])[logits][0, 0]
        for p in range(2, shape.context)
    ]
    assert any(not np.array_equal(r, full[logits][0, p]) for p, r in enumerate(rows, 2))


def test_mask_row_codes() -> None:
    np.testing.assert_array_equal(
        kv_cache.mask_row(2, 5).ravel(), np.array([0, 0, 0, -128, -128], np.int8)
    )


def test_refusals_name_what_is_wrong(decoder) -> None:
    graph, shape = decoder
    full = _full_pass(graph, np.zeros(shape.context, np.int64) + 5)
    with pytest.raises(ReferenceError, match=f"does not fit a context of {shape.context}"):
        kv_cache.prefill(graph, full, shape.context + 1)
    cache = kv_cache.prefill(graph, full, 1)
    with pytest.raises(ReferenceError, match="'nowhere' is not a node output"):
        kv_cache.decode_step(graph, cache, "nowhere", full[_start(graph)][:, :1])
    softmax = next(n for n in graph.nodes if n.op == "row_softmax")
    acausal = dataclasses.replace(
        graph,
        nodes=[
            dataclasses.replace(n, attrs={"causal": False}) if n is softmax else n
            for n in graph.nodes
        ],
    )
    with pytest.raises(ReferenceError, match=f"node '{softmax.name}'.*needs a causal softmax"):
        kv_cache.kv_layout(acausal)
    pooled = dataclasses.replace(
        graph,
        nodes=[
            dataclasses.replace(n, op="select_token") if n.op == "merge_heads" else n
            for n in graph.nodes
        ],
    )
    with pytest.raises(ReferenceError, match=r"\(select_token\) is not row-wise"):
        kv_cache.kv_layout(pooled)

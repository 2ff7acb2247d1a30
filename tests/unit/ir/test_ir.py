"""Graph.verify against hand-built graphs: valid ones pass, each broken invariant is caught."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from compiler.errors import CompileError, VerifyError
from compiler.ir import Graph, Node, Tensor

RNG = np.random.default_rng(1234)


def conv_attrs(**kw: object) -> dict[str, object]:
    attrs: dict[str, object] = {
        "kernel": (3, 3),
        "stride": (1, 1),
        "pads": (1, 1, 1, 1),
        "dilation": (1, 1),
        "group": 1,
        "act": "relu",
    }
    return attrs | kw


def fp32_graph() -> Graph:
    """x (1,3,8,8) -> conv 3x3 -> maxpool 2 -> conv 1x1 (+ residual) -> gap -> flatten -> gemm
    -> softmax."""
    f32 = np.float32
    nodes = [
        Node(
            "c1",
            "conv",
            ["x"],
            "c1.out",
            conv_attrs(),
            {
                "weight": RNG.normal(size=(4, 3, 3, 3)).astype(f32),
                "bias": RNG.normal(size=4).astype(f32),
            },
            ["c1"],
        ),
        Node(
            "mp",
            "maxpool",
            ["c1.out"],
            "mp.out",
            {"kernel": (2, 2), "stride": (2, 2), "pads": (0, 0, 0, 0)},
        ),
        Node(
            "c2",
            "conv",
            ["mp.out", "mp.out"],
            "c2.out",
            conv_attrs(kernel=(1, 1), pads=(0, 0, 0, 0), act=None),
            {"weight": RNG.normal(size=(4, 4, 1, 1)).astype(f32), "bias": np.zeros(4, f32)},
        ),
        Node("gap", "global_avgpool", ["c2.out"], "gap.out"),
        Node("fl", "flatten", ["gap.out"], "fl.out"),
        Node(
            "fc",
            "gemm",
            ["fl.out"],
            "fc.out",
            {"act": None},
            {"weight": RNG.normal(size=(5, 4)).astype(f32), "bias": RNG.normal(size=5).astype(f32)},
        ),
        Node("sm", "softmax", ["fc.out"], "prob"),
    ]
    shapes = {
        "x": (1, 3, 8, 8),
        "c1.out": (1, 4, 8, 8),
        "mp.out": (1, 4, 4, 4),
        "c2.out": (1, 4, 4, 4),
        "gap.out": (1, 4, 1, 1),
        "fl.out": (1, 4),
        "fc.out": (1, 5),
        "prob": (1, 5),
    }
    tensors = {k: Tensor(k, v) for k, v in shapes.items()}
    return Graph(nodes, tensors, ["x"], ["prob"])


def _qparams(o: int, residual: bool, act: str | None) -> dict[str, np.ndarray]:
    p: dict[str, np.ndarray] = {
        "bias": RNG.integers(-1000, 1000, o).astype(np.int32),
        "mult": RNG.integers(2**30, 2**31 - 1, o).astype(np.int64),
        "shift": RNG.integers(30, 40, o).astype(np.int64),
        "clamp": np.array([0 if act else -128, 127], np.int64),
    }
    if residual:
        p |= {"res_mult": p["mult"].copy(), "res_shift": p["shift"] - 10}
    return p


def quantized_graph() -> Graph:
    """The same graph, quantized: integer params and a scale on every tensor."""
    g = fp32_graph()
    for n in g.nodes:
        if n.op in ("conv", "gemm"):
            shape = n.params["weight"].shape
            n.params = {"weight": RNG.integers(-127, 128, shape).astype(np.int8)} | _qparams(
                shape[0], len(n.inputs) == 2, n.attrs["act"]
            )
        elif n.op == "global_avgpool":
            n.params = {"mult": np.array([2**30], np.int64), "shift": np.array([34], np.int64)}
    for t in g.tensors.values():
        t.scale = 0.05
    g.tensors["prob"].scale = None
    g.quantized = True
    return g


def add_graph(quantized: bool) -> Graph:
    """x -> conv (relu) ; add(x, conv) with its own act."""
    g = fp32_graph() if not quantized else quantized_graph()
    g.nodes = g.nodes[:1] + [Node("add", "add", ["x", "x"], "add.out", {"act": "relu"})]
    g.nodes[0].inputs = ["x"]
    g.tensors = {k: g.tensors[k] for k in ("x", "c1.out")}
    g.tensors["add.out"] = Tensor("add.out", (1, 3, 8, 8), 0.05 if quantized else None)
    g.outputs = ["add.out", "c1.out"]
    if quantized:
        one = np.array([1 << 30], np.int64)
        g.nodes[1].params = (
            {k: one.copy() for k in ("a_mult", "b_mult", "mult")}
            | {k: np.array([31], np.int64) for k in ("a_shift", "b_shift", "shift")}
            | {"clamp": np.array([0, 127], np.int64)}
        )
    return g


def test_valid_graphs_pass() -> None:
    fp32_graph().verify()
    quantized_graph().verify()
    add_graph(False).verify()
    add_graph(True).verify()


def test_helpers() -> None:
    g = fp32_graph()
    producer = g.producer("mp.out")
    assert producer is not None and producer.name == "mp"
    assert g.producer("x") is None
    assert [n.name for n in g.consumers("mp.out")] == ["c2"]
    assert [n.name for n in g.consumers("c1.out")] == ["mp"]
    lines = g.summary().splitlines()
    assert len(lines) == len(g.nodes)
    assert lines[0].split()[:2] == ["conv", "c1"] and "1x4x8x8" in lines[0]


def test_copy_is_independent() -> None:
    g = fp32_graph()
    c = g.copy()
    c.nodes[0].attrs["act"] = None
    c.nodes[0].params["bias"] = np.ones(4, np.float32)
    c.tensors["x"].scale = 1.0
    c.nodes.pop()
    assert g.nodes[0].attrs["act"] == "relu" and not np.all(g.nodes[0].params["bias"] == 1)
    assert g.tensors["x"].scale is None and len(g.nodes) == 7


Breaker = Callable[[Graph], object]


def _set(node: str, key: str, value: object, where: str = "params") -> Breaker:
    def br(g: Graph) -> None:
        getattr(g.node(node), where)[key] = value

    return br


def _swap_first_two(g: Graph) -> None:
    g.nodes[0], g.nodes[1] = g.nodes[1], g.nodes[0]


def _rename_node(g: Graph) -> None:
    g.nodes[1].name = "c1"


def _unknown_input(g: Graph) -> None:
    g.nodes[1].inputs = ["nope"]


def _produced_twice(g: Graph) -> None:
    g.nodes[2].output = "mp.out"


def _wrong_output_shape(g: Graph) -> None:
    g.tensors["c1.out"].shape = (1, 4, 7, 7)


def _stale_tensor(g: Graph) -> None:
    g.tensors["ghost"] = Tensor("ghost", (1, 4))


def _missing_output(g: Graph) -> None:
    g.outputs = ["never"]


def _unknown_op(g: Graph) -> None:
    g.nodes[3].op = "tanh"


def _residual_shape(g: Graph) -> None:
    g.nodes[2].inputs = ["mp.out", "c1.out"]


def _softmax_feeds(g: Graph) -> None:
    g.nodes.append(Node("sm2", "softmax", ["prob"], "prob2"))
    g.tensors["prob2"] = Tensor("prob2", (1, 5))


def _no_nodes(g: Graph) -> None:
    g.nodes = []


def _bad_batch(g: Graph) -> None:
    g.tensors["x"].shape = (2, 3, 8, 8)


def _weight_kernel(g: Graph) -> None:
    g.node("c1").params["weight"] = g.node("c1").params["weight"][:, :, :2, :2].copy()


FP32_BREAKS: dict[str, tuple[Breaker, str]] = {
    "duplicate node name": (_rename_node, "not unique"),
    "use before def": (_swap_first_two, "neither a graph input nor produced by an earlier"),
    "unknown input": (_unknown_input, "'nope'"),
    "produced twice": (_produced_twice, "produced twice"),
    "output shape": (_wrong_output_shape, "expected (1, 4, 8, 8)"),
    "stride changes shape": (_set("c1", "stride", (2, 2), "attrs"), "expected (1, 4, 4, 4)"),
    "missing bias": (lambda g: g.node("fc").params.pop("bias"), "param 'bias' is missing"),
    "float64 weight": (
        _set("c1", "weight", np.zeros((4, 3, 3, 3))),
        "must be float32 (4, 3, 3, 3), got float64",
    ),
    "bias shape": (_set("fc", "bias", np.zeros(4, np.float32)), "must be float32 (5,)"),
    "unexpected param": (_set("mp", "mult", np.ones(1, np.int64)), "unexpected param 'mult'"),
    "weight_q alone": (
        _set("c1", "weight_q", np.zeros((4, 3, 3, 3), np.int8)),
        "weight_q and weight_scale come together",
    ),
    "extra attr": (_set("fc", "kernel", (1, 1), "attrs"), "must be exactly ['act']"),
    "missing attr": (lambda g: g.node("c1").attrs.pop("group"), "must be exactly"),
    "bad act": (_set("c1", "act", "gelu", "attrs"), "act 'gelu'"),
    "bad pads": (_set("c1", "pads", (1, 1), "attrs"), "attr 'pads' must be 4 integers >= 0"),
    "weight kernel": (_weight_kernel, "expected (O, C/group, 3, 3)"),
    "group mismatch": (_set("c1", "group", 3, "attrs"), "does not fit input"),
    "unknown op": (_unknown_op, "unknown op"),
    "residual shape": (_residual_shape, "residual 'c1.out' has shape"),
    "stale tensor": (_stale_tensor, "'ghost'"),
    "output never produced": (_missing_output, "'never' is never produced"),
    "softmax feeds a node": (_softmax_feeds, "fp32 output of a host softmax"),
    "no nodes": (_no_nodes, "has no nodes"),
    "batch 2": (_bad_batch, "must be (1, C, H, W), not (2, 3, 8, 8)"),
    "maxpool pad >= kernel": (_set("mp", "pads", (2, 2, 2, 2), "attrs"), "smaller than the kernel"),
    "gemm K mismatch": (
        _set("fc", "weight", np.zeros((5, 3), np.float32)),
        "expected (N, 4)",
    ),
}


@pytest.mark.parametrize("case", sorted(FP32_BREAKS))
def test_fp32_invariants(case: str) -> None:
    g = fp32_graph()
    breaker, message = FP32_BREAKS[case]
    breaker(g)
    with pytest.raises(VerifyError, match=None) as info:
        g.verify()
    assert message in str(info.value), str(info.value)
    assert isinstance(info.value, CompileError)


def _avgpool(g: Graph) -> None:
    g.nodes[1] = Node(
        "mp",
        "avgpool",
        ["c1.out"],
        "mp.out",
        {"kernel": (2, 2), "stride": (2, 2), "pads": (1, 1, 0, 0), "count_include_pad": 0},
        {"mult": np.array([1 << 30], np.int64), "shift": np.array([32], np.int64)},
    )
    g.tensors["mp.out"].shape = (1, 4, 5, 5)


def _no_scale(g: Graph) -> None:
    g.tensors["c1.out"].scale = None


def _input_no_scale(g: Graph) -> None:
    g.tensors["x"].scale = None


def _zero_scale(g: Graph) -> None:
    g.tensors["c2.out"].scale = 0.0


def _maxpool_scale(g: Graph) -> None:
    g.tensors["mp.out"].scale = 0.07


def _softmax_scale(g: Graph) -> None:
    g.tensors["prob"].scale = 0.01


def _import_op(g: Graph) -> None:
    g.nodes.insert(1, Node("r", "relu", ["c1.out"], "r.out"))
    g.tensors["r.out"] = Tensor("r.out", (1, 4, 8, 8), 0.05)


def _not_quantized_weight(g: Graph) -> None:
    g.node("c1").params["weight"] = np.zeros((4, 3, 3, 3), np.float32)


Q_BREAKS: dict[str, tuple[Breaker, str]] = {
    "float weight": (_not_quantized_weight, "param 'weight' must be int8, not float32"),
    "int64 bias": (
        _set("c1", "bias", np.zeros(4, np.int64)),
        "param 'bias' must be int32, not int64",
    ),
    "missing res_mult": (
        lambda g: g.node("c2").params.pop("res_mult"),
        "must be exactly ['bias', 'clamp', 'mult', 'res_mult'",
    ),
    "clamp below int8": (_set("c1", "clamp", np.array([-129, 127], np.int64)), "clamp [-129, 127]"),
    "clamp lo > hi": (_set("fc", "clamp", np.array([5, 4], np.int64)), "lo <= hi"),
    "shift 63": (_set("c1", "shift", np.full(4, 63, np.int64)), "must be in 0..62"),
    "negative res_shift": (
        _set("c2", "res_shift", np.full(4, -1, np.int64)),
        "'res_shift' must be in 0..62",
    ),
    "mult beyond int32": (
        _set("fc", "mult", np.full(5, 2**31, np.int64)),
        "'mult' must be in the int32 range",
    ),
    "mult int32 dtype": (
        _set("fc", "mult", np.ones(5, np.int32)),
        "param 'mult' must be int64, not int32",
    ),
    "tensor without scale": (_no_scale, "has no scale"),
    "input without scale": (_input_no_scale, "has no scale"),
    "zero scale": (_zero_scale, "bad scale 0.0"),
    "maxpool rescales": (_maxpool_scale, "output scale and zero point must equal every input's"),
    "softmax output scaled": (_softmax_scale, "a softmax output is fp32 and has no scale"),
    "import op": (_import_op, "unknown op in a quantized graph"),
    "gap params": (
        lambda g: g.node("gap").params.pop("shift"),
        "must be exactly ['mult', 'shift']",
    ),
    "avgpool padding without count_include_pad": (_avgpool, "count_include_pad=1"),
}


@pytest.mark.parametrize("case", sorted(Q_BREAKS))
def test_quantized_invariants(case: str) -> None:
    g = quantized_graph()
    breaker, message = Q_BREAKS[case]
    breaker(g)
    with pytest.raises(VerifyError) as info:
        g.verify()
    assert message in str(info.value), str(info.value)


def test_quantized_add_params() -> None:
    g = add_graph(True)
    g.nodes[1].params.pop("b_shift")
    with pytest.raises(
        VerifyError, match=r"params .* must be exactly \['a_mult', 'a_shift', 'b_mult', 'b_shift'"
    ):
        g.verify()
    g = add_graph(True)
    g.tensors["add.out"].shape = (1, 3, 4, 4)
    with pytest.raises(VerifyError, match=r"node 'add' \(add\): output 'add.out' has shape"):
        g.verify()


def test_error_names_node_and_op() -> None:
    g = fp32_graph()
    g.node("c1").attrs["stride"] = (2, 2)
    with pytest.raises(VerifyError) as info:
        g.verify()
    err = info.value
    assert (err.node, err.op) == ("c1", "conv")
    assert str(err).startswith("node 'c1' (conv): ")
    assert "\n" not in str(err)

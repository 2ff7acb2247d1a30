"""compiler.onnx.qoperator: onnxruntime's com.microsoft QLinear ops rewritten as QDQ. The rewritten
model must compute what the original computes (onnxruntime runs both: the integer kernel and
DequantizeLinear -> float op -> QuantizeLinear agree within one code), keep node and output
names, and refuse what it cannot express in one line naming node, op and field."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler.errors import CompileError
from compiler.onnx.qoperator import rewrite

MS = "com.microsoft"


def _model(nodes, inits, out_type=TensorProto.UINT8):
    graph = helper.make_graph(
        nodes,
        "q",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3])],
        [helper.make_tensor_value_info("y", out_type, None)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(MS, 1)]
    )
    model.ir_version = 8
    return model


def _run(model, x):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


INITS = {
    "sx": np.float32(0.05),
    "zx": np.uint8(120),
    "sa": np.float32(0.03),
    "za": np.uint8(131),
    "sy": np.float32(0.08),
    "zy": np.uint8(97),
}


@pytest.mark.parametrize(
    ("op", "inputs", "attrs"),
    [
        ("QLinearAdd", ["xq", "sx", "zx", "aq", "sa", "za", "sy", "zy"], {}),
        ("QLinearMul", ["xq", "sx", "zx", "aq", "sa", "za", "sy", "zy"], {}),
        ("QLinearSigmoid", ["xq", "sx", "zx", "sy", "zy"], {}),
        ("QLinearLeakyRelu", ["xq", "sx", "zx", "sy", "zy"], {"alpha": 0.2}),
        ("QLinearGlobalAveragePool", ["xq", "sx", "zx", "sy", "zy"], {"channels_last": 0}),
        ("QLinearConcat", ["sy", "zy", "xq", "sx", "zx", "aq", "sa", "za"], {"axis": 1}),
    ],
)
def test_rewritten_op_computes_what_the_original_does(op, inputs, attrs):
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"], name="qx"),
        helper.make_node("QuantizeLinear", ["x", "sa", "za"], ["aq"], name="qa"),
        helper.make_node(op, inputs, ["y"], name="the_op", domain=MS, **attrs),
    ]
    original = _model(nodes, INITS)
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(original)
    rewrite(rewritten)
    ops = [n.op_type for n in rewritten.graph.node]
    assert not any(n.domain == MS for n in rewritten.graph.node), ops
    assert ops[-1] == "QuantizeLinear" and rewritten.graph.node[-1].output[0] == "y"
    assert rewritten.graph.node[-2].name == "the_op"  # the float op keeps the node's name
    x = np.random.default_rng(3).standard_normal((1, 4, 3, 3)).astype(np.float32) * 3
    want, got = _run(original, x), _run(rewritten, x)
    assert got.dtype == want.dtype == np.uint8
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


def test_model_without_com_microsoft_ops_is_unchanged():
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["y"], name="q")]
    model = _model(nodes, INITS)
    before = model.SerializeToString()
    assert rewrite(model).SerializeToString() == before


def test_channels_last_is_refused_naming_node_op_and_field():
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"], name="qx"),
        helper.make_node(
            "QLinearGlobalAveragePool", ["xq", "sx", "zx", "sy", "zy"], ["y"],
            name="gap", domain=MS, channels_last=1,
        ),
    ]  # fmt: skip
    with pytest.raises(CompileError, match=r"gap.*QLinearGlobalAveragePool.*channels_last=1"):
        rewrite(_model(nodes, INITS))

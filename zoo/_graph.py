"""A small ONNX graph builder with seeded weight initialisation, shared by the zoo models."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["IR_VERSION", "OPSET", "GraphBuilder"]

OPSET = 17
IR_VERSION = 9
BN_EPSILON = 1e-5


class GraphBuilder:
    """Collects nodes and float32 initializers; draws every weight from one seeded generator.

    Each op method adds one node named ``name`` and returns its output tensor, named
    ``f"{name}.out"`` unless ``output`` is given. Parameters are named ``f"{name}.weight"``,
    ``f"{name}.bias"`` and so on, like the state-dict keys of the equivalent torch module.

    Parameters
    ----------
    seed
        Seed of the ``numpy.random.default_rng`` generator. Weights are drawn in the order the
        op methods are called, so the same calls with the same seed give identical weights.

    Raises
    ------
    ValueError
        On a negative seed.
    """

    def __init__(self, seed: int) -> None:
        if seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []

    # -- parameters ------------------------------------------------------------------------

    def param(self, name: str, value: npt.ArrayLike) -> str:
        """Add a float32 initializer ``name`` holding ``value``; return its name."""
        array = np.asarray(value, dtype=np.float32)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def he_normal(self, shape: Sequence[int], fan_in: int) -> npt.NDArray[np.float32]:
        """Kaiming-normal weights: N(0, 2 / fan_in)."""
        std = math.sqrt(2.0 / fan_in)
        return self.rng.normal(0.0, std, size=tuple(shape)).astype(np.float32)

    def fan_in_uniform(self, size: int, fan_in: int) -> npt.NDArray[np.float32]:
        """Bias values U(-1/sqrt(fan_in), 1/sqrt(fan_in)), torch's default for linear layers."""
        bound = 1.0 / math.sqrt(fan_in)
        return self.rng.uniform(-bound, bound, size=size).astype(np.float32)

    # -- ops -------------------------------------------------------------------------------

    def node(
        self,
        op_type: str,
        name: str,
        inputs: Sequence[str],
        output: str | None = None,
        **attrs: Any,
    ) -> str:
        """Add a node ``name`` of type ``op_type``; return its (single) output tensor name."""
        out = output if output is not None else f"{name}.out"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=name, **attrs))
        return out

    def conv(
        self,
        name: str,
        x: str,
        cin: int,
        cout: int,
        kernel: int,
        stride: int = 1,
        pad: int = 0,
        group: int = 1,
        bias: bool = False,
    ) -> str:
        """Square convolution, without bias unless ``bias`` (usually a BatchNormalization
        follows); ``group`` = ``cin`` = ``cout`` is a depthwise convolution."""
        fan_in = cin // group * kernel * kernel
        shape = (cout, cin // group, kernel, kernel)
        inputs = [x, self.param(f"{name}.weight", self.he_normal(shape, fan_in))]
        if bias:
            inputs.append(self.param(f"{name}.bias", self.fan_in_uniform(cout, fan_in)))
        attrs: dict[str, Any] = {"group": group} if group != 1 else {}
        return self.node(
            "Conv",
            name,
            inputs,
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad, pad, pad, pad],
            **attrs,
        )

    def batch_norm(self, name: str, x: str, channels: int, gamma_scale: float = 1.0) -> str:
        """Inference-mode BatchNormalization with random affine parameters and running stats.

        gamma ~ U(0.5, 1.5) * ``gamma_scale``, beta ~ N(0, 0.1), running mean ~ N(0, 0.1),
        running variance ~ U(0.5, 1.5), epsilon 1e-5.
        """
        rng = self.rng
        gamma = self.param(f"{name}.weight", rng.uniform(0.5, 1.5, channels) * gamma_scale)
        beta = self.param(f"{name}.bias", rng.normal(0.0, 0.1, channels))
        mean = self.param(f"{name}.running_mean", rng.normal(0.0, 0.1, channels))
        var = self.param(f"{name}.running_var", rng.uniform(0.5, 1.5, channels))
        return self.node(
            "BatchNormalization", name, [x, gamma, beta, mean, var], epsilon=BN_EPSILON
        )

    def gemm(self, name: str, x: str, fin: int, fout: int, output: str | None = None) -> str:
        """Fully connected layer ``x @ W.T + b`` as Gemm(transB=1), W of shape (fout, fin)."""
        weight = self.param(f"{name}.weight", self.he_normal((fout, fin), fin))
        bias = self.param(f"{name}.bias", self.fan_in_uniform(fout, fin))
        return self.node("Gemm", name, [x, weight, bias], output=output, transB=1)

    def matmul_add(self, name: str, x: str, fin: int, fout: int) -> str:
        """Fully connected layer as MatMul (W of shape (fin, fout)) then Add of the bias."""
        weight = self.param(f"{name}.weight", self.he_normal((fin, fout), fin))
        bias = self.param(f"{name}.bias", self.fan_in_uniform(fout, fin))
        product = self.node("MatMul", f"{name}.matmul", [x, weight])
        return self.node("Add", f"{name}.add", [product, bias])

    def relu(self, name: str, x: str) -> str:
        """Relu."""
        return self.node("Relu", name, [x])

    def relu6(self, name: str, x: str) -> str:
        """ReLU6 as Clip(min=0, max=6), the bounds given as scalar initializers (opset >= 11)."""
        lo = self.param(f"{name}.min", np.float32(0.0))
        hi = self.param(f"{name}.max", np.float32(6.0))
        return self.node("Clip", name, [x, lo, hi])

    def add(self, name: str, a: str, b: str) -> str:
        """Elementwise Add (a residual connection)."""
        return self.node("Add", name, [a, b])

    def max_pool(self, name: str, x: str, kernel: int, stride: int, pad: int = 0) -> str:
        """Square MaxPool."""
        return self.node(
            "MaxPool",
            name,
            [x],
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad, pad, pad, pad],
        )

    def global_avg_pool(self, name: str, x: str) -> str:
        """GlobalAveragePool: (N, C, H, W) -> (N, C, 1, 1)."""
        return self.node("GlobalAveragePool", name, [x])

    def flatten(self, name: str, x: str) -> str:
        """Flatten with axis 1: (N, C, 1, 1) -> (N, C)."""
        return self.node("Flatten", name, [x], axis=1)

    # -- model -----------------------------------------------------------------------------

    def model(
        self,
        graph_name: str,
        inputs: dict[str, Sequence[int]],
        outputs: dict[str, Sequence[int]],
        doc: str,
    ) -> onnx.ModelProto:
        """The finished float32 model: opset 17, IR version 9, initializers not graph inputs."""
        graph = helper.make_graph(
            self.nodes,
            graph_name,
            [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
            [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in outputs.items()],
            initializer=self.initializers,
            doc_string=doc,
        )
        return helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            ir_version=IR_VERSION,
            producer_name="systolic-cosim.zoo",
            doc_string=doc,
        )

"""partition: place every node on the accelerator or the host.

Every conv, pool, add and FC layer runs on the accelerator; flatten is a free relabelling of
bytes; only a final Softmax runs on the host (as do input quantization and output
dequantization, outside the graph).
"""

from __future__ import annotations

import math

from compiler.errors import Unplaceable
from compiler.ir import Graph
from compiler.plan import Layer, Plan

KINDS = {
    "conv": "gemm",
    "gemm": "gemm",
    "maxpool": "pool",
    "avgpool": "pool",
    "global_avgpool": "pool",
    "add": "add",
    "scale": "scale",
    "flatten": "alias",
    "concat": "concat",
    "channel_slice": "slice",
    "upsample": "upsample",
    "depth_to_space": "upsample",  # the same copies into ACC and strided stores
    "batch_matmul": "matmul",  # a gemm per head whose weights are the second activation
    "split_heads": "alias",
    "split_heads_t": "alias",  # its producer's transposing stores wrote the bytes
    "merge_heads": "alias",
}
HOST_OPS = {"softmax"}


def run(plan: Plan) -> Plan:
    graph: Graph = plan.graph
    for index, node in enumerate(graph.nodes):
        if node.op in HOST_OPS:
            if graph.consumers(node.output):
                raise Unplaceable(
                    node.name,
                    node.op,
                    "runs on the host but feeds other layers; only a final "
                    "Softmax may run on the host",
                )
            layer = Layer(index, node, "host", "host", list(node.inputs), node.output)
        elif node.op in KINDS:
            layer = Layer(index, node, "accel", KINDS[node.op], list(node.inputs), node.output)
            if node.op in ("conv", "gemm"):
                out = graph.tensors[node.output].shape
                weight = node.params["weight"]
                layer.macs = int(math.prod(out)) * int(math.prod(weight.shape[1:]))
            elif node.op == "batch_matmul":
                out = graph.tensors[node.output].shape
                layer.macs = int(math.prod(out)) * graph.tensors[node.inputs[0]].shape[3]
        else:
            raise Unplaceable(
                node.name, node.op, "has no accelerator mapping", supported=", ".join(sorted(KINDS))
            )
        plan.layers.append(layer)
    return plan

"""partition: place every node on the accelerator or the host.

Every conv, pool, add and FC layer runs on the accelerator; flatten is a free relabelling of
bytes; only a final Softmax runs on the host (as do input quantization and output
dequantization, outside the graph).
"""

from __future__ import annotations

from arch.ops import OP_SPECS
from compiler.errors import Unplaceable
from compiler.ir import Graph
from compiler.op_rules import KINDS
from compiler.plan import Layer, Plan

#: The ops a device program may leave to a host step of its own: a final Softmax. (Host
#: regions are host steps between device programs, :mod:`compiler.segments`.)
HOST_OPS = frozenset({"softmax"})


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
            layer.macs = int(OP_SPECS[node.op].macs(graph, node))
        else:
            raise Unplaceable(
                node.name, node.op, "has no accelerator mapping", supported=", ".join(sorted(KINDS))
            )
        plan.layers.append(layer)
    return plan

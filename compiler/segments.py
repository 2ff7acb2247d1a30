"""Segments: a quantized graph cut into device subgraphs and host nodes, in execution order.

Consecutive nodes the accelerator runs form one device segment - a subgraph whose inputs are
the tensors it reads from before it and whose outputs are the tensors read after it (or graph
outputs) - which the back-end passes compile into one device program. Every other node (a host
region, a Softmax) is a host step between them.
"""

from __future__ import annotations

from compiler.ir import Graph, Node
from compiler.op_rules import KINDS


def on_accelerator(node: Node) -> bool:
    return node.op in KINDS


def split(graph: Graph) -> list[Graph | Node]:
    """The device subgraphs and host nodes of ``graph``, in order."""
    runs: list[list[Node]] = []
    for node in graph.nodes:
        if on_accelerator(node) and runs and on_accelerator(runs[-1][0]):
            runs[-1].append(node)
        else:
            runs.append([node])
    steps: list[Graph | Node] = []
    for index, run in enumerate(runs):
        if not on_accelerator(run[0]):
            steps.append(run[0])
            continue
        steps.append(_subgraph(graph, run, [n for later in runs[index + 1 :] for n in later]))
    return steps


def _subgraph(graph: Graph, nodes: list[Node], later: list[Node]) -> Graph:
    produced = {n.output for n in nodes}
    inputs = list(dict.fromkeys(i for n in nodes for i in n.inputs if i not in produced))
    read_later = {i for n in later for i in n.inputs}
    outputs = [n.output for n in nodes if n.output in read_later or n.output in graph.outputs]
    names = set(inputs) | produced
    sub = Graph(
        nodes,
        {name: graph.tensors[name] for name in graph.tensors if name in names},
        inputs,
        outputs or [nodes[-1].output],
        graph.quantized,
        graph.source,
    )
    sub.verify()
    return sub

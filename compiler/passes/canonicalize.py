"""canonicalize: fold the ONNX-level import ops into the accelerator's ops (fp32 stage).

In order: drop Identity/Dropout; Sum -> add, Reshape-as-flatten -> flatten, MatMul -> gemm; fold
bias Adds, BatchNormalization and per-channel Muls (layer scales) into the preceding conv/gemm
(a BatchNormalization with none before it: a depthwise 1x1 conv of its own);
fuse Relu/ReLU6 into the producer's ``act`` (or make a ``scale`` layer of their own); fuse an
Add into a conv/gemm producer as its residual (the Add's act moves along). A fused node keeps the
producer's name and takes the consumer's output tensor, so graph output names and tensor scales
recorded on later tensors survive. Anything that cannot be folded is a :class:`CompileError`.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..errors import CompileError, Unplaceable
from ..ir import Graph, Node, Tensor, is_depthwise
from ..op_rules import FUSED_BY_QUANTIZE, IMPORT_OPS

__all__ = ["run"]

#: The ONNX op an import-only IR op came from, for messages.
_ONNX_OP = {
    "batchnorm": "BatchNormalization",
    "relu": "Relu",
    "relu6": "Clip",
    "bias_add": "Add",
    "channel_mul": "Mul",
    "identity": "Identity",
}
_WEIGHTED = ("conv", "gemm")


def run(graph: Graph) -> Graph:
    """Return the canonical form of an fp32-stage ``graph`` (which is not modified)."""
    g = graph.copy()
    _drop_identities(g)
    _rename_ops(g)
    _fold_into_weighted(g)
    _fuse_activations(g)
    _fuse_residuals(g)
    _split_groups(g)
    for node in g.nodes:
        # every handler above folds or raises; guard the contract
        if node.op in IMPORT_OPS and node.op not in FUSED_BY_QUANTIZE:
            raise CompileError(node.name, node.op, "was not canonicalized")
    return g


# --------------------------------------------------------------------------- helpers


def _sole_consumer(g: Graph, name: str) -> Node | None:
    """The one node reading ``name``, if exactly one does and it is not a graph output."""
    users = g.consumers(name)
    return users[0] if len(users) == 1 and name not in g.outputs else None


def _where(g: Graph, name: str) -> str:
    prod = g.producer(name)
    return "the graph input" if prod is None else f"'{prod.name}' ({prod.op})"


def _absorb(g: Graph, producer: Node, consumer: Node) -> None:
    """Fold ``consumer`` into ``producer``: the producer takes over the consumer's output."""
    del g.tensors[producer.output]
    producer.output = consumer.output
    producer.onnx_nodes.extend(consumer.onnx_nodes)
    g.nodes.remove(consumer)


def _foldable(g: Graph, node: Node) -> Node | None:
    """The conv/gemm producing ``node``'s input if ``node`` can fold into it, else None."""
    prod = g.producer(node.inputs[0])
    if (
        prod is not None
        and prod.op in _WEIGHTED
        and len(prod.inputs) == 1
        and prod.attrs["act"] is None
        and _sole_consumer(g, prod.output) is node
    ):
        return prod
    return None


# --------------------------------------------------------------------------- steps


def _drop_identities(g: Graph) -> None:
    for node in [n for n in g.nodes if n.op == "identity"]:
        x, y = node.inputs[0], node.output
        given = g.tensors[y] if g.tensors[y].scale is not None else g.tensors[x]
        scale, zp = given.scale, given.zero_point
        prod = g.producer(x)
        if prod is not None and _sole_consumer(g, x) is node:
            _absorb(g, prod, node)  # the producer now writes y directly
            g.tensors[y].scale, g.tensors[y].zero_point = scale, zp
            continue
        for user in g.consumers(y):
            user.inputs = [x if i == y else i for i in user.inputs]
        g.outputs = [x if o == y else o for o in g.outputs]
        del g.tensors[y]
        g.tensors[x].scale, g.tensors[x].zero_point = scale, zp
        g.nodes.remove(node)


def _rename_ops(g: Graph) -> None:
    for node in g.nodes:
        if node.op == "sum":
            node.op, node.attrs = "add", {"act": None}
        elif node.op == "reshape":
            node.op, node.attrs = "flatten", {}
        elif node.op == "matmul":
            node.op, node.attrs = "gemm", {"act": None}
            n = node.params["weight"].shape[0]
            node.params["bias"] = np.zeros(n, np.float32)


def _fold_into_weighted(g: Graph) -> None:
    """Bias Adds, BatchNormalization and per-channel Muls (layer scales) into the conv/gemm
    before them, in graph order."""
    for node in [n for n in g.nodes if n.op in ("bias_add", "batchnorm", "channel_mul")]:
        prod = _foldable(g, node)
        if prod is None and node.op == "batchnorm" and _as_depthwise(g, node):
            continue
        if prod is None:
            raise Unplaceable(
                node.name,
                _ONNX_OP[node.op],
                f"follows {_where(g, node.inputs[0])} and cannot be folded into it",
                "right after a Conv, Gemm or MatMul that has no other consumer",
            )
        p = prod.params
        if node.op == "bias_add":
            p["bias"] = (p["bias"].astype(np.float64) + node.params["bias"]).astype(np.float32)
            p.pop("bias_q", None)
        elif node.op == "channel_mul":
            k = node.params["scale"].astype(np.float64)
            w = p["weight"].astype(np.float64)
            p["weight"] = (w * k.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
            p["bias"] = (p["bias"].astype(np.float64) * k).astype(np.float32)
            for key in ("weight_q", "weight_scale", "bias_q"):  # given quantization is void
                p.pop(key, None)
        else:
            bn = {k: v.astype(np.float64) for k, v in node.params.items()}
            k = bn["gamma"] / np.sqrt(bn["var"] + node.attrs["epsilon"])
            w = p["weight"].astype(np.float64)
            p["weight"] = (w * k.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
            p["bias"] = ((p["bias"] - bn["mean"]) * k + bn["beta"]).astype(np.float32)
            for key in ("weight_q", "weight_scale", "bias_q"):  # given quantization is void
                p.pop(key, None)
        _absorb(g, prod, node)


def _as_depthwise(g: Graph, node: Node) -> bool:
    """A BatchNormalization that folds into no conv/gemm before it, on a map (1, C, H, W) or
    on the (1, C) flatten of a pooled (1, C, 1, 1) map (LeViT's head: the BatchNorm1d after the
    mean reads the map, and a flatten of its own follows): a depthwise 1x1 conv of weight ``k``
    and bias ``beta - mean * k`` per channel, on the device. False (nothing changed)
    otherwise."""
    x = g.tensors[node.inputs[0]]
    flatten = g.producer(node.inputs[0])
    if len(x.shape) == 2 and flatten is not None and flatten.op == "flatten":
        pooled = g.tensors[flatten.inputs[0]]
        if pooled.shape[2:] != (1, 1):
            return False
        # the BN reads the pooled map and writes a map of its name; a flatten of its own after it
        flat = f"{node.output}#flat"
        g.tensors[flat] = replace(g.tensors[node.output], name=flat)
        g.tensors[node.output] = replace(g.tensors[node.output], shape=pooled.shape)
        for reader in g.consumers(node.output):
            reader.inputs = [flat if i == node.output else i for i in reader.inputs]
        g.outputs = [flat if o == node.output else o for o in g.outputs]
        node.inputs = list(flatten.inputs)
        after = Node(f"{node.name}#flatten", "flatten", [node.output], flat, {}, {}, [])
        g.nodes.insert(g.nodes.index(node) + 1, after)
        if not g.consumers(flatten.output) and flatten.output not in g.outputs:
            g.nodes.remove(flatten)
            del g.tensors[flatten.output]
        x = pooled
    bn = {key: v.astype(np.float64) for key, v in node.params.items()}
    k = bn["gamma"] / np.sqrt(bn["var"] + node.attrs["epsilon"])
    channels = x.shape[1]
    if len(x.shape) != 4 or k.size != channels:
        return False
    node.op = "conv"
    node.attrs = {
        "kernel": (1, 1), "stride": (1, 1), "pads": (0, 0, 0, 0), "dilation": (1, 1),
        "group": channels, "act": None,
    }  # fmt: skip
    node.params = {
        "weight": k.reshape(channels, 1, 1, 1).astype(np.float32),
        "bias": (bn["beta"] - bn["mean"] * k).astype(np.float32),
    }
    return True


def _compose(inner: str | None, outer: str) -> str:
    """``outer(inner(x))`` for acts: relu and relu6 in any order give relu6."""
    return "relu6" if "relu6" in (inner, outer) else "relu"


def _fuse_activations(g: Graph) -> None:
    """Relu/ReLU6 into the act of the conv, gemm, add or scale before it; where none can take
    it (after a pool, a concat, a host node, or a tensor with other readers) it becomes a
    one-input ``scale`` of its own: a requantize-and-clamp layer."""
    for node in [n for n in g.nodes if n.op in ("relu", "relu6")]:
        prod = g.producer(node.inputs[0])
        if (
            prod is None
            or prod.op not in (*_WEIGHTED, "add", "scale")
            or _sole_consumer(g, prod.output) is not node
        ):
            if len(g.tensors[node.inputs[0]].shape) == 4:
                node.op, node.attrs = "scale", {"act": node.op}
                continue
            onnx_op = _ONNX_OP[node.op]
            raise Unplaceable(
                node.name,
                onnx_op,
                f"standalone {onnx_op} after {_where(g, node.inputs[0])} on a "
                f"{g.tensors[node.inputs[0]].shape} tensor is not supported",
                "Relu / Clip(0, 6) on (1, C, H, W) tensors, or right after a Conv, Gemm or Add",
            )
        prod.attrs["act"] = _compose(prod.attrs["act"], node.op)
        _absorb(g, prod, node)


def _fuse_residuals(g: Graph) -> None:
    """Fuse each add into the conv/gemm producing one of its inputs (the first that can)."""
    for node in [n for n in g.nodes if n.op == "add"]:
        for i in (0, 1):
            main, other = node.inputs[i], node.inputs[1 - i]
            prod = g.producer(main)
            if (
                main == other
                or prod is None
                or prod.op not in _WEIGHTED
                or len(prod.inputs) != 1
                or prod.attrs["act"] is not None
                or "alpha" in node.params  # a scaled sum (its producers' outputs are not)
                or _sole_consumer(g, main) is not node
                # an imported model quantizes the producer's output before the add: keep that
                # rounding point (a separate add reads the stored int8 tensor)
                or g.tensors[main].scale is not None
            ):
                continue
            prod.inputs.append(other)
            prod.attrs["act"] = node.attrs["act"]
            # The residual may be computed after the producer: run the fused node where the
            # add was (its inputs are all ready there).
            g.nodes.remove(prod)
            g.nodes[g.nodes.index(node)] = prod
            del g.tensors[prod.output]
            prod.output = node.output
            prod.onnx_nodes.extend(node.onnx_nodes)
            break


#: Channels of one piece of a grouped convolution: the default array's line.
GROUP_PIECE_CHANNELS = 16


def _groups_per_piece(group: int, in_per_group: int, out_per_group: int) -> int:
    """The fewest groups whose input and output channels both fill whole 16-channel lines
    (all of them if fewer than ``group`` cannot)."""
    for k in range(1, group + 1):
        lines = (k * in_per_group) % GROUP_PIECE_CHANNELS == 0
        if lines and (k * out_per_group) % GROUP_PIECE_CHANNELS == 0:
            return k
    return group


def _split_groups(g: Graph) -> None:
    """A grouped (not depthwise) conv becomes pieces of a few groups each - channel slices of
    its input (views, no copy), one grouped conv per slice whose groups fill whole lines (the
    array multiplies their block-diagonal weights), and a concat of the pieces' outputs (which
    they store straight into). The last piece may hold fewer groups
    (it ends at the last channel); a conv whose groups cannot fill whole lines stays whole."""
    for node in [n for n in g.nodes if n.op == "conv" and n.attrs["group"] > 1]:
        weight, group = node.params["weight"], node.attrs["group"]
        if is_depthwise(weight, group):
            continue
        o, in_per_group = weight.shape[0], weight.shape[1]
        k = _groups_per_piece(group, in_per_group, o // group)
        if k == group:
            continue
        shape, out_per_group = g.tensors[node.output].shape, o // group
        index, outputs = g.nodes.index(node), []
        new_nodes: list[Node] = []
        for p, first in enumerate(range(0, group, k)):
            count = min(k, group - first)  # groups in this piece
            inputs = []
            for i, name in enumerate(node.inputs):  # the input, and a fused residual
                per_group = in_per_group if i == 0 else out_per_group
                part = f"{node.name}/slice{i}.{p}"
                src = g.tensors[name]
                part_shape = (1, count * per_group, *src.shape[2:])
                g.tensors[part] = replace(src, name=part, shape=part_shape)
                attrs = {"start": first * per_group, "channels": count * per_group}
                new_nodes.append(Node(part, "channel_slice", [name], part, attrs))
                inputs.append(part)
            out = f"{node.name}/piece{p}"
            lo, hi = first * out_per_group, (first + count) * out_per_group
            g.tensors[out] = Tensor(out, (1, hi - lo, *shape[2:]))
            params = {  # the per-output-channel params of the piece's channels
                key: value[lo:hi] if value.ndim and len(value) == o else value
                for key, value in node.params.items()
            }
            attrs = dict(node.attrs) | {"group": count}
            new_nodes.append(Node(out, "conv", inputs, out, attrs, params, list(node.onnx_nodes)))
            outputs.append(out)
        concat = Node(node.name, "concat", outputs, node.output, {}, {}, list(node.onnx_nodes))
        g.nodes[index : index + 1] = [*new_nodes, concat]

"""The IR's ops, one :class:`~arch.ops.spec.OpSpec` each, beside its evaluator, by family.

:data:`OP_SPECS` is the registry, in the families' order; :mod:`arch.reference` and the
compiler (:mod:`compiler.op_rules`) derive their tables from it.

Adding an op: write its evaluator and its output-shape rule in its family's module (or a new
family module listed below), add its :class:`~arch.ops.spec.OpSpec` to that module's ``SPECS``,
then give it a compiler rule (``compiler/op_rules.py``); ``tests/unit/test_op_specs.py`` fails
until every table has it.
"""

from __future__ import annotations

from arch.ops import attention, conv, elementwise, host, pool, views
from arch.ops.spec import OpSpec, registry

__all__ = ["OP_SPECS", "OpSpec"]

#: Every op of a quantized graph, by name.
OP_SPECS: dict[str, OpSpec] = registry(
    conv.SPECS,  # conv, gemm
    pool.SPECS,  # maxpool, avgpool, global_avgpool
    elementwise.SPECS,  # add, scale
    views.SPECS,  # flatten, concat, channel_slice, upsample, depth_to_space, head views
    attention.SPECS,  # batch_matmul, softmax
    host.SPECS,  # host
)
